"""A sweep's settings and results, and their files: validation, the (U, V) view, sweep archives, checkpoints."""
import numpy as np
import pytest
import torch

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
    S, nL, nA, T, D = len(cfg.seeds), len(cfg.lengths), len(cfg.activations), len(cfg.record_steps()), cfg.D
    shapes = {"W_Q": (D, D), "W_K": (D, D), "W_V": (D, D), "W_O": (1, D)}
    params = {n: torch.randn(S, nL, nA, T, *shape, generator=g, dtype=torch.float64).numpy() for n, shape in shapes.items()}
    risk = torch.rand(S, nL, nA, T, generator=g, dtype=torch.float64).numpy()
    return TrainResult(cfg, np.array(cfg.record_steps()), risk, risk / 2, params, np.full((S, nL, nA), -1), 1.5, False)


def test_uv_view_is_the_models_formula():
    result = _result()
    U, V = result.uv()
    p = {n: torch.from_numpy(v) for n, v in result.params.items()}
    U_ref, V_ref = models.uv_from_weights(p["W_Q"], p["W_K"], p["W_V"], p["W_O"])
    np.testing.assert_allclose(U, U_ref.numpy())
    np.testing.assert_allclose(V, V_ref.numpy())
    assert U.shape == (2, 2, 2, 3, 6, 6)


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


def test_parameter_gap_needs_both_activations():
    result = _result()
    assert result.parameter_gap().shape == (2, 2, 3)
    with pytest.raises(ValueError, match="both activations"):
        _result(TINY.replace(activations=("linear",))).parameter_gap()


def test_index_names_the_bad_argument():
    result = _result()
    assert result.index("linear", 5, 2) == (1, 1, 1)
    with pytest.raises(ValueError, match="L=7"):
        result.index("linear", 7)
    with pytest.raises(ValueError, match="seed=3"):
        result.index("linear", 5, 3)


@pytest.mark.parametrize("field, value", [
    ("lengths", (10, 5)), ("lengths", ()), ("lengths", (0, 5)), ("activations", ("softmax", "relu")),
    ("seeds", (1, 1)), ("seeds", (10_000,)), ("steps", -1), ("batch_size", 0), ("lr", 0.0), ("optimizer", "rmsprop"),
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
