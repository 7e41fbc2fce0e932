"""In-context regression: closed-form risks against Monte Carlo, gradients, reference solutions, the two
samplers, a degenerate input covariance (Appendix F.3), bad input."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear.theory import regression
from softmax_as_linear.theory.attention import linear_attention, softmax_attention
from softmax_as_linear.theory.flow import infinite_prompt_flow

from helpers import random_spd, rank_four_covariance

TASKS = {
    "isotropic": lambda: regression.RegressionTask.isotropic(d=3, task_var=0.5, noise_var=0.2),
    "kms": lambda: regression.RegressionTask.kms(d=3, rho=0.6, task_var=0.4, noise_var=0.1),
    "random": lambda: regression.RegressionTask(3, random_spd(3, torch.Generator().manual_seed(99)), 0.7, 0.3),
}


def _random_uv(seed, D=4, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(D, D, generator=g, dtype=torch.float64),
            scale * torch.randn(D, D, generator=g, dtype=torch.float64))


def _mc_mean(values):
    return float(values.mean()), float(values.std() / math.sqrt(values.numel()))


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("seed", [21, 22])
def test_infinite_prompt_risk_monte_carlo(name, seed):
    # Independent estimate: draw w, x_q, eps_q; the infinite-prompt prediction is v^T Gamma_w U z_q.
    task = TASKS[name]()
    U, V = _random_uv(seed)
    g = torch.Generator().manual_seed(1000 + seed)
    n = 400_000
    w = torch.randn(n, 3, generator=g, dtype=torch.float64) * math.sqrt(task.task_var)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(task.covariance).T
    y = (x * w).sum(-1) + math.sqrt(task.noise_var) * torch.randn(n, generator=g, dtype=torch.float64)
    z = torch.cat([x, torch.zeros(n, 1, dtype=torch.float64)], -1)
    sigma = task.covariance
    sw = w @ sigma
    gamma = torch.zeros(n, 4, 4, dtype=torch.float64)
    gamma[:, :3, :3] = sigma
    gamma[:, :3, 3] = sw
    gamma[:, 3, :3] = sw
    gamma[:, 3, 3] = (sw * w).sum(-1) + task.noise_var
    pred = torch.einsum("j,njk,kl,nl->n", V[3], gamma, U, z)
    estimate, se = _mc_mean(0.5 * (pred - y) ** 2)
    closed = float(regression.infinite_prompt_risk(U, V, task))
    assert abs(closed - estimate) < 5 * se, (closed, estimate, se)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["isotropic", "kms"])
def test_infinite_prompt_risk_matches_long_prompts(name):
    # Finite prompts of 4000 tokens with softmax and linear attention approach R_inf.
    task = TASKS[name]()
    U, V = _random_uv(5, scale=0.3)
    batch = task.sample(3000, 4000, torch.Generator().manual_seed(8), dtype=torch.float64)
    closed = float(regression.infinite_prompt_risk(U, V, task))
    for attend in (softmax_attention, linear_attention):
        pred = attend(batch.tokens, batch.query, U, V)[:, -1]
        estimate, se = _mc_mean(0.5 * (pred - batch.target) ** 2)
        assert abs(closed - estimate) < 5 * se + 0.01 * closed, (attend.__name__, closed, estimate, se)


def test_token_covariance_matches_samples():
    task = TASKS["kms"]()
    g = torch.Generator().manual_seed(31)
    batch = task.sample(1, 200_000, g, dtype=torch.float64)
    tokens = batch.tokens[0]
    empirical = tokens.T @ tokens / tokens.shape[0]
    assert torch.allclose(empirical, task.token_covariance(batch.w[0]), atol=0.02)


@pytest.mark.parametrize("name", TASKS)
def test_infinite_prompt_risk_gradient(name):
    task = TASKS[name]()
    U, V = _random_uv(7)
    U.requires_grad_(True)
    V.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: regression.infinite_prompt_risk(a, b, task), (U, V))


def test_infinite_prompt_risk_batched():
    task = TASKS["kms"]()
    U, V = _random_uv(9)
    stacked = regression.infinite_prompt_risk(torch.stack([U, 2 * U]), torch.stack([V, V]), task)
    assert stacked.shape == (2,)
    assert torch.isclose(stacked[1], regression.infinite_prompt_risk(2 * U, V, task))


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("L", [5, 40])
def test_optimal_linear_risk_monte_carlo(name, L):
    # The optimum is attained by linear attention at limit_parameters(task, L): check it on sampled prompts.
    task = TASKS[name]()
    U, V = regression.limit_parameters(task, L)
    batch = task.sample(200_000, L, torch.Generator().manual_seed(L), dtype=torch.float64)
    pred = linear_attention(batch.tokens, batch.query, U, V)[:, -1]
    estimate, se = _mc_mean(0.5 * (pred - batch.target) ** 2)
    assert abs(regression.optimal_linear_risk(L, task) - estimate) < 5 * se


def test_optimal_linear_risk_is_optimal():
    # Perturbing the optimum in any direction does not lower the Monte Carlo risk (same prompts).
    task = TASKS["kms"]()
    L = 10
    U, V = regression.limit_parameters(task, L)
    batch = task.sample(100_000, L, torch.Generator().manual_seed(4), dtype=torch.float64)
    best = (0.5 * (linear_attention(batch.tokens, batch.query, U, V)[:, -1] - batch.target) ** 2).mean()
    g = torch.Generator().manual_seed(5)
    for _ in range(5):
        dU = 0.05 * torch.randn(4, 4, generator=g, dtype=torch.float64)
        pred = linear_attention(batch.tokens, batch.query, U + dU, V)[:, -1]
        assert (0.5 * (pred - batch.target) ** 2).mean() > best


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("L", [2, 10])
def test_bayes_risk_monte_carlo(name, L):
    # Independent estimate: run ridge regression with lambda = s^2 / tau^2 on sampled prompts.
    task = TASKS[name]()
    estimate, se = regression.bayes_risk(L, task, n_samples=20_000, seed=3)
    batch = task.sample(100_000, L, torch.Generator().manual_seed(77), dtype=torch.float64)
    X, y = batch.tokens[..., :3], batch.tokens[..., 3]
    ridge = torch.linalg.solve(X.transpose(1, 2) @ X + task.noise_var / task.task_var * torch.eye(3, dtype=X.dtype),
                               (X.transpose(1, 2) @ y.unsqueeze(-1))).squeeze(-1)
    mc, mc_se = _mc_mean(0.5 * ((batch.query[:, :3] * ridge).sum(-1) - batch.target) ** 2)
    assert abs(estimate - mc) < 5 * math.hypot(se, mc_se)
    assert estimate <= regression.optimal_linear_risk(L, task) + 5 * se


def test_bayes_risk_without_noise_vanishes_once_L_reaches_d():
    task = regression.RegressionTask.isotropic(d=3, task_var=1.0, noise_var=0.0)
    assert regression.bayes_risk(3, task, n_samples=2000)[0] == pytest.approx(0.0, abs=1e-9)
    assert regression.bayes_risk(2, task, n_samples=2000)[0] == pytest.approx(0.5 * 1.0 * 1, rel=0.05)


@pytest.mark.parametrize("name", TASKS)
def test_limit_parameters_reach_the_noise_floor(name):
    task = TASKS[name]()
    U, V = regression.limit_parameters(task)
    assert float(regression.infinite_prompt_risk(U, V, task)) == pytest.approx(task.noise_var / 2, abs=1e-12)
    # Balanced: ||U_x||_F equals v_y, as gradient flow from the balanced block initialisation keeps them.
    assert float(torch.linalg.matrix_norm(U[:3, :3])) == pytest.approx(float(V[3, 3]))
    U_L, _ = regression.limit_parameters(task, 10**9)
    assert torch.allclose(U_L, U, atol=1e-6)


def test_optimal_linear_risk_decreases_to_the_noise_floor():
    task = TASKS["kms"]()
    risks = [regression.optimal_linear_risk(L, task) for L in (1, 10, 100, 1000, 10**6)]
    assert all(a > b for a, b in zip(risks, risks[1:]))
    assert risks[-1] == pytest.approx(task.noise_var / 2, abs=1e-5)


def test_block_init():
    task = TASKS["kms"]()
    U, V = regression.block_init(task, 0.1)
    assert float(torch.linalg.matrix_norm(U[:3, :3])) == pytest.approx(0.1)
    assert V[3, 3] == pytest.approx(0.1) and V.abs().sum() == pytest.approx(0.1)
    theta = torch.tensor([[1.0], [0.0], [0.0]])
    U, _ = regression.block_init(task, 0.2, theta)
    assert U[0, 0] == pytest.approx(0.2) and U.abs().sum() == pytest.approx(0.2)


def test_sampling_is_reproducible_and_has_the_right_law():
    task = TASKS["kms"]()
    a = task.sample(4, 6, torch.Generator().manual_seed(1))
    b = task.sample(4, 6, torch.Generator().manual_seed(1))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.query, b.query)
    assert a.tokens.shape == (4, 6, 4) and a.query.shape == (4, 4) and a.target.shape == (4,)
    assert torch.all(a.query[:, -1] == 0)
    big = task.sample(200_000, 1, torch.Generator().manual_seed(2), dtype=torch.float64)
    x_q = big.query[:, :3]
    assert torch.allclose(x_q.T @ x_q / 200_000, task.covariance, atol=0.02)
    residual = big.target - (x_q * big.w).sum(-1)
    assert residual.var().item() == pytest.approx(task.noise_var, rel=0.03)
    assert big.w.var(0).mean().item() == pytest.approx(task.task_var, rel=0.03)


@pytest.mark.parametrize("sampler", regression.SAMPLERS)
@pytest.mark.parametrize("kind", ["isotropic", "kms"])
def test_stacked_sampling_draws_what_each_generator_draws_alone(kind, sampler):
    task = TASKS[kind]() if sampler == "paper" else getattr(regression.RegressionTask, kind)(3, sampler=sampler)
    seeds = (5, 6, 7)
    stacked = task.sample_stacked(4, 9, [torch.Generator().manual_seed(s) for s in seeds], dtype=torch.float64)
    for i, seed in enumerate(seeds):
        alone = task.sample(4, 9, torch.Generator().manual_seed(seed), dtype=torch.float64)
        for name in ("tokens", "query", "target", "w"):
            torch.testing.assert_close(getattr(stacked, name)[i], getattr(alone, name), rtol=1e-12, atol=1e-12)


def test_kms_covariance():
    sigma = regression.kms_covariance(4, 0.5)
    assert sigma[0, 3] == pytest.approx(0.125) and torch.equal(sigma, sigma.T)


@pytest.mark.parametrize("call, match", [
    (lambda: regression.kms_covariance(3, 1.0), "rho"),
    (lambda: regression.kms_covariance(3, -1.5), "rho"),
    (lambda: regression.RegressionTask(2, torch.tensor([[1.0, 2.0], [2.0, 1.0]])), "covariance"),
    (lambda: regression.RegressionTask(2, torch.eye(3)), "covariance"),
    (lambda: regression.RegressionTask(2, torch.tensor([[float("nan"), 0.0], [0.0, 1.0]])), "covariance"),
    (lambda: regression.RegressionTask(0), "d"),
    (lambda: regression.RegressionTask(2, task_var=-1.0), "task_var"),
    (lambda: regression.RegressionTask(2, noise_var=float("nan")), "noise_var"),
    (lambda: regression.RegressionTask(2).sample(3, 0), "L"),
    (lambda: regression.RegressionTask(2).sample_stacked(3, 4, []), "generators"),
    (lambda: regression.RegressionTask(2).sample_stacked(0, 4, [torch.Generator()]), "n_prompts"),
    (lambda: regression.optimal_linear_risk(0, regression.RegressionTask(2)), "L"),
    (lambda: regression.bayes_risk(0, regression.RegressionTask(2)), "L"),
    (lambda: regression.infinite_prompt_risk(torch.eye(2), torch.eye(3), regression.RegressionTask(2)), "U"),
    (lambda: regression.block_init(regression.RegressionTask(2), 0.0), "alpha"),
    (lambda: regression.block_init(regression.RegressionTask(2), 0.1, torch.ones(2, 2)), "theta"),
    (lambda: regression.RegressionTask(2, sampler="code"), "sampler"),
    (lambda: regression.RegressionTask.kms(2, sampler=None), "sampler"),
    (lambda: regression.linear_attention_risk(torch.eye(3), torch.eye(3), 0, regression.RegressionTask(2)), "L"),
    (lambda: regression.linear_attention_risk(torch.eye(2), torch.eye(3), 4, regression.RegressionTask(2)), "U"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- the two samplers and the exact finite-L risk of normalised linear attention ---

SAMPLER_TASKS = {
    (name, sampler): (lambda name=name, sampler=sampler: regression.RegressionTask(
        3, TASKS[name]().covariance, TASKS[name]().task_var, TASKS[name]().noise_var, sampler))
    for name in ("kms", "random") for sampler in regression.SAMPLERS
}


def test_published_sampler_draws_what_the_published_code_draws():
    # Prompt inputs C C xi (covariance C Sigma C^T), isotropic queries, labels from the inputs drawn;
    # the same raw normals as the paper's sampler, so the two differ only by the factor applied.
    paper, published = (regression.RegressionTask.kms(3, 0.6, sampler=s) for s in regression.SAMPLERS)
    C = torch.linalg.cholesky(paper.covariance)
    a = paper.sample(5, 4, torch.Generator().manual_seed(3), dtype=torch.float64)
    b = published.sample(5, 4, torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.equal(a.w, b.w)
    xi_prompt = torch.linalg.solve_triangular(C, a.tokens[..., :3].transpose(-1, -2), upper=False).transpose(-1, -2)
    assert torch.allclose(b.tokens[..., :3], xi_prompt @ (C @ C).T)
    assert torch.allclose(b.query[:, :3], torch.linalg.solve_triangular(C, a.query[:, :3].T, upper=False).T)
    noise_prompt = a.tokens[..., 3] - (a.tokens[..., :3] * a.w[:, None]).sum(-1)
    assert torch.allclose(b.tokens[..., 3] - (b.tokens[..., :3] * b.w[:, None]).sum(-1), noise_prompt)
    assert torch.allclose(b.target - (b.query[:, :3] * b.w).sum(-1), a.target - (a.query[:, :3] * a.w).sum(-1))
    big = published.sample(100_000, 2, torch.Generator().manual_seed(4), dtype=torch.float64)
    x = big.tokens[..., :3].reshape(-1, 3)
    assert torch.allclose(x.T @ x / x.shape[0], C @ paper.covariance @ C.T, atol=0.03)
    assert torch.allclose(big.query[:, :3].T @ big.query[:, :3] / 100_000, torch.eye(3, dtype=torch.float64), atol=0.02)
    assert torch.allclose(published.prompt_covariance, C @ paper.covariance @ C.T)
    assert torch.equal(published.query_covariance, torch.eye(3, dtype=torch.float64))
    assert "published" in repr(published)


def test_samplers_coincide_for_isotropic_inputs():
    a, b = (regression.RegressionTask.isotropic(3, sampler=s).sample(4, 5, torch.Generator().manual_seed(1)) for s in regression.SAMPLERS)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.query, b.query) and torch.equal(a.target, b.target)


def _linear_attention_mc(U, V, L, task, seed, n=400_000, chunk=100_000):
    g = torch.Generator().manual_seed(seed)
    values = []
    for _ in range(n // chunk):
        b = task.sample(chunk, L, g, dtype=torch.float64)
        moments = torch.einsum("nli,nlj->nij", b.tokens, b.tokens) / L
        pred = torch.einsum("i,nij,jk,nk->n", V[-1], moments, U, b.query)
        values.append(0.5 * (pred - b.target) ** 2)
    return _mc_mean(torch.cat(values))


@pytest.mark.parametrize("key", SAMPLER_TASKS)
@pytest.mark.parametrize("seed, L", [(31, 1), (32, 3), (33, 12)])
def test_linear_attention_risk_monte_carlo(key, seed, L):
    task = SAMPLER_TASKS[key]()
    U, V = _random_uv(seed)
    estimate, se = _linear_attention_mc(U, V, L, task, 500 + seed)
    exact = float(regression.linear_attention_risk(U, V, L, task))
    assert abs(exact - estimate) < 5 * se, (exact, estimate, se)


def test_linear_attention_risk_tends_to_the_infinite_prompt_risk_and_batches():
    task = SAMPLER_TASKS[("kms", "published")]()
    U, V = _random_uv(7)
    far = float(regression.linear_attention_risk(U, V, 10**9, task))
    assert far == pytest.approx(float(regression.infinite_prompt_risk(U, V, task)), rel=1e-6)
    Us, Vs = torch.stack([U, 2 * U]), torch.stack([V, V / 3])
    L = torch.tensor([4.0, 9.0], dtype=torch.float64)
    batched = regression.linear_attention_risk(Us, Vs, L, task)
    assert batched.shape == (2,)
    assert float(batched[1]) == pytest.approx(float(regression.linear_attention_risk(2 * U, V / 3, 9, task)))


@pytest.mark.parametrize("key", SAMPLER_TASKS)
@pytest.mark.parametrize("L", [3, 25])
def test_linear_attention_risk_minimum_is_the_optimal_linear_risk(key, L):
    task = SAMPLER_TASKS[key]()
    optimum = regression.optimal_linear_risk(L, task)
    U_star, V_star = regression.limit_parameters(task, L)
    assert float(regression.linear_attention_risk(U_star, V_star, L, task)) == pytest.approx(optimum, rel=1e-10)
    # A generic minimisation over all of (U, V) from random starts and from a perturbed optimum never goes
    # lower; the best start reaches it (the risk is not convex in (U, V): some starts stop at a stationary point).
    best = math.inf
    starts = [_random_uv(seed, scale=0.1) for seed in (1, 2, 3)]
    noise = _random_uv(4, scale=0.05)
    starts.append((U_star + noise[0], V_star + noise[1]))
    for start in starts:
        U, V = (t.clone().requires_grad_(True) for t in start)
        opt = torch.optim.LBFGS([U, V], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-16,
                                line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            risk = regression.linear_attention_risk(U, V, L, task)
            risk.backward()
            return risk
        for _ in range(6):
            opt.step(closure)
        reached = float(regression.linear_attention_risk(U, V, L, task).detach())
        assert reached >= optimum * (1 - 1e-9)
        best = min(best, reached)
    assert best == pytest.approx(optimum, rel=1e-6)


@pytest.mark.parametrize("L", [2, 10])
def test_references_of_the_published_sampler_monte_carlo(L):
    # Ridge (posterior mean) on published prompts, scored on isotropic queries; best linear attention at L.
    task = SAMPLER_TASKS[("kms", "published")]()
    batch = task.sample(300_000, L, torch.Generator().manual_seed(40 + L), dtype=torch.float64)
    X, y = batch.tokens[..., :3], batch.tokens[..., 3]
    ridge = torch.linalg.solve(X.transpose(1, 2) @ X + task.noise_var / task.task_var * torch.eye(3, dtype=torch.float64),
                               (X.transpose(1, 2) @ y.unsqueeze(-1))).squeeze(-1)
    estimate, se = _mc_mean(0.5 * ((ridge * batch.query[:, :3]).sum(-1) - batch.target) ** 2)
    bayes, bayes_se = regression.bayes_risk(L, task, n_samples=40_000, seed=L)
    assert abs(bayes - estimate) < 5 * math.hypot(se, bayes_se), (bayes, estimate)
    gamma_inv = torch.linalg.inv(regression.finite_prompt_covariance(L, task))
    h = (X * y.unsqueeze(-1)).mean(1)
    pred = ((h @ gamma_inv) * batch.query[:, :3]).sum(-1)  # Gamma_L symmetric
    estimate, se = _mc_mean(0.5 * (pred - batch.target) ** 2)
    assert abs(regression.optimal_linear_risk(L, task) - estimate) < 5 * se
    assert bayes <= regression.optimal_linear_risk(L, task) + 5 * bayes_se
    # the zero predictor: tau^2/2 tr(Q) + s^2/2 with Q = I
    assert task.zero_risk() == pytest.approx(0.5 * task.task_var * 3 + 0.5 * task.noise_var)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [21])
def test_infinite_prompt_risk_published_sampler_monte_carlo(seed):
    # Long prompts from the published sampler: linear attention's risk approaches R_inf built on (P, Q).
    task = SAMPLER_TASKS[("random", "published")]()
    U, V = _random_uv(seed, scale=0.3)
    exact = float(regression.linear_attention_risk(U, V, 500, task))
    assert exact == pytest.approx(float(regression.infinite_prompt_risk(U, V, task)), rel=0.02)
    estimate, se = _linear_attention_mc(U, V, 500, task, seed, n=40_000, chunk=10_000)
    assert abs(exact - estimate) < 5 * se


# --- a degenerate input covariance (Appendix F.3) ---

def test_degenerate_task_samples_inputs_in_the_range():
    sigma, u = rank_four_covariance()
    task = regression.RegressionTask(5, sigma)
    batch = task.sample(2_000, 3, torch.Generator().manual_seed(0), dtype=torch.float64)
    x = batch.tokens[..., :5].reshape(-1, 5)
    assert float((x @ u).abs().max()) < 1e-6                   # no variance along the null direction
    assert float((x.T @ x / x.shape[0] - sigma).abs().max()) < 0.05


@pytest.mark.parametrize("theta_seed", [None, 4])
def test_flow_converges_to_the_pseudo_inverse_limit(theta_seed):
    sigma, _ = rank_four_covariance()
    task = regression.RegressionTask(5, sigma)
    theta = None
    if theta_seed is not None:
        theta = torch.randn(5, 3, generator=torch.Generator().manual_seed(theta_seed), dtype=torch.float64)
        theta = theta / float(torch.linalg.matrix_norm(theta @ theta.T)) ** 0.5
    flow = infinite_prompt_flow(*regression.block_init(task, 0.3, theta), task, [0.0, 60.0], max_dt=0.1)
    U, V = regression.degenerate_limit_parameters(task, 0.3, theta)
    assert np.abs(flow["U"][-1] - U.numpy()).max() < 1e-8 and np.abs(flow["V"][-1] - V.numpy()).max() < 1e-8
    assert abs(float(regression.infinite_prompt_risk(U, V, task)) - task.noise_var / 2) < 1e-12


def test_invertible_covariance_gives_remark_5_3():
    task = regression.RegressionTask.kms(5, 0.5)
    for a, b in zip(regression.limit_parameters(task), regression.degenerate_limit_parameters(task, 0.3)):
        assert torch.allclose(a, b, atol=1e-12)


def test_degenerate_bad_input():
    sigma, _ = rank_four_covariance()
    with pytest.raises(ValueError, match="degenerate_limit_parameters"):
        regression.limit_parameters(regression.RegressionTask(5, sigma))
    with pytest.raises(ValueError, match="published"):
        regression.RegressionTask(5, sigma, sampler="published")
    with pytest.raises(ValueError, match="covariance"):
        regression.RegressionTask(2, torch.tensor([[1.0, 2.0], [2.0, 1.0]]))


def test_init_scale_bound_is_zhang_et_al_and_scales_like_the_flow():
    isotropic = regression.RegressionTask.isotropic(5, noise_var=0.0)
    assert regression.init_scale_bound(isotropic) == pytest.approx(math.sqrt(2) / 5**0.25)
    kms = regression.RegressionTask.kms(5, 0.5, noise_var=0.0)
    norm = float(torch.linalg.matrix_norm(kms.covariance, ord=2))
    assert regression.init_scale_bound(kms) == pytest.approx(math.sqrt(2) / (5**0.25 * math.sqrt(norm)))
    # the flow from (c Sigma, alpha) is the flow from (Sigma, alpha sqrt c) rescaled: the bound divides by sqrt c
    for c in (0.1, 4.0):
        scaled = regression.RegressionTask(5, c * kms.covariance, noise_var=0.0)
        assert regression.init_scale_bound(scaled) == pytest.approx(regression.init_scale_bound(kms) / math.sqrt(c))
    # finite L: Gamma_L = (1 + 1/L) Sigma + tr(Sigma)/L I, which tends to Sigma
    gamma = (1 + 1 / 10) * kms.covariance + 5 / 10 * torch.eye(5, dtype=torch.float64)
    assert regression.init_scale_bound(kms, 10) == pytest.approx(
        math.sqrt(2) / (5**0.25 * float(torch.linalg.matrix_norm(gamma, ord=2)) ** 0.5))
    assert regression.init_scale_bound(kms, 10**7) == pytest.approx(regression.init_scale_bound(kms), rel=1e-5)


def test_the_risk_identity_behind_the_scaling_of_the_bound():
    # R_{c Sigma, s^2}(U, V) = c R_{Sigma, s^2/c}(sqrt c U, sqrt c V) at any parameters (our derivation, Chapter 5)
    g = torch.Generator().manual_seed(4)
    U, V = (0.3 * torch.randn(6, 6, generator=g, dtype=torch.float64) for _ in range(2))
    sigma = regression.kms_covariance(5, 0.5)
    for c in (0.1, 2.26):
        left = regression.infinite_prompt_risk(U, V, regression.RegressionTask(5, c * sigma, noise_var=0.1))
        right = regression.infinite_prompt_risk(c**0.5 * U, c**0.5 * V, regression.RegressionTask(5, sigma, noise_var=0.1 / c))
        assert float(left) == pytest.approx(c * float(right), rel=1e-12)


def test_block_init_asks_both_conditions_of_assumption_5_1():
    sigma, u = rank_four_covariance()
    task = regression.RegressionTask(5, sigma)
    with pytest.raises(ValueError, match="theta theta\\^T Sigma != 0"):
        regression.block_init(task, 0.3, theta=u[:, None])      # u u^T Sigma = 0: invisible to every input


def test_linear_attention_gradients_are_autograd_of_the_half_squared_error():
    task = TASKS["kms"]()
    g = torch.Generator().manual_seed(5)
    U, V = (0.4 * torch.randn(4, 4, generator=g, dtype=torch.float64) for _ in range(2))
    batch = task.sample(3, 7, g, dtype=torch.float64)
    grads = regression.linear_attention_gradients(batch, U, V)
    for i in range(3):
        Ui, Vi = U.clone().requires_grad_(True), V.clone().requires_grad_(True)
        loss = 0.5 * (linear_attention(batch.tokens[i], batch.query[i], Ui, Vi)[-1] - batch.target[i]) ** 2
        gU, gV = torch.autograd.grad(loss, (Ui, Vi))
        torch.testing.assert_close(grads[i], torch.cat([gU.flatten(), gV.flatten()]))


@pytest.mark.slow
def test_sgd_noise_floor_is_what_sgd_leaves_at_the_optimum():
    # SGD (step 2 lr on R, as the trainer's lr on the MSE) started at the optimum of the exact risk keeps an excess
    # that only its gradient noise explains: 8 independent chains, exact excess averaged over steps 150 to 600
    task = regression.RegressionTask.isotropic(3, noise_var=0.0)
    L, lr, batch = 12, 0.05, 32
    U0, V0 = regression.limit_parameters(task, L)
    best = regression.optimal_linear_risk(L, task)
    g = torch.Generator().manual_seed(0)
    per_chain = []
    for _ in range(8):
        U, V, excess = U0.clone(), V0.clone(), []
        for step in range(600):
            G = regression.linear_attention_gradients(task.sample(batch, L, g, dtype=torch.float64), U, V).mean(0)
            U, V = U - 2 * lr * G[:16].reshape(4, 4), V - 2 * lr * G[16:].reshape(4, 4)
            if step >= 150:
                excess.append(float(regression.linear_attention_risk(U, V, L, task)) - best)
        per_chain.append(np.mean(excess))
    mean, se = np.mean(per_chain), np.std(per_chain, ddof=1) / math.sqrt(len(per_chain))
    floor, floor_se = regression.sgd_noise_floor(task, L, lr, batch, n_prompts=20_000)
    assert abs(mean - floor) < 4 * math.hypot(se, floor_se), (mean, se, floor, floor_se)
    # the small-step approximation eta tr(C) / (4B) lies below it (the discrete recursion divides by 2 - eta lambda)
    assert regression.sgd_noise_floor(task, L, lr / 100, batch, n_prompts=20_000)[0] * 100 < floor
    with pytest.raises(ValueError, match="lr: SGD with step"):
        regression.sgd_noise_floor(task, L, 50.0, batch)


def test_covariance_of_and_noise_floor():
    assert torch.equal(regression.covariance_of("isotropic", 3), torch.eye(3, dtype=torch.float64))
    assert torch.equal(regression.covariance_of("kms", 4, 0.3), regression.kms_covariance(4, 0.3))
    assert torch.equal(regression.covariance_of("eigenvalues", 2, eigenvalues=[1.0, 0.2]),
                       torch.diag(torch.tensor([1.0, 0.2], dtype=torch.float64)))
    with pytest.raises(ValueError, match="eigenvalues: give 5 eigenvalues"):
        regression.covariance_of("eigenvalues", 5, eigenvalues=[1.0])
    assert torch.equal(regression.covariance_of("eigenvalues", 2, eigenvalues=[1.0, 0.0]),  # singular: Appendix F.3
                       torch.diag(torch.tensor([1.0, 0.0], dtype=torch.float64)))
    with pytest.raises(ValueError, match="no negative eigenvalue; change -0.5"):
        regression.covariance_of("eigenvalues", 2, eigenvalues=[1.0, -0.5])
    with pytest.raises(ValueError, match="kind"):
        regression.covariance_of("diagonal", 2)
    assert TASKS["isotropic"]().noise_floor() == pytest.approx(0.1)


# --- covariate laws and the one sampler (Chapter 6) -----------------------------------------------

def _laws_and_samplers():
    cases = []
    for law in ("gaussian", "uniform", "rademacher"):
        cases += [(law, lambda law=law: regression.RegressionTask.kms(4, 0.5, 0.3, 0.2, "paper", law)),
                  (law, lambda law=law: regression.RegressionTask.kms(4, 0.5, 0.3, 0.2, "published", law)),
                  (law, lambda law=law: regression.RegressionTask(5, rank_four_covariance()[0], 0.3, 0.2, "paper", law))]
    return cases


@pytest.mark.parametrize("law,make", _laws_and_samplers())
def test_every_path_draws_the_prompts_of_sample_from_the_same_random_numbers(law, make):
    """sample(), sample_stacked(), stream() (queries and token chunks), token_draw (through stream()) and
    draw_inputs (the Bayes risk) turn the same standard draws into the same prompts."""
    task = make()
    n, L, d = 6, 9, task.d
    batch = task.sample(n, L, torch.Generator().manual_seed(3), dtype=torch.float64)
    stacked = task.sample_stacked(n, L, [torch.Generator().manual_seed(3)], dtype=torch.float64)
    for a, b in zip((batch.tokens, batch.query, batch.target, batch.w), (stacked.tokens, stacked.query, stacked.target, stacked.w)):
        assert torch.equal(a, b[0])
    # the stream draws w, the query entries, the query noise, then token chunks (its documented order):
    # rebuild those standard draws and hand them to sample()'s arithmetic
    g = torch.Generator().manual_seed(5)
    stream = task.stream(n, g)
    chunks = [stream.tokens(4), stream.tokens(5)]
    # (each draw into a fresh tensor of its own shape, as the stream makes them: a generator fills a strided
    # view in another order than a contiguous tensor)
    g = torch.Generator().manual_seed(5)
    w_raw = torch.randn(n, d, generator=g, dtype=torch.float64)
    query_entries = regression.covariates.draw(task.law, n, d, generator=g)
    query_noise = torch.randn(n, generator=g, dtype=torch.float64)
    first = task.fill_standard_(torch.empty(n, 4, d + 1, dtype=torch.float64), g)
    second = task.fill_standard_(torch.empty(n, 5, d + 1, dtype=torch.float64), g)
    z = torch.cat([torch.cat([query_entries, query_noise[:, None]], -1)[:, None], first, second], 1)
    assembled = task._assemble(w_raw, z)
    assert torch.allclose(stream.w, assembled.w, atol=1e-14)
    assert torch.allclose(stream.query, assembled.query, atol=1e-12)
    assert torch.allclose(stream.target, assembled.target, atol=1e-12)
    assert torch.allclose(torch.cat(chunks, 1), assembled.tokens, atol=1e-12)
    # the inputs alone, as the Bayes risk draws them
    X = task.draw_inputs(n, L, torch.Generator().manual_seed(8))
    xi = regression.covariates.draw(task.law, n, L, d, generator=torch.Generator().manual_seed(8))
    z = torch.cat([xi, torch.zeros(n, L, 1, dtype=torch.float64)], -1)
    assert torch.allclose(X, task._assemble(torch.zeros(n, d, dtype=torch.float64),
                                            torch.cat([z[:, :1], z], 1)).tokens[..., :d], atol=1e-12)
    # inputs in the range of a degenerate Sigma, whatever the law
    _, u = rank_four_covariance()
    if d == 5 and task.sampler == "paper":  # (the factor's last pivot is about 1e-8, not 0)
        assert float((batch.tokens[..., :d] @ u).abs().max()) < 1e-6
        assert float((stream.query[:, :d] @ u).abs().max()) < 1e-6


def test_gaussian_law_draws_what_the_course_always_drew():
    task = regression.RegressionTask.kms(5, 0.5)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 5, generator=g)
    z = torch.randn(4, 8, 6, generator=g)
    expected = task._assemble(w, z, by_coordinates=True)  # the labels summed as sample() sums them on a CPU
    batch = task.sample(4, 7, torch.Generator().manual_seed(0))
    assert torch.equal(batch.tokens, expected.tokens) and torch.equal(batch.target, expected.target)


@pytest.mark.parametrize("law", ["uniform", "rademacher"])
def test_sampled_inputs_have_the_law_and_the_covariance(law):
    task = regression.RegressionTask.kms(3, 0.6, law=law)
    X = task.draw_inputs(2000, 100, torch.Generator().manual_seed(1)).reshape(-1, 3)
    xi = torch.linalg.solve_triangular(task.prompt_factor, X.T, upper=False).T
    assert torch.allclose(X.T @ X / X.shape[0], task.covariance, atol=0.01)
    assert abs(float((xi**4).mean()) - task.fourth_moment) < 0.01
    if law == "rademacher":
        assert torch.allclose(xi.abs(), torch.ones_like(xi), atol=1e-9)


@pytest.mark.parametrize("law", ["uniform", "rademacher"])
@pytest.mark.parametrize("kind", ["isotropic", "kms"])
@pytest.mark.parametrize("L", [4, 30])
def test_references_under_a_covariate_law_monte_carlo(law, kind, L):
    task = (regression.RegressionTask.isotropic(3, 0.5, 0.2, law=law) if kind == "isotropic"
            else regression.RegressionTask.kms(3, 0.6, 0.5, 0.2, law=law))
    g = torch.Generator().manual_seed(L)
    # exact risk of linear attention at random (U, V), fourth moments included
    U, V = _random_uv(L, scale=0.4)
    batch = task.sample(200_000, L, g, dtype=torch.float64)
    losses = 0.5 * (linear_attention(batch.tokens, batch.query, U, V)[:, -1] - batch.target) ** 2
    mean, se = _mc_mean(losses)
    assert abs(mean - float(regression.linear_attention_risk(U, V, L, task))) < 4 * se
    # the best linear attention: the predictor x_q^T P (F N F^T)^{-1} h reaches optimal_linear_risk
    F = task.prompt_factor
    G = F.T @ F
    N = ((1 + 1 / L) * G + (torch.trace(G) + task.noise_var / task.task_var) / L * torch.eye(3, dtype=torch.float64)
         + (task.fourth_moment - 3) / L * torch.diag(torch.diagonal(G)))
    B = task.prompt_covariance @ torch.linalg.inv(F @ N @ F.T)
    h = (batch.tokens[..., -1:] * batch.tokens[..., :3]).mean(1)
    prediction = (batch.query[:, :3] * (h @ B.T)).sum(-1)
    mean, se = _mc_mean(0.5 * (prediction - batch.target) ** 2)
    best = regression.optimal_linear_risk(L, task)
    assert abs(mean - best) < 4 * se
    gaussian = regression.RegressionTask(3, task.covariance, task.task_var, task.noise_var)
    assert best < regression.optimal_linear_risk(L, gaussian)  # lighter tails than Gaussian inputs: lower
    # ridge regression is still Bayes-optimal: its Monte Carlo risk on prompts of the law
    X, y = batch.tokens[:20_000, :, :3], batch.tokens[:20_000, :, 3]
    eye = torch.eye(3, dtype=torch.float64)
    w_hat = torch.linalg.solve(X.transpose(1, 2) @ X + task.noise_var / task.task_var * eye,
                               (X.transpose(1, 2) @ y.unsqueeze(-1))).squeeze(-1)
    ridge = 0.5 * ((batch.query[:20_000, :3] * w_hat).sum(-1) - batch.target[:20_000]) ** 2
    mean, se = _mc_mean(ridge)
    bayes, bayes_se = regression.bayes_risk(L, task, n_samples=20_000, seed=1)
    assert abs(mean - bayes) < 4 * math.hypot(se, bayes_se)


def test_law_is_checked_and_shown():
    with pytest.raises(ValueError, match="law"):
        regression.RegressionTask.isotropic(3, law="laplace")
    assert "law='uniform'" in repr(regression.RegressionTask.isotropic(3, law="uniform"))
    assert "law" not in repr(regression.RegressionTask.isotropic(3))
    with pytest.raises(ValueError, match="L"):
        regression.limit_parameters(regression.RegressionTask.isotropic(3, law="uniform"), L=10)
