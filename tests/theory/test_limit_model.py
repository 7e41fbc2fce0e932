"""The infinite-prompt softmax model of in-context regression for any covariate law, against finite prompts,
Lemma 2.1, quadrature and Monte Carlo."""
import math

import pytest
import torch

from softmax_as_linear.theory import covariates, flow_limits, limit_model, regression, risks
from softmax_as_linear.theory.concentration import stream_moments

NON_GAUSSIAN = ("uniform", "rademacher")


def _task(name, covariance="isotropic", sampler="paper"):
    if covariance == "isotropic":
        return regression.RegressionTask.isotropic(3, 0.4, 0.2, sampler, name)
    return regression.RegressionTask.kms(3, 0.5, 0.4, 0.2, sampler, name)


def _uv(seed, scale=0.5, D=4):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(D, D, generator=g, dtype=torch.float64), scale * torch.randn(D, D, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("covariance", ["isotropic", "kms"])
def test_gaussian_law_gives_lemma_2_1(covariance):
    task = _task("gaussian", covariance)
    stream = task.stream(50, torch.Generator().manual_seed(0))
    u = torch.randn(50, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mean, cov = limit_model.tilted_moments(task, u, stream.w, covariance=True)
    gamma = task.token_covariance(stream.w)
    assert torch.allclose(mean, (gamma @ u.unsqueeze(-1)).squeeze(-1), atol=1e-12)
    assert torch.allclose(cov, gamma, atol=1e-12)
    U, V = _uv(2)
    assert torch.allclose(limit_model.infinite_prompt_prediction(U, V, task, stream.w, stream.query),
                          (V[-1] * (gamma @ (stream.query @ U.T).unsqueeze(-1)).squeeze(-1)).sum(-1), atol=1e-12)


@pytest.mark.parametrize("name", NON_GAUSSIAN)
@pytest.mark.parametrize("covariance", ["isotropic", "kms"])
def test_tilted_moments_are_the_gradient_and_hessian_of_the_cgf(name, covariance):
    task = _task(name, covariance)
    w = torch.randn(3, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 0.6
    u = torch.tensor([0.3, -0.8, 0.5, 0.7], dtype=torch.float64, requires_grad=True)
    K = limit_model.token_log_mgf(task, u, w)
    (grad,) = torch.autograd.grad(K, u, create_graph=True)
    hess = torch.stack([torch.autograd.grad(grad[i], u, retain_graph=True)[0] for i in range(4)])
    mean, cov = limit_model.tilted_moments(task, u.detach(), w, covariance=True)
    assert torch.allclose(mean, grad.detach(), atol=1e-10) and torch.allclose(cov, hess, atol=1e-8)
    # the log-MGF itself, by Monte Carlo over tokens of that task
    g = torch.Generator().manual_seed(4)
    tokens = task.token_draw(w.expand(1, 3), g)(400_000)[0]
    weights = torch.exp(tokens @ u.detach())
    assert abs(math.log(float(weights.mean())) - float(K.detach())) < 0.02


@pytest.mark.parametrize("name", NON_GAUSSIAN)
@pytest.mark.parametrize("covariance", ["isotropic", "kms"])
def test_long_prompts_converge_at_the_delta_method_rate(name, covariance):
    # L E[(yhat_L - yhat_inf)^2 / C] -> 1 for each (w, x_q): the mean over prompts, with its standard error.
    # At L = 5,000 the four means (0.92 to 1.13) show no bias beyond their spread, as at 20,000, and a constant C
    # off by a factor 2 is rejected as surely (its deviation is 1.9 to 2.7 times the allowed one, 1.9 to 2.9 at 20,000)
    task = _task(name, covariance)
    U, V = _uv(5)
    P, L = 300, 5_000
    stream = task.stream(P, torch.Generator().manual_seed(6))
    limit = limit_model.infinite_prompt_prediction(U, V, task, stream.w, stream.query)
    moments = stream_moments(stream.tokens, L, stream.query.unsqueeze(1), U)
    finite = moments.tilted_mean[:, 0] @ V[-1]
    ratio = L * (finite - limit) ** 2 / limit_model.gap_constant(U, V, task, stream.w, stream.query)
    mean, se = float(ratio.mean()), float(ratio.std()) / math.sqrt(P)
    assert abs(mean - 1) < 4 * se + 0.05, (mean, se)


@pytest.mark.parametrize("name", NON_GAUSSIAN)
def test_linear_attention_limit_depends_on_second_moments_only(name):
    task = _task(name, "kms")
    U, V = _uv(7)
    stream = task.stream(40, torch.Generator().manual_seed(8))
    # 50,000 tokens: the finite prompts' own spread leaves a relative mean square of 2e-5 to 6e-5 (8e-6 at 200,000),
    # far below the 1e-3 allowed; it adds to any error of the limit, so a wrong limit fails at least as surely
    moments = stream_moments(stream.tokens, 50_000, stream.query.unsqueeze(1), U)
    finite = moments.linear_output(V)[:, 0, -1]
    limit = limit_model.infinite_prompt_prediction(U, V, task, stream.w, stream.query, "linear")
    gaussian = regression.RegressionTask.kms(3, 0.5, 0.4, 0.2)
    assert torch.allclose(limit, limit_model.infinite_prompt_prediction(U, V, gaussian, stream.w, stream.query))
    assert float(((finite - limit) ** 2).mean()) < 1e-3 * float((limit**2).mean())
    # and it is not the softmax limit of that law
    softmax = limit_model.infinite_prompt_prediction(U, V, task, stream.w, stream.query)
    assert float(((softmax - limit) ** 2).mean()) > 0.01


@pytest.mark.parametrize("name", ("gaussian",) + NON_GAUSSIAN)
def test_risk_estimate_matches_the_closed_forms_and_its_error(name):
    task = _task(name, "kms")
    U, V = _uv(9)
    mean, se = limit_model.infinite_prompt_risk_estimate(U, V, task, 1 << 17, seed=3, activation="linear")
    closed = float(risks.infinite_prompt_risk(U, V, task, activation="linear"))
    assert abs(float(mean) - closed) < 4 * float(se)
    if name == "gaussian":
        mean, se = limit_model.infinite_prompt_risk_estimate(U, V, task, 1 << 17, seed=3)
        assert abs(float(mean) - float(risks.infinite_prompt_risk(U, V, task))) < 4 * float(se)
    else:
        with pytest.raises(ValueError, match="task"):
            risks.infinite_prompt_risk(U, V, task)
    batched, _ = limit_model.infinite_prompt_risk_estimate(torch.stack([U, 2 * U]), torch.stack([V, V]), task, 1024)
    assert batched.shape == (2,)


@pytest.mark.parametrize("name", NON_GAUSSIAN)
@pytest.mark.parametrize("covariance", ["isotropic", "kms"])
def test_block_risk_by_quadrature_matches_monte_carlo(name, covariance):
    task = _task(name, covariance)
    g = torch.Generator().manual_seed(10)
    U, V = flow_limits.block_init(task, 0.3)
    U[:3, :3] = 0.4 * torch.randn(3, 3, generator=g, dtype=torch.float64)
    V[-1, -1] = 1.4
    exact = float(limit_model.block_infinite_prompt_risk(U[:3, :3], V[-1, -1], task, n_nodes=8))
    mean, se = limit_model.infinite_prompt_risk_estimate(U, V, task, 1 << 17, seed=11)
    assert abs(float(mean) - exact) < 4 * float(se)
    # the one-dimensional path (Sigma = I, diagonal A_x) against the tensor grid
    if covariance == "isotropic":
        diagonal = torch.diag(torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64))
        one_d = float(limit_model.block_infinite_prompt_risk(diagonal, V[-1, -1], task))
        grid = float(limit_model.block_infinite_prompt_risk(diagonal + 0 * U[:3, :3] + 1e-300, V[-1, -1], task, n_nodes=10))
        assert abs(one_d - grid) < 1e-7


def test_block_risk_does_not_depend_on_the_label_noise_but_through_its_constant():
    noisy, clean = _task("uniform"), regression.RegressionTask.isotropic(3, 0.4, 0.0, covariates="uniform")
    A, v = 0.3 * torch.eye(3, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    assert abs(float(limit_model.block_infinite_prompt_risk(A, v, noisy))
               - float(limit_model.block_infinite_prompt_risk(A, v, clean)) - 0.1) < 1e-14


@pytest.mark.slow
def test_rademacher_has_an_exact_minimiser_and_uniform_does_not():
    # Rademacher, Sigma = I: v_y tanh(a) = 1 predicts w^T x_q exactly; uniform: a positive excess at every a
    task = _task("rademacher")
    for a in (0.2, 0.7, 1.5):
        risk = limit_model.block_infinite_prompt_risk(a * torch.eye(3, dtype=torch.float64),
                                                      torch.tensor(1 / math.tanh(a), dtype=torch.float64), task)
        assert abs(float(risk) - task.noise_var / 2) < 1e-14
    uniform = _task("uniform")
    for a in (0.2, 0.7):
        vs = torch.linspace(0.5 / a, 2 / a, 2001, dtype=torch.float64)
        risks = torch.stack([limit_model.block_infinite_prompt_risk(a * torch.eye(3, dtype=torch.float64), v, uniform)
                             for v in vs])
        assert float(risks.min()) - uniform.noise_var / 2 > 1e-6


def test_bad_input_names_the_argument():
    task = _task("uniform")
    with pytest.raises(ValueError, match="activation"):
        limit_model.infinite_prompt_risk_estimate(torch.eye(4), torch.eye(4), task, activation="tanh")
    with pytest.raises(ValueError, match="n_samples"):
        limit_model.infinite_prompt_risk_estimate(torch.eye(4), torch.eye(4), task, n_samples=1)
    with pytest.raises(ValueError, match="U"):
        limit_model.gap_constant(torch.eye(3), torch.eye(4), task, torch.zeros(2, 3), torch.zeros(2, 4))
    assert covariates.moment("uniform", 4) == task.fourth_moment
