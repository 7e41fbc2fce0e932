"""A sweep's settings and results, and their files: validation, the (U, V) view, sweep archives, checkpoints."""
import numpy as np
import pytest
import torch

from softmax_as_linear.core.artifacts import DamagedFileError
from softmax_as_linear.engine.sweep import (
    TrainConfig,
    TrainResult,
    load_checkpoint,
    load_sweep,
    save_checkpoint,
    save_sweep,
)
from softmax_as_linear.experiments.presets import sweep_config
from softmax_as_linear.theory import models

TINY = TrainConfig(lengths=(3, 5), seeds=(1, 2), steps=2, record_every=1, eval_prompts=4, batch_size=2)


def _result(cfg: TrainConfig = TINY) -> TrainResult:
    g = torch.Generator().manual_seed(0)
    S, nL, nA, T, D = len(cfg.seeds), len(cfg.lengths), len(cfg.models), len(cfg.record_steps()), cfg.D
    shapes = {"W_Q": (D, D), "W_K": (D, D), "W_V": (D, D), "W_O": (1, D)}
    params = {n: torch.randn(S, nL, nA, T, *shape, generator=g, dtype=torch.float64).numpy() for n, shape in shapes.items()}
    risk = torch.rand(S, nL, nA, T, generator=g, dtype=torch.float64).numpy()
    return TrainResult(cfg, np.array(cfg.record_steps()), risk, risk / 2, params, np.full((S, nL, nA), -1), 1.5, False)


def test_uv_view_predicts_what_the_four_matrices_predict():
    """The (U, V) view of recorded weights, fed to the (U, V) model, gives the four-matrix prediction of the paper
    (Appendix A.1), written out here with numpy: yhat = W_O sum_i a_i W_V z_i, a = softmax(<W_K z_i, W_Q z_q> / sqrt D)
    or that score divided by L."""
    result = _result()
    U, V = result.uv()
    assert U.shape == (2, 2, 2, 3, 6, 6) and V.shape == (2, 2, 2, 3, 6, 6)
    assert np.all(V[..., :-1, :] == 0)  # only the last row of V reaches the prediction
    g = np.random.default_rng(0)
    tokens, query = g.standard_normal((7, 6)), g.standard_normal(6)
    for index in [(0, 0, 0, 0), (1, 1, 1, 2), (0, 1, 0, 1)]:
        w = {n: v[index] for n, v in result.params.items()}
        scores = (tokens @ w["W_K"].T) @ (w["W_Q"] @ query) / np.sqrt(6)
        values = tokens @ w["W_V"].T @ w["W_O"][0]
        for activation, a in (("softmax", np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()),
                              ("linear", scores / len(tokens))):
            expected = float(a @ values)
            got = models.predict(torch.from_numpy(tokens), torch.from_numpy(query), torch.from_numpy(U[index]),
                                 torch.from_numpy(V[index]), activation)
            assert float(got) == pytest.approx(expected, rel=1e-10, abs=1e-12), (index, activation)


def test_sweep_file_round_trip(tmp_path):
    result = _result()
    again = load_sweep(save_sweep(tmp_path / "sweep.npz", result))
    assert again.config == result.config and again.complete is False and again.seconds == 1.5
    np.testing.assert_array_equal(again.eval_risk, result.eval_risk)
    for name in result.params:
        np.testing.assert_array_equal(again.params[name], result.params[name])
    np.testing.assert_array_equal(again.parameter_gap(), result.parameter_gap())
    assert not list(tmp_path.glob(".*.tmp"))


def test_checkpoint_round_trip_and_configuration_check(tmp_path):
    state = {"config": TINY.as_dict(), "step": 3, "alive": torch.ones(2, 2, 2, dtype=torch.bool)}
    path = save_checkpoint(tmp_path / "sub" / "run.pt", state)
    loaded = load_checkpoint(path, TINY, "cpu")
    assert loaded["step"] == 3 and torch.equal(loaded["alive"], state["alive"])
    with pytest.raises(ValueError, match="different configuration"):
        load_checkpoint(path, TINY.replace(lr=0.5), "cpu")


def _as_written_before(config: TrainConfig) -> dict:
    """The configuration as files before the rename of ``activations`` to ``models`` and before ``rng`` and the
    covariate law stored it."""
    fields = config.as_dict()
    fields["activations"] = fields.pop("models")
    del fields["rng"], fields["covariates"]
    return fields


def _as_written_with_law(config: TrainConfig) -> dict:
    """The configuration as files stored it before the rename of the covariate law ``law`` to ``covariates``."""
    fields = config.as_dict()
    fields["law"] = fields.pop("covariates")
    return fields


@pytest.mark.parametrize("written", [_as_written_before, _as_written_with_law])
def test_files_written_with_the_old_field_names_still_load(tmp_path, written):
    import json

    from softmax_as_linear.core.artifacts import load_npz, save_npz
    from softmax_as_linear.experiments.sweep_stage import final_key, same_final_key

    config = TINY.replace(rng="torch", models=("linear", "softmax"),
                          covariates="gaussian" if written is _as_written_before else "uniform")
    result = _result(config)
    arrays = load_npz(save_sweep(tmp_path / "new.npz", result))
    arrays["config_json"] = np.array(json.dumps(written(config)))
    old = load_sweep(save_npz(tmp_path / "old.npz", **arrays))
    assert old.config == config and old.config.models == ("linear", "softmax")
    np.testing.assert_array_equal(old.eval_risk, result.eval_risk)

    path = save_checkpoint(tmp_path / "old.pt", {"config": written(config), "step": 1})
    assert load_checkpoint(path, config, "cpu")["step"] == 1
    with pytest.raises(ValueError, match="different configuration"):
        load_checkpoint(path, config.replace(models=("linear",)), "cpu")

    # a cached final evaluation written before the rename is still this sweep's
    key = final_key(result, 100)
    before = json.dumps({"config": written(config), "steps": 2, "n_prompts": 100})
    assert same_final_key(before, key) and same_final_key(key, key)
    assert not same_final_key(before, final_key(result, 200)) and not same_final_key("", key)


def test_parameter_gap_needs_both_activations():
    result = _result()
    assert result.parameter_gap().shape == (2, 2, 3)
    with pytest.raises(ValueError, match="both activations"):
        _result(TINY.replace(models=("linear",))).parameter_gap()


def test_index_names_the_bad_argument():
    result = _result()
    assert result.index("linear", 5, 2) == (1, 1, 1)
    with pytest.raises(ValueError, match="L=7"):
        result.index("linear", 7)
    with pytest.raises(ValueError, match="seed=3"):
        result.index("linear", 5, 3)


@pytest.mark.parametrize("field, value", [
    ("lengths", (10, 5)), ("lengths", ()), ("lengths", (0, 5)), ("models", ("softmax", "relu")),
    ("seeds", (1, 1)), ("seeds", (10_000,)), ("seeds", (1.7,)), ("seeds", (2, 0.5)), ("seeds", ("3",)), ("seeds", 3), ("steps", -1), ("batch_size", 0), ("lr", 0.0), ("optimizer", "rmsprop"),
    ("parametrisation", "three"), ("init", "xavier"), ("covariance", "toeplitz"), ("rho", 1.0), ("rho", "half"),
    ("noise_var", -0.1), ("dtype", "float16"), ("record_every", 0),
])
def test_bad_configuration_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_block_initialisation_needs_the_uv_model():
    with pytest.raises(ValueError, match="init"):
        TrainConfig(init="block")  # Assumption 5.1 is stated for the (U, V) model


def test_sampler_reaches_the_task_and_is_validated():
    assert TrainConfig(covariance="kms", sampler="published").task().sampler == "published"
    assert sweep_config("paper", "kms", sampler="published").task().sampler == "published"
    with pytest.raises(ValueError, match="sampler"):
        TrainConfig(sampler="code")


def test_whole_seeds_of_any_integer_type_are_accepted():
    assert TrainConfig(seeds=(np.int64(4), 2.0)).seeds == (4, 2)


def test_a_damaged_checkpoint_is_named_in_one_short_line(tmp_path):
    path = tmp_path / "run.pt"
    save_checkpoint(path, {"config": TINY.as_dict(), "step": 3})
    path.write_bytes(path.read_bytes()[:200])  # truncated
    with pytest.raises(DamagedFileError) as caught:
        load_checkpoint(path, TINY, "cpu")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400, str(caught.value)
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(DamagedFileError):
        load_checkpoint(path, TINY, "cpu")
    torch.save([1, 2], path)  # readable, but not a training state
    with pytest.raises(DamagedFileError, match="not a training state"):
        load_checkpoint(path, TINY, "cpu")


@pytest.mark.parametrize("error", [TypeError("bad argument"), AttributeError("no attribute"), PermissionError(13, "no")])
def test_a_code_or_system_error_while_loading_a_checkpoint_is_not_called_damage(tmp_path, monkeypatch, error):
    """A bug (TypeError, AttributeError) or a permission problem is raised as it is: telling the user to delete
    a healthy checkpoint would lose their training."""
    path = save_checkpoint(tmp_path / "run.pt", {"config": TINY.as_dict(), "step": 3})

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(torch, "load", broken)
    with pytest.raises(type(error)):
        load_checkpoint(path, TINY, "cpu")
