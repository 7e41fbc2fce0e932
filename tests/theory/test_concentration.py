"""Concentration estimators: streaming against direct attention, exact limits against Monte Carlo,
gradient gaps against autograd, confidence intervals against a known truth, the regression gaps along
training (Section 4; degenerate covariances included), bad input."""
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

import softmax_as_linear as sal
from softmax_as_linear.core import seeding
from softmax_as_linear.core.stats import mean_interval
from softmax_as_linear.experiments import concentration_figures
from softmax_as_linear.registry import LAW_KINDS as KINDS
from softmax_as_linear.theory import attention as att
from softmax_as_linear.theory import concentration as conc
from softmax_as_linear.theory import models, stability
from softmax_as_linear.theory.measures import TokenLaw

from helpers import chunk_mean_check, random_spd, rank_four_covariance

SEEDS = [21, 22]
F64 = dict(dtype=torch.float64)


def _params(seed, D=3, u_scale=0.5):
    g = torch.Generator().manual_seed(seed)
    U = u_scale * torch.randn(D, D, generator=g, **F64) / math.sqrt(D)
    V = torch.randn(D, D, generator=g, **F64) / math.sqrt(D)
    return g, U, V


# ------------------------------------------------------------------------------------------ streaming

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("include_query", [False, True])
@pytest.mark.parametrize("chunk", [1, 37, 1000])
@pytest.mark.parametrize("Q", [2, 5])  # fewer or more queries than D = 3: the two ways to sum z z^T
def test_streaming_equals_direct_attention(seed, include_query, chunk, Q):
    g, U, V = _params(seed, u_scale=2.0)
    tokens = torch.randn(4, 300, 3, generator=g, **F64) * 1.5
    queries = torch.randn(4, Q, 3, generator=g, **F64)
    m = conc.stream_moments(conc.tensor_draw(tokens), 300, queries, U, include_query=include_query,
                            second_order=True, chunk=chunk)
    prompt = tokens.unsqueeze(1)  # (4, 1, 300, 3) against queries (4, Q, 3)
    soft = att.softmax_attention(prompt, queries, U, V, include_query=include_query)
    lin = att.linear_attention(prompt, queries, U, V, include_query=include_query)
    assert torch.allclose(m.softmax_output(V), soft, rtol=0, atol=1e-12)
    assert torch.allclose(m.linear_output(V), lin, rtol=0, atol=1e-12)
    # second order: softmax-weighted covariance, empirical second moment, ESS
    a = att.softmax_weights(prompt, queries, U, include_query=include_query)  # (4, Q, L or L + 1)
    full = prompt.expand(4, Q, 300, 3)
    if include_query:
        full = torch.cat([full, queries.unsqueeze(-2)], dim=-2)
    mean = (a.unsqueeze(-1) * full).sum(-2)
    cov = torch.einsum("pql,pqld,pqle->pqde", a, full, full) - mean.unsqueeze(-1) * mean.unsqueeze(-2)
    second = torch.einsum("pqld,pqle->pqde", full, full) / full.shape[-2]
    assert torch.allclose(m.tilted_cov, cov, atol=1e-12)
    assert torch.allclose(m.second_moment, second, atol=1e-12)
    assert torch.allclose(m.ess, conc.effective_sample_size(a), atol=1e-9)
    assert m.n_tokens == 300 + include_query


def test_streaming_survives_huge_scores():
    # scores of order 10^4: exp overflows without the running maximum
    g, U, V = _params(3, u_scale=1.0)
    tokens = 100 * torch.randn(2, 500, 3, generator=g, **F64)
    queries = 100 * torch.randn(2, 3, 3, generator=g, **F64)
    m = conc.stream_moments(conc.tensor_draw(tokens), 500, queries, U, chunk=64)
    direct = att.softmax_attention(tokens.unsqueeze(1), queries, U, V)
    assert torch.isfinite(m.softmax_output(V)).all()
    assert torch.allclose(m.softmax_output(V), direct, atol=1e-9)
    assert (m.ess >= 1 - 1e-12).all() and (m.ess < 3).all()


# ------------------------------------------------------------------------------------------ ESS

def test_ess_closed_cases():
    assert float(conc.effective_sample_size(torch.ones(50))) == pytest.approx(50)
    assert float(conc.effective_sample_size(torch.tensor([1e300, 1.0, 1.0], **F64))) == pytest.approx(1.0)
    assert float(conc.effective_sample_size(torch.tensor([3.0, 0.0, 0.0, 0.0]))) == pytest.approx(1.0)
    w = torch.rand(7, 30, generator=torch.Generator().manual_seed(0), **F64)
    assert torch.allclose(conc.effective_sample_size(w), conc.effective_sample_size(1e-200 * w))
    assert (conc.effective_sample_size(w) <= 30).all() and (conc.effective_sample_size(w) >= 1).all()


@pytest.mark.parametrize("lam", [0.5, 1.0])
def test_ess_of_lognormal_weights(lam):
    # ESS / L -> (E w)^2 / E w^2 = exp(-lam^2) for w = exp(s), s ~ N(0, lam^2)
    s = lam * torch.randn(20, 100_000, generator=torch.Generator().manual_seed(1), **F64)
    ratio = conc.effective_sample_size(torch.exp(s)) / s.shape[-1]
    chunk_mean_check(ratio.unsqueeze(-1), torch.tensor([math.exp(-lam**2)], **F64))


# ------------------------------------------------------------------------------------------ exact limits

def _law(kind, seed, D=3):
    g = torch.Generator().manual_seed(seed)
    return TokenLaw(kind, 0.3 * torch.randn(D, generator=g, **F64), random_spd(D, g))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_tilted_moments_against_monte_carlo(kind, seed):
    # 30 independent prompts of 10,000 tokens; the ratio estimator's O(1/L) bias is far below the tolerance, which
    # still rejects a wrong sign or a factor 2 in U at least 6 times over
    law = _law(kind, seed)
    g, U, _ = _params(seed, u_scale=0.4)
    queries = torch.randn(1, 2, 3, generator=g, **F64).expand(30, 2, 3)
    if kind == "laplace":  # keep |C^T U z| <= 0.3: finite moments of the weights up to order 4
        b = queries[0] @ U.T @ torch.linalg.cholesky(law.cov)
        U = U * 0.3 / float(b.abs().max())
    m = conc.stream_moments(conc.law_draw(law, 30, g), 10_000, queries, U, second_order=True)
    mean, cov = conc.limit_moments(law, queries[0], U, second_order=True)
    chunk_mean_check(m.tilted_mean, mean)
    chunk_mean_check(m.tilted_cov, cov, floor=2e-3)


def test_tilted_moments_of_a_gaussian_are_lemma_2_1():
    law = _law("gaussian", 3)
    g, U, _ = _params(3)
    z = torch.randn(5, 3, generator=g, **F64)
    mean, cov = conc.limit_moments(law, z, U, second_order=True)
    tilted_mean, tilted_cov = att.tilted_gaussian(law.mean, law.cov, z, U)
    assert torch.allclose(mean, tilted_mean, atol=1e-12) and torch.allclose(cov, tilted_cov, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_tilted_covariance_is_symmetric_positive_definite(kind):
    law = _law(kind, 4)
    g, U, _ = _params(4, u_scale=0.4)
    _, cov = conc.limit_moments(law, torch.randn(6, 3, generator=g, **F64), U, second_order=True)
    assert torch.allclose(cov, cov.transpose(-1, -2), atol=1e-12)
    assert (torch.linalg.eigvalsh(cov) > 0).all()


def test_laplace_limit_outside_its_domain_is_an_error():
    law = TokenLaw.standard("laplace", 2)
    with pytest.raises(ValueError, match="law"):
        conc.limit_moments(law, torch.tensor([[3.0, 0.0]], **F64), torch.eye(2, **F64))


def test_limits_ignore_the_query_in_the_measure():
    law = _law("gaussian", 1)
    g, U, V = _params(1)
    z = torch.randn(4, 3, generator=g, **F64)
    mean, _ = conc.limit_moments(law, z, U, "softmax")
    assert torch.allclose(mean @ V.T, att.gaussian_attention(law.mean, law.cov, z, U, V))
    first, M2 = conc.limit_moments(law, z, U, "linear", second_order=True)
    assert torch.allclose(first @ V.T, att.gaussian_linear_attention(law.mean, law.cov, z, U, V))
    assert torch.allclose(M2[0], law.cov + torch.outer(law.mean, law.mean))


# ------------------------------------------------------------------------------------------ gradient gaps

def _direct_attention(activation, include_query):
    fn = att.softmax_attention if activation == "softmax" else att.linear_attention
    return lambda tokens, z, U, V: fn(tokens, z, U, V, include_query=include_query)


def _limit_attention(law, activation):
    if activation == "softmax":
        return lambda z, U, V: V @ law.tilted_mean(U @ z)  # the closed form, differentiable in U
    return lambda z, U, V: att.gaussian_linear_attention(law.mean, law.cov, z, U, V)


@pytest.mark.parametrize("activation", ["softmax", "linear"])
@pytest.mark.parametrize("include_query", [False, True])
@pytest.mark.parametrize("kind", ["gaussian", "mixture"])
@pytest.mark.parametrize("use_loss", [False, True])
def test_gradient_gaps_match_autograd(activation, include_query, kind, use_loss):
    law = _law(kind, 7)
    g, U, V = _params(7, u_scale=0.8)
    tokens = law.sample((60,), g)
    z = torch.randn(3, generator=g, **F64)
    target = torch.randn(3, generator=g, **F64)
    loss = (lambda out: 0.5 * (out - target).square().sum(-1) + torch.sin(out).sum(-1)) if use_loss else None
    finite, limit = _direct_attention(activation, include_query), _limit_attention(law, activation)

    def grads(fn):
        if use_loss:
            Ul, Vl = U.clone().requires_grad_(), V.clone().requires_grad_()
            return torch.autograd.grad(loss(fn(Ul, Vl)), (Ul, Vl))
        return torch.autograd.functional.jacobian(fn, (U, V))  # each (D, D, D)

    gU, gV = grads(lambda U_, V_: finite(tokens, z, U_, V_))
    hU, hV = grads(lambda U_, V_: limit(z, U_, V_))
    expected_U, expected_V = float((gU - hU).square().sum()), float((gV - hV).square().sum())
    m = conc.stream_moments(conc.tensor_draw(tokens.unsqueeze(0)), 60, z.view(1, 1, 3), U,
                            include_query=include_query, second_order=True, chunk=7)
    first, second = conc.gap_moments(m, activation)
    first_inf, second_inf = conc.limit_moments(law, z.view(1, 1, 3), U, activation, second_order=True)
    gaps = conc.squared_gaps(first, second, first_inf, second_inf, z.view(1, 1, 3), V, loss)
    assert float(gaps["grad_U"]) == pytest.approx(expected_U, rel=1e-9, abs=1e-14)
    assert float(gaps["grad_V"]) == pytest.approx(expected_V, rel=1e-9, abs=1e-14)
    expected_out = float((finite(tokens, z, U, V) - limit(z, U, V)).square().sum())
    assert float(gaps["output"]) == pytest.approx(expected_out, rel=1e-9)


def test_icl_batch_gaps_match_autograd_of_the_two_models():
    task = sal.RegressionTask.isotropic(5)
    batch = task.sample(16, 40, torch.Generator().manual_seed(1), dtype=torch.float64)
    soft = sal.AttentionModel(6, "softmax", seed=327).double()
    lin = sal.AttentionModel(6, "linear", seed=327).double()
    out = concentration_figures.icl_batch_gaps(soft, task, 40, 16, draw=conc.tensor_draw(batch.tokens), queries=batch.query,
                              targets=batch.target)
    risk = lambda model: ((model(batch.tokens, batch.query) - batch.target) ** 2).mean()  # noqa: E731
    g_soft = torch.autograd.grad(risk(soft), list(soft.weights().values()))
    g_lin = torch.autograd.grad(risk(lin), list(lin.weights().values()))
    gap = sum(float((a - b).square().sum()) for a, b in zip(g_soft, g_lin))
    assert float(out["grad_weights"]) == pytest.approx(gap, rel=1e-10)
    assert float(out["grad_norm_linear"]) == pytest.approx(sum(float(b.square().sum()) for b in g_lin), rel=1e-10)
    pred_gap = (soft(batch.tokens, batch.query) - lin(batch.tokens, batch.query)).square()
    assert torch.allclose(out["output"], pred_gap.detach(), atol=1e-14)
    # the (U, V) gradients, by autograd through the (U, V) view
    U, V = (t.detach().requires_grad_() for t in soft.uv())
    grads = [torch.autograd.grad(((models.predict(batch.tokens, batch.query, U, V, a) - batch.target) ** 2).mean(),
                                 (U, V)) for a in ("softmax", "linear")]
    gap_uv = sum(float((a - b).square().sum()) for a, b in zip(*grads))
    assert float(out["grad_uv"]) == pytest.approx(gap_uv, rel=1e-10)


# ------------------------------------------------------------------------------------------ estimators

def _linear_exact_gap(cov, U, V, L):
    """E_L of normalised linear attention for N(0, cov) tokens and N(0, I) queries (Isserlis)."""
    A = U.T @ cov @ U
    B = V @ cov @ U
    return float(torch.trace(A) * torch.trace(V @ cov @ V.T) + torch.trace(B @ B.T)) / L


@pytest.mark.parametrize("seed", SEEDS)
def test_linear_gap_estimate_covers_the_exact_value_and_decays_as_one_over_L(seed):
    g, U, V = _params(seed, u_scale=1.0)
    cov = random_spd(3, g)
    law = TokenLaw("gaussian", torch.zeros(3, **F64), cov)
    # +-5 standard-error intervals (the squared gaps are skewed, so 95% intervals miss more often than 5%)
    level = 1 - 2 * stats.norm.sf(5.0)
    curve = conc.gap_curve(law, U, V, [10, 100, 1000], activation="linear", n_prompts=200, n_queries=8, seed=seed,
                           level=level)
    exact = np.array([_linear_exact_gap(cov, U, V, L) for L in curve.lengths])
    assert np.all((curve.output.low <= exact) & (exact <= curve.output.high))
    # The exact gap is c / L: the fitted log-log slope is -1 up to the error of the three means, whose
    # standard errors (relative, so in log scale) propagate through the least-squares weights.
    t = stats.t.isf(stats.norm.sf(5.0), 200 - 1)
    log_se = (curve.output.high - curve.output.mean) / t / curve.output.mean
    x = np.log(curve.lengths)
    weights = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    slope, _ = curve.slope()
    assert abs(slope + 1) < 5 * float(np.sqrt((weights**2 * log_se**2).sum()))


def test_gap_interval_is_the_t_interval_over_independent_prompt_averages():
    # The squared gaps of the queries of one prompt share its tokens and are dependent: gap_curve averages
    # them within each prompt and takes the Student-t interval over the n_prompts independent averages
    # (the interval itself is checked against SciPy in tests/core/test_stats.py), at the level asked.
    law = TokenLaw.standard("gaussian", 3, 0.8)
    g, U, V = _params(8, u_scale=1.0)
    P, Q, L = 40, 6, 50
    curve = conc.gap_curve(law, U, V, [L], n_prompts=P, n_queries=Q, seed=3, level=0.8)
    gen = seeding.generator(3, "prompts", L)  # the stream gap_curve draws from
    queries = TokenLaw.standard("gaussian", 3).sample((P, Q), gen)
    tokens = law.sample((P, L), gen)
    gaps = ((att.softmax_attention(tokens.unsqueeze(1), queries, U, V)
             - att.gaussian_attention(law.mean, law.cov, queries, U, V)) ** 2).sum(-1).numpy()
    mean, low, high = mean_interval(gaps.mean(-1), 0.8)
    est = curve.output
    assert est.level == 0.8 and (est.mean[0], est.low[0], est.high[0]) == pytest.approx((mean, low, high), rel=1e-9)


@pytest.mark.parametrize("include_query", [False, True])
def test_softmax_gap_estimate_agrees_with_brute_force(include_query):
    # the same numbers as a direct computation with the same random draws, and an independent brute-force
    # Monte Carlo estimate inside the interval of the streaming one
    law = TokenLaw.standard("gaussian", 3, 0.8)
    g, U, V = _params(8, u_scale=1.0)
    P, Q, L = 80, 4, 200
    curve = conc.gap_curve(law, U, V, [L], n_prompts=P, n_queries=Q, seed=5, chunk=L, include_query=include_query)
    gen = seeding.generator(5, "prompts", L)  # the stream gap_curve draws from
    queries = TokenLaw.standard("gaussian", 3).sample((P, Q), gen)
    tokens = law.sample((P, L), gen)
    finite = att.softmax_attention(tokens.unsqueeze(1), queries, U, V, include_query=include_query)
    limit = att.gaussian_attention(law.mean, law.cov, queries, U, V)
    same = ((finite - limit) ** 2).sum(-1).mean()
    assert float(curve.output.mean[0]) == pytest.approx(float(same), rel=1e-10)
    brute = []
    for seed in range(4):
        gen = torch.Generator().manual_seed(100 + seed)
        queries = torch.randn(P, 3, generator=gen, **F64)
        tokens = law.sample((P, L), gen)
        finite = att.softmax_attention(tokens, queries, U, V, include_query=include_query)
        brute.append(((finite - att.gaussian_attention(law.mean, law.cov, queries, U, V)) ** 2).sum(-1))
    brute = torch.cat(brute)
    se = float(brute.std()) / math.sqrt(brute.numel())
    half = float(curve.output.high[0] - curve.output.mean[0])
    assert abs(float(brute.mean()) - float(curve.output.mean[0])) < 2 * math.hypot(half, 2 * se)


def test_float32_chunks_agree_with_float64():
    # the same 50,000 tokens per prompt, streamed in float32 and in float64: the gaps agree to 1e-3
    law = TokenLaw.standard("mixture", 3, 0.7)
    g, U, V = _params(6, u_scale=1.0)
    tokens = law.sample((8, 50_000), g)
    queries = torch.randn(8, 4, 3, generator=g, **F64)
    gaps = []
    for dtype in (torch.float64, torch.float32):
        m = conc.stream_moments(conc.tensor_draw(tokens.to(dtype)), 50_000, queries.to(dtype), U, second_order=True)
        first, second = conc.gap_moments(m, "softmax")
        assert first.dtype == torch.float64
        gaps.append(conc.squared_gaps(first, second, *conc.limit_moments(law, queries, U, second_order=True),
                                      queries, V))
    for name in ("output", "grad_U", "grad_V"):
        assert torch.allclose(gaps[0][name], gaps[1][name], rtol=1e-3), name
    curve = conc.gap_curve(law, U, V, [10], n_prompts=4, n_queries=2, dtype=torch.float32)
    assert curve.settings["dtype"] == "float32"


def test_gap_curve_is_reproducible_and_length_by_length():
    law = TokenLaw.standard("uniform", 3)
    _, U, V = _params(2)
    a = conc.gap_curve(law, U, V, [10, 50], n_prompts=8, n_queries=2, gradients=True, seed=3)
    b = conc.gap_curve(law, U, V, [50], n_prompts=8, n_queries=2, gradients=True, seed=3)
    assert a.output.mean[1] == b.output.mean[0] and a.grad_U.mean[1] == b.grad_U.mean[0]
    c = conc.gap_curve(law, U, V, [50], n_prompts=8, n_queries=2, seed=4)
    assert c.output.mean[0] != b.output.mean[0]
    json.dumps(a.as_dict())


def test_gap_curve_keeps_its_per_prompt_rows_for_paired_slopes():
    law = TokenLaw.standard("gaussian", 3)
    _, U, V = _params(2)
    curve = conc.gap_curve(law, U, V, [10, 30, 100, 300], n_prompts=8, n_queries=2, gradients=True, seed=3)
    assert curve.rows["output"].shape == (4, 8) and curve.rows["grad_U"].shape == (4, 8)
    np.testing.assert_allclose(curve.rows["output"].mean(1), curve.output.mean)
    paired = curve.slope_difference("grad_U", "output", n_boot=100)
    assert paired.difference == pytest.approx(curve.slope("grad_U").slope - curve.slope("output").slope, abs=1e-12)
    assert paired.delta[0] < paired.difference < paired.delta[1]
    with pytest.raises(ValueError, match="gradients=True"):
        conc.gap_curve(law, U, V, [10, 30, 100], n_prompts=4, n_queries=2).slope_difference()
    with pytest.raises(ValueError, match="min_length"):
        curve.slope_difference(min_length=200)


# ------------------------------------------------------------------------------------------ regression gaps (Section 4)

def _replay(task, L, P, seed):
    """The prompts, queries and targets that regression_gaps draws from a generator seeded by ``seed``."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(P, task.d, generator=g, **F64) * math.sqrt(task.task_var)
    x_q = torch.randn(P, task.d, generator=g, **F64) @ torch.linalg.cholesky(task.covariance).T
    y_q = (x_q * w).sum(-1) + torch.randn(P, generator=g, **F64) * math.sqrt(task.noise_var)
    tokens = task.token_draw(w, g)(L)
    query = torch.cat([x_q, torch.zeros(P, 1, **F64)], -1)
    return tokens, query, y_q, w


@pytest.mark.parametrize("kind", ["isotropic", "kms"])
def test_regression_gaps_match_direct_attention_and_autograd(kind):
    task = sal.RegressionTask.isotropic(3) if kind == "isotropic" else sal.RegressionTask.kms(3, 0.5)
    g = torch.Generator().manual_seed(3)
    U = 0.4 * torch.randn(4, 4, generator=g, **F64)
    V = torch.randn(4, 4, generator=g, **F64)
    L, P = 7, 5
    gaps = stability.regression_gaps(task, U, V, L, P, torch.Generator().manual_seed(11))
    tokens, query, y_q, w = _replay(task, L, P, 11)
    gamma = task.token_covariance(w)
    for p in range(P):
        Ur, Vr = U.clone().requires_grad_(True), V.clone().requires_grad_(True)
        out = sal.softmax_attention(tokens[p:p + 1], query[p:p + 1], Ur, Vr)[0]
        limit = Vr @ gamma[p] @ Ur @ query[p]
        assert torch.allclose((out - limit).square().sum(), gaps["output"][p], rtol=1e-9)
        grads = [torch.autograd.grad(0.5 * (o[-1] - y_q[p]) ** 2, (Ur, Vr), retain_graph=True) for o in (out, limit)]
        expected = sum((a - b).square().sum() for a, b in zip(*grads))
        assert torch.allclose(expected, gaps["gradient"][p], rtol=1e-8)


def test_output_gap_at_zero_U_has_its_closed_form():
    # U = 0: uniform weights, the limit is 0 and the output is the last row of V times the prompt mean;
    # with V = e_D e_D^T the gap is ybar^2, of mean (tau^2 tr Sigma + s^2) / L.
    task = sal.RegressionTask.kms(5, 0.5)
    L = 20
    V = torch.zeros(6, 6, **F64)
    V[-1, -1] = 1.0
    gaps = stability.regression_gaps(task, torch.zeros(6, 6, **F64), V, L, 20_000, torch.Generator().manual_seed(0))
    mean, low, high = mean_interval(gaps["output"].numpy(), 0.999)
    exact = (task.task_var * float(torch.trace(task.covariance)) + task.noise_var) / L
    assert low < exact < high


def test_trajectory_gaps_shapes_sup_and_common_prompts():
    task = sal.RegressionTask.isotropic(3)
    U0, V0 = sal.block_init(task, 0.5)
    U = torch.stack([U0, 2 * U0, 3 * U0])
    V = torch.stack([V0, V0, V0])
    out = stability.trajectory_gaps(task, U, V, (5, 50), n_prompts=64, seed=1)
    for name in ("output", "gradient"):
        mean = np.array(out[name]["mean"])
        assert mean.shape == (2, 3) and np.all(np.array(out[name]["low"]) <= mean)
        assert out[name]["sup"]["mean"] == mean.max(1).tolist()
    assert np.allclose(out["norm_U"], [float(torch.linalg.matrix_norm(u)) for u in U])
    again = stability.trajectory_gaps(task, U[:1], V[:1], (5,), n_prompts=64, seed=1)
    assert again["output"]["mean"][0][0] == out["output"]["mean"][0][0]  # same prompts at every point


def test_trajectory_gaps_bad_input():
    task = sal.RegressionTask.isotropic(3)
    with pytest.raises(ValueError, match="U and V"):
        stability.trajectory_gaps(task, torch.zeros(4, 4), torch.zeros(4, 4), (5,))
    with pytest.raises(ValueError, match="lengths"):
        stability.trajectory_gaps(task, torch.zeros(1, 4, 4), torch.zeros(1, 4, 4), ())
    with pytest.raises(ValueError, match="n_prompts"):
        stability.regression_gaps(task, torch.zeros(4, 4), torch.zeros(4, 4), 5, 1)


def test_regression_gaps_accept_a_degenerate_covariance():
    sigma, _ = rank_four_covariance()
    task = sal.RegressionTask(5, sigma)
    gaps = stability.regression_gaps(task, 0.3 * torch.eye(6, **F64), torch.eye(6, **F64), 10, 8,
                                torch.Generator().manual_seed(0))
    assert all(bool(torch.isfinite(v).all()) for v in gaps.values())


# ------------------------------------------------------------------------------------------ bad input

def _gaussian3():
    return TokenLaw.standard("gaussian", 3)


@pytest.mark.parametrize("call, match", [
    (lambda: conc.gap_curve("gaussian", torch.eye(3), torch.eye(3), [10]), "law"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(2), torch.eye(3), [10]), "U"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.full((3, 3), math.nan), [10]), "V"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), []), "lengths"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10, 0]), "lengths"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), 10), "lengths"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10], n_prompts=1), "n_prompts"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10], n_queries=0), "n_queries"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10], level=1.5), "level"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10], activation="relu"), "activation"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10], loss="mse"), "loss"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10], device="tpu"), "device"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10], dtype=torch.int64), "dtype"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10], gradients=True,
                            loss=lambda out: out), "loss"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10],
                            query_law=TokenLaw.standard("gaussian", 2)), "query_law"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10, 20, 30]).slope("grad_U"), "which"),
    (lambda: conc.gap_curve(_gaussian3(), torch.eye(3), torch.eye(3), [10, 20, 30]).slope(min_length=20),
     "min_length"),
    (lambda: conc.stream_moments(lambda k: torch.zeros(2, k, 3), 0, torch.zeros(2, 1, 3), torch.eye(3)), "L"),
    (lambda: conc.stream_moments(lambda k: torch.zeros(2, k, 3), 5, torch.zeros(2, 3), torch.eye(3)), "queries"),
    (lambda: conc.stream_moments(lambda k: torch.zeros(2, k, 4), 5, torch.zeros(2, 1, 3), torch.eye(3)), "draw"),
    (lambda: conc.effective_sample_size(torch.tensor([1.0, -1.0])), "weights"),
    (lambda: conc.effective_sample_size(torch.zeros(3)), "weights"),
    (lambda: conc.effective_sample_size(torch.tensor([1.0, math.inf])), "weights"),
    (lambda: conc.limit_moments("gaussian", torch.zeros(3), torch.eye(3)), "law"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------------------------------ rate predictions

def test_light_gap_constant_is_the_query_average_of_the_delta_method():
    from scipy import integrate
    from scipy import stats as sps

    for sigma, norm_U, D in [(0.25, 1.0, 3), (0.5, 1.0, 3), (0.3, 1.5, 2)]:
        a = sigma**2 * norm_U**2
        per_query = lambda t: math.exp(a * t + sps.chi2.logpdf(t, D)) * (D * sigma**2 + sigma**2 * a * t)  # noqa: E731
        expected, _ = integrate.quad(per_query, 0, math.inf)
        assert conc.light_gap_constant(sigma, norm_U, D) == pytest.approx(expected, rel=1e-8)
    with pytest.raises(ValueError, match="sigma"):
        conc.light_gap_constant(0.75, 1.0, 3)  # a = 0.5625: L E_L grows without limit


def test_light_gap_constant_matches_long_prompts():
    law = TokenLaw.standard("gaussian", 3, 0.25)
    curve = conc.gap_curve(law, torch.eye(3), torch.eye(3), [2000], n_prompts=64, n_queries=8, seed=3)
    C = conc.light_gap_constant(0.25, 1.0, 3)
    assert 2000 * curve.output.low[0] < C < 2000 * curve.output.high[0]


def test_gap_rate_light_and_heavy_regimes():
    assert conc.gap_rate(0.5) == conc.gap_rate(0.5, refined=True) == -1.0
    assert conc.gap_rate(1.0) == pytest.approx(-0.5)
    assert conc.gap_rate(1.0, refined=True) == pytest.approx(-(math.sqrt(5) - 1) / 2)
    assert conc.gap_rate(2.0) == pytest.approx(-0.125) and conc.gap_rate(2.0, refined=True) == pytest.approx(-0.2071, abs=1e-4)
    edge = 0.5**0.5 * (1 + 1e-9)  # both are continuous at a = 1/2, and the refined slope is the steeper one
    assert conc.gap_rate(edge, refined=True) == pytest.approx(-1.0, abs=1e-6)
    assert all(conc.gap_rate(s, refined=True) < conc.gap_rate(s) for s in (0.8, 1.0, 2.0, 5.0))
    with pytest.raises(ValueError, match="scale"):
        conc.gap_rate(-1.0)
