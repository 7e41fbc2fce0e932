"""Sample-average optima of one attention layer: its predictors against the library's attention, its gradient, and
the optimum's stationarity."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear.experiments.nonlinear import nonlinear_config
from softmax_as_linear.theory import attention_optimum as ao
from softmax_as_linear.theory.kernel_smoother import nadaraya_watson
from softmax_as_linear.theory.models import predict


@pytest.fixture(scope="module")
def prompts():
    task = nonlinear_config("lecture").task()
    return ao.Prompts.draw(task, 300, 40, torch.Generator().manual_seed(3))


def _random_theta(model, d, seed):
    rng = np.random.default_rng(seed)
    theta = 0.5 * rng.standard_normal(ao.parameter_count(model, d))
    if model in ("softmax", "nadaraya_watson"):
        theta[0] = math.log(20.0)
    return theta


@pytest.mark.parametrize("model", ["softmax", "nadaraya_watson", "linear"])
def test_predictions_are_the_library_attention(prompts, model):
    theta = _random_theta(model, prompts.d, 1)
    U, V = ao.to_uv(model, theta, prompts.d)
    activation = "linear" if model == "linear" else "softmax"
    expected = 0.5 * (predict(prompts.tokens, prompts.query, U, V, activation) - prompts.target) ** 2
    assert torch.allclose(ao.losses(model, theta, prompts), expected, atol=1e-12, rtol=1e-10)
    if model == "softmax":  # the window is tr(U_xx)/d
        assert float(torch.trace(U[:2, :2])) / 2 == pytest.approx(ao.window(model, theta))
    if model == "nadaraya_watson":
        nw = nadaraya_watson(prompts.tokens, prompts.query, math.exp(theta[0]))
        assert torch.allclose(ao.losses(model, theta, prompts), 0.5 * (nw - prompts.target) ** 2, atol=1e-12)


def test_affine_reference_is_linear_attention_plus_the_mean_token(prompts):
    theta = _random_theta("affine", prompts.d, 2)
    D = prompts.d + 1
    U, V = ao.to_uv("linear", theta[D:], prompts.d)
    pred = predict(prompts.tokens, prompts.query, U, V, "linear") + prompts.tokens.mean(1) @ torch.as_tensor(theta[:D])
    assert torch.allclose(ao.losses("affine", theta, prompts), 0.5 * (pred - prompts.target) ** 2, atol=1e-12)


@pytest.mark.parametrize("model", ao.OPTIMUM_MODELS)
def test_gradient_and_chunks(prompts, model, monkeypatch):
    theta = _random_theta(model, prompts.d, 3)
    value, grad = ao.loss_and_gradient(model, theta, prompts)
    assert value == pytest.approx(float(ao.losses(model, theta, prompts).mean()), rel=1e-12)
    h = 1e-6
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        numeric = (ao.loss_and_gradient(model, theta + e, prompts)[0] - ao.loss_and_gradient(model, theta - e, prompts)[0]) / (2 * h)
        assert grad[j] == pytest.approx(numeric, rel=1e-5, abs=1e-8)
    monkeypatch.setattr(ao, "CHUNK_TOKENS", 7 * prompts.L)  # many chunks, one of them short
    fresh = ao.Prompts(prompts.tokens, prompts.query, prompts.target)
    value_chunked, grad_chunked = ao.loss_and_gradient(model, theta, fresh)
    assert value_chunked == pytest.approx(value, rel=1e-12) and np.allclose(grad_chunked, grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("model", ["softmax", "nadaraya_watson", "linear", "affine"])
def test_the_optimum_is_stationary_and_lower_than_its_neighbours(prompts, model):
    theta0 = ao.start(model, prompts.d, 20.0) if model == "softmax" else None
    result = ao.fit(model, prompts, theta0)
    assert result.gradient_norm < 1e-6 and np.abs(result.newton).max() < 1e-4
    assert result.curvature > -1e-8  # a minimum (linear attention has one flat direction: the scale of v against W)
    rng = np.random.default_rng(0)
    for _ in range(8):
        moved = result.theta + 0.02 * rng.standard_normal(result.theta.size)
        assert float(ao.losses(model, moved, prompts).mean()) > result.risk
    if model == "softmax":  # all the weights do at least as well as the window alone
        assert result.risk <= ao.fit("nadaraya_watson", prompts).risk + 1e-12


@pytest.mark.slow
def test_softmax_window_narrows_from_short_to_long_prompts():
    # independent prompt sets at L = 10 and L = 300: the optimal window grows with L by far more than its spread
    task = nonlinear_config("lecture").task()
    windows = {}
    for L, n in ((10, 3000), (300, 300)):
        fits = [ao.fit("softmax", ao.Prompts.draw(task, n, L, torch.Generator().manual_seed(10 + k)),
                       ao.start("softmax", 2, 30.0)) for k in range(2)]
        windows[L] = [f.window for f in fits]
    assert min(windows[300]) > 1.5 * max(windows[10])


def test_bad_arguments_are_named(prompts):
    with pytest.raises(ValueError, match="model"):
        ao.fit("quadratic", prompts)
    with pytest.raises(ValueError, match="theta0"):
        ao.fit("softmax", prompts, [0.0])
    with pytest.raises(ValueError, match="w"):
        ao.start("softmax", 2, -1.0)
