"""The infinite-prompt deep stepper: K = 1 is the one-layer limit model, its gradient is the large-L limit of the finite
network's, it draws the finite sweep's batches, and the engine's loop trains it."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear import RegressionTask
from softmax_as_linear.core import seeding
from softmax_as_linear.engine.deep import DeepConfig, DeepStepper
from softmax_as_linear.engine.deep_limit import DeepLimitStepper
from softmax_as_linear.engine.train import run
from softmax_as_linear.theory import depth
from softmax_as_linear.theory.deep_limit import deep_limit_prediction, token_covariance_unchecked
from softmax_as_linear.theory.limit_model import infinite_prompt_prediction

TASK = RegressionTask.isotropic(d=2)


def _cfg(**changes):
    settings = dict(task=TASK, seeds=(0, 1), lengths=(5, 9), models=(("softmax", 1), ("softmax", 2), ("linear", 2)),
                    batch_size=8, held_out_prompts=16, lr=0.05, optimizer="sgd")
    settings.update(changes)
    return DeepConfig(**settings)


def _weights(K, seed=0, scale=0.4):
    g = torch.Generator().manual_seed(seed)
    U = scale * torch.randn(K, 3, 3, generator=g, dtype=torch.float64)
    V = torch.zeros(K, 3, 3, dtype=torch.float64)
    V[:, -1] = scale * torch.randn(K, 3, generator=g, dtype=torch.float64)
    return U, V


def test_one_layer_is_the_one_layer_limit_model():
    U, V = _weights(1)
    stream = TASK.stream(64, torch.Generator().manual_seed(3))
    for activation in ("softmax", "linear"):
        deep = deep_limit_prediction(U, V, TASK, stream.w, stream.query, activation)
        one = infinite_prompt_prediction(U[0], V[0], TASK, stream.w, stream.query, activation)
        assert torch.allclose(deep, one, atol=1e-13, rtol=0)
    assert torch.allclose(token_covariance_unchecked(TASK, stream.w), TASK.token_covariance(stream.w), atol=1e-15)


def test_the_stepper_columns_are_the_recursion_and_k1_the_one_layer_limit():
    stepper = DeepLimitStepper(_cfg(), dtype=torch.float64)
    tokens, query, target, w = stepper._held_out
    losses = stepper.losses(tokens, query, target, w=w)  # (S, 1, nA, B)
    assert losses.shape == (2, 1, 3, 16)
    U, v = stepper.weights()["U"], stepper.weights()["v"]
    for s in range(2):
        for a, (activation, K) in enumerate(stepper.cfg.models):
            V = torch.zeros(K, 3, 3, dtype=torch.float64)
            V[:, -1] = v[s, 0, a, :K]
            if K == 1:
                pred = infinite_prompt_prediction(U[s, 0, a, 0], V[0], TASK, w[s], query[s], "softmax")
            else:
                pred = depth.gaussian_recursion(torch.zeros(3, dtype=torch.float64), TASK.token_covariance(w[s]),
                                                query[s], U[s, 0, a, :K], V, activation).prediction
            assert torch.allclose(losses[s, 0, a], 0.5 * (pred - target[s]) ** 2, atol=1e-12)


def test_it_draws_the_batches_of_the_finite_sweep_and_starts_from_its_weights():
    cfg = _cfg()
    finite, limit = DeepStepper(cfg), DeepLimitStepper(cfg)
    for name in ("U", "v"):
        assert torch.equal(limit.weights()[name][:, 0], finite.weights()[name][:, -1])
    for _ in range(2):
        a, b = finite._draw(), limit._draw()
        for x, y in zip(a, b[:3]):
            assert torch.equal(x, y)  # same tokens, queries and targets, bit for bit
    for x, y in zip(finite._held_out, limit._held_out[:3]):
        assert torch.equal(x, y)


def test_it_runs_through_the_engine_loop_and_resumes_exactly():
    cfg = _cfg(seeds=(4,), lengths=(6,))
    records = run(DeepLimitStepper(cfg), 6, [0, 3, 6])
    assert records.engine_path == "deep_limit" and records.eval_risk.shape == (1, 1, 3, 3)
    assert np.isfinite(records.eval_risk).all() and records.history["U"].shape == (1, 1, 3, 3, 2, 3, 3)
    # the risk falls on the held-out prompts (6 steps of SGD from the block start)
    assert (records.eval_risk[..., -1] < records.eval_risk[..., 0]).all()
    straight = DeepLimitStepper(cfg)
    for _ in range(4):
        straight.step()
    paused = DeepLimitStepper(cfg)
    paused.step()
    paused.step()
    resumed = DeepLimitStepper(cfg)
    resumed.load_state(paused.state())
    resumed.step()
    resumed.step()
    assert torch.equal(resumed.weights()["U"], straight.weights()["U"])


def test_refuses_non_gaussian_covariates():
    with pytest.raises(ValueError, match="Gaussian"):
        DeepLimitStepper(_cfg(task=RegressionTask.isotropic(d=2, covariates="uniform")))


@pytest.mark.slow
def test_gradient_is_the_large_prompt_limit_of_the_finite_gradient():
    """At L = 400 the finite two-layer gradient, averaged over prompts, is the recursion's within 4 standard errors
    of the paired per-group differences; the same test rejects the gradient of the network without its second layer."""
    task = RegressionTask.isotropic(d=2)
    U, V = _weights(2, seed=1, scale=0.5)
    L, groups, per_group = 400, 16, 6
    g = seeding.generator(11, "prompts", L)

    def gradient(loss):
        U_, V_ = U.clone().requires_grad_(True), V.clone().requires_grad_(True)
        loss(U_, V_).backward()
        return torch.cat([U_.grad.flatten(), V_.grad[:, -1].flatten()])

    differences, truncated = [], []
    for _ in range(groups):
        batch = task.sample(per_group, L, g, dtype=torch.float64)
        finite = gradient(lambda U_, V_: (0.5 * (depth.deep_predict(batch.tokens, batch.query, U_, V_)
                                                  - batch.target) ** 2).mean())
        limit = gradient(lambda U_, V_: (0.5 * (deep_limit_prediction(U_, V_, task, batch.w, batch.query)
                                                 - batch.target) ** 2).mean())
        one = gradient(lambda U_, V_: (0.5 * (deep_limit_prediction(U_[:1], V_[:1], task, batch.w, batch.query)
                                               - batch.target) ** 2).mean())
        differences.append(finite - limit)
        truncated.append(finite - one)
    for rows, should_hold in ((torch.stack(differences), True), (torch.stack(truncated), False)):
        mean, se = rows.mean(0), rows.std(0) / math.sqrt(groups)
        within = bool((mean.abs() <= 4 * se + 1e-12).all())
        assert within == should_hold


def test_the_limit_losses_take_the_base_class_arguments_and_the_tasks_by_name():
    import inspect

    base = list(inspect.signature(DeepStepper.losses).parameters)
    assert list(inspect.signature(DeepLimitStepper.losses).parameters)[:len(base)] == base
    stepper = DeepLimitStepper(_cfg(), dtype=torch.float64)
    tokens, query, target, w = stepper._held_out
    own = stepper.losses(tokens, query, target, w=w)
    weights = stepper.weights()
    assert torch.equal(stepper.losses(tokens, query, target, weights["U"], weights["v"], w=w), own)
    assert torch.equal(stepper.losses(tokens, query, target, 0 * weights["U"], w=w), stepper.losses(
        tokens, query, target, 0 * weights["U"], weights["v"], w=w))
    assert not torch.equal(stepper.losses(tokens, query, target, 0 * weights["U"], w=w), own)
    with pytest.raises(ValueError, match="w must be given"):
        stepper.losses(tokens, query, target)
    assert torch.equal(stepper.batch_losses(stepper._held_out), own)
