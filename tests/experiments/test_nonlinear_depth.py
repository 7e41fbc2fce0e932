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
    effect = nonlinear_depth.second_layer_effect(data)
    assert effect["mean"].shape == effect["se"].shape == (2,)
    assert np.allclose(effect["mean"], effect["two_layers"] - effect["one_layer"])
    steps = _count_steps(monkeypatch)
    again = reproduce("nonlinear_depth", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)[0]
    assert load_json(again) == data and steps == []  # up to date: the file is left as it is
    again.unlink()  # the finished checkpoint is still there: the file is measured again from it, no step taken
    resumed = load_json(reproduce("nonlinear_depth", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)[0])
    assert steps == [] and resumed["per_seed"]["risk"] == per["risk"]


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
