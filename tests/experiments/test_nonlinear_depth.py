"""Chapter 8's second layer: one- and two-layer attention trained on the nonlinear task, its file and its reading."""
import numpy as np
import pytest
import torch

from softmax_as_linear.core.artifacts import load_json
from softmax_as_linear.experiments import nonlinear, nonlinear_depth
from softmax_as_linear.experiments.reproduce import check_options, reproduce
from softmax_as_linear.experiments.reproductions import REPRODUCTIONS
from softmax_as_linear.experiments.result_files import command_for


def test_the_task_is_chapter_8s():
    settings = nonlinear_depth.nonlinear_depth_settings("smoke")
    one_layer = nonlinear.nonlinear_config("smoke").task()
    assert repr(settings.task()) == repr(one_layer)
    assert torch.equal(settings.task().omega, one_layer.omega) and torch.equal(settings.task().phase, one_layer.phase)
    with pytest.raises(ValueError, match="decay_at"):
        nonlinear_depth.nonlinear_depth_settings("smoke", decay_at=0.0)


def test_reproduce_writes_a_paired_file_with_provenance_and_resumes(tmp_path, monkeypatch):
    written = reproduce("nonlinear_depth", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)
    assert written == [tmp_path / REPRODUCTIONS["nonlinear_depth"].file("smoke")]
    data = load_json(written[0])
    prov = data["provenance"]
    assert {"device", "torch", "commit", "wall_seconds", "settings", "seeds", "engine_path", "date"} <= set(prov)
    assert prov["engine_path"] == "deep" and prov["settings"]["labels"] == "cosine" and data["complete"]
    per = data["per_seed"]
    risk = {name: np.asarray(per["risk"][name]) for name in data["models"]}
    assert risk["softmax_2"].shape == (2, 2) and np.isfinite(risk["softmax_2"]).all()
    _check_pairing(data, nonlinear_depth.nonlinear_depth_settings("smoke"))
    assert np.asarray(per["windows"]["softmax_2"]).shape == (2, 2, 2)  # (seeds, lengths, layers)
    assert np.asarray(per["windows"]["softmax_1"])[..., 1].max() == 0  # a one-layer column's second layer stays 0
    _check_second_layer_effect(data)
    steps = _count_steps(monkeypatch)
    again = reproduce("nonlinear_depth", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)[0]
    assert load_json(again) == data and steps == []  # up to date: the file is left as it is
    again.unlink()  # the finished checkpoint is still there: the file is measured again from it, no step taken
    resumed = load_json(reproduce("nonlinear_depth", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)[0])
    assert steps == [] and resumed["per_seed"]["risk"] == per["risk"]


def _check_second_layer_effect(data):
    """The second layer's effect against the per-seed risks, computed here: each seed's two-layer minus one-layer risk
    (the two on the same prompts), their mean over seeds and its standard error, the sample sd over seeds (S - 1)
    over sqrt(S), written out."""
    per = data["per_seed"]
    for model in ("softmax", "linear"):
        effect = nonlinear_depth.second_layer_effect(data, model)
        one, two = (np.asarray(per["risk"][f"{model}_{K}"], dtype=float) for K in (1, 2))  # (S, nL)
        S, nL = one.shape
        assert S > 1 and effect["mean"].shape == effect["se"].shape == (nL,)
        assert np.allclose(effect["per_seed"], two - one, rtol=1e-4, atol=1e-9)  # paired on the same prompts
        for i in range(nL):
            d = [float(two[s, i] - one[s, i]) for s in range(S)]
            mean = sum(d) / S
            se = (sum((x - mean) ** 2 for x in d) / (S - 1)) ** 0.5 / S ** 0.5
            assert effect["mean"][i] == pytest.approx(mean, rel=1e-4, abs=1e-9), (model, i)
            assert effect["se"][i] == pytest.approx(se, rel=1e-3, abs=1e-9), (model, i)
            assert effect["one_layer"][i] == pytest.approx(sum(one[:, i]) / S)
            assert effect["two_layers"][i] == pytest.approx(sum(two[:, i]) / S)


def test_the_second_layers_effect_on_known_numbers():
    """Three seeds, two lengths, differences chosen so that the answer is known: means 2 and -4, standard errors
    1/sqrt(3) and 4/sqrt(3) (sample sds 1 and 4 over sqrt(3)); one seed: no standard error."""
    one = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    difference = np.array([[1.0, -4.0], [3.0, -8.0], [2.0, 0.0]])
    other = np.full_like(one, 7.0)  # the linear columns: no effect
    data = {"lengths": [5, 10], "per_seed": {
        "difference": {"second_layer_softmax": difference.tolist(), "second_layer_linear": (0 * other).tolist()},
        "risk": {"softmax_1": one.tolist(), "softmax_2": (one + difference).tolist(), "linear_1": other.tolist(),
                 "linear_2": other.tolist()}}}
    effect = nonlinear_depth.second_layer_effect(data)
    assert effect["mean"] == pytest.approx([2.0, -4.0]) and effect["se"] == pytest.approx([3 ** -0.5, 4 / 3 ** 0.5])
    assert effect["one_layer"] == pytest.approx([2.0, 20.0]) and effect["two_layers"] == pytest.approx([4.0, 16.0])
    linear = nonlinear_depth.second_layer_effect(data, "linear")
    assert linear["mean"] == pytest.approx([0.0, 0.0]) and linear["one_layer"] == pytest.approx([7.0, 7.0])
    _check_second_layer_effect(data)
    single = {**data, "per_seed": {k: {n: v[:1] for n, v in table.items()} for k, table in data["per_seed"].items()}}
    assert np.isnan(nonlinear_depth.second_layer_effect(single)["se"]).all()


def _count_steps(monkeypatch) -> list:
    """Every training step taken from now on appends to the list returned."""
    from softmax_as_linear.engine.deep_schedule import DecayedDeepStepper

    steps, real = [], DecayedDeepStepper.step
    monkeypatch.setattr(DecayedDeepStepper, "step", lambda self: steps.append(1) or real(self))
    return steps


def _check_pairing(data, settings):
    """The file's paired differences against an independent computation: every model of a seed and length scored
    on the same fresh prompts of the seed's ``"evaluation"`` stream (read again here, the weights run through
    :func:`~softmax_as_linear.theory.depth.deep_forward`), the differences and their standard errors those of the
    per-prompt differences, and the second layer's effect paired: its standard error far below that of independent
    prompts."""
    from softmax_as_linear.core import seeding
    from softmax_as_linear.experiments.depth_regression import DIFFERENCES
    from softmax_as_linear.theory.depth import deep_forward

    per, task = data["per_seed"], settings.task()
    U, v = np.asarray(per["U"]), np.asarray(per["v"])
    for s, seed in enumerate(settings.seeds):
        batch = task.sample(settings.final_prompts, max(settings.lengths),
                            seeding.generator(seed, "evaluation", max(settings.lengths)))
        for i, L in enumerate(settings.lengths):
            losses = {}
            for a, name in enumerate(data["models"]):
                weights = torch.as_tensor(U[s, i, a])
                values = torch.zeros_like(weights)
                values[..., -1, :] = torch.as_tensor(v[s, i, a])
                out = deep_forward(batch.tokens[:, :L].double(), batch.query.double(), weights, values,
                                   name.split("_")[0])[..., -1]
                losses[name] = (0.5 * (out - batch.target.double()) ** 2).numpy()
            for name, (first, second) in DIFFERENCES.items():
                paired = losses[first] - losses[second]
                se = paired.std(ddof=1) / np.sqrt(paired.size)
                assert per["difference"][name][s][i] == pytest.approx(paired.mean(), rel=1e-3, abs=1e-6), name
                assert per["difference_se"][name][s][i] == pytest.approx(se, rel=1e-2), name
                if name.startswith("second_layer"):  # one and two layers of one activation move together
                    unpaired = np.hypot(per["risk_se"][first][s][i], per["risk_se"][second][s][i])
                    assert per["difference_se"][name][s][i] < 0.5 * unpaired, name


def test_options_and_command():
    for option in (dict(seeds=3), dict(rng="philox")):
        with pytest.raises(ValueError, match="nonlinear_depth"):
            check_options("lecture", None, names=["nonlinear_depth"], **option)
    check_options("lecture", None, names=["nonlinear_depth"], shard=(3, 3))  # the lecture preset's three seeds
    with pytest.raises(ValueError, match="use 3 shards or fewer"):
        check_options("lecture", None, names=["nonlinear_depth"], shard=(1, 4))
    assert command_for("nonlinear_depth_lecture.json").endswith("reproduce nonlinear_depth --preset lecture")
    assert command_for("nonlinear_lecture.json").endswith("reproduce nonlinear --preset lecture")


def test_chapters_7_and_8_share_one_settings_class_and_take_the_schedule_from_the_engine():
    import ast
    import inspect

    from softmax_as_linear.engine.deep_schedule import DeepSweepSettings
    from softmax_as_linear.experiments import depth_regression, nonlinear_depth

    for cls in (depth_regression.DepthSettings, nonlinear_depth.NonlinearDepthSettings):
        assert issubclass(cls, DeepSweepSettings)
        assert not {"__post_init__", "deep_config", "as_dict", "replace", "record_steps"} & set(vars(cls))
    imported = {alias.name for node in ast.walk(ast.parse(inspect.getsource(nonlinear_depth)))
                if isinstance(node, ast.ImportFrom) and node.module == "depth_regression" for alias in node.names}
    assert not imported & {"DecaySchedule", "DECAY_AT", "DECAY_FACTOR", "DEPTH_MODELS", "DepthSettings"}
    settings = nonlinear_depth.nonlinear_depth_settings("smoke")
    assert list(settings.as_dict())[-5:] == ["noise_var", "labels", "rng", "covariates", "models"]
    assert settings.replace(steps=20).steps == 20
    for change, name in (({"decay_at": 0}, "decay_at"), ({"final_prompts": 1}, "final_prompts"),
                         ({"steps": 0}, "steps")):
        with pytest.raises(ValueError, match=name):
            settings.replace(**change)
    with pytest.raises(ValueError, match="lengths must be increasing"):
        depth_regression.depth_settings("smoke", lengths=(20, 10))
