"""Concentration estimators: streaming against direct attention, exact limits against Monte Carlo,
gradient gaps against autograd, confidence intervals against a known truth, Figure 1, bad input."""
import json
import math

import numpy as np
import pytest
import torch

import softmax_as_linear as sal
from softmax_as_linear import attention as att
from softmax_as_linear import concentration as conc
from softmax_as_linear.measures import KINDS, TokenLaw

from conftest import chunk_mean_check, random_spd

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


def test_regression_draw_has_the_task_token_law():
    task = sal.RegressionTask.kms(d=3, rho=0.5)
    w = torch.tensor([[0.5, -1.0, 2.0]], **F64)
    draw = conc.regression_draw(task, w, torch.Generator().manual_seed(0))
    tokens = torch.cat([draw(100_000) for _ in range(4)], dim=1)[0]
    assert torch.allclose(torch.cov(tokens.T), task.token_covariance(w)[0], atol=0.05 * 6)
    assert torch.allclose(tokens.mean(0), torch.zeros(4, **F64), atol=0.03)


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
    # 30 independent prompts of 40,000 tokens; the ratio estimator's O(1/L) bias is far below the tolerance
    law = _law(kind, seed)
    g, U, _ = _params(seed, u_scale=0.4)
    queries = torch.randn(1, 2, 3, generator=g, **F64).expand(30, 2, 3)
    if kind == "laplace":  # keep |C^T U z| <= 0.3: finite moments of the weights up to order 4
        b = queries[0] @ U.T @ torch.linalg.cholesky(law.cov)
        U = U * 0.3 / float(b.abs().max())
    m = conc.stream_moments(conc.law_draw(law, 30, g), 40_000, queries, U, second_order=True)
    mean, cov = conc.tilted_moments(law, queries[0], U)
    chunk_mean_check(m.tilted_mean, mean)
    chunk_mean_check(m.tilted_cov, cov, floor=2e-3)


def test_tilted_moments_of_a_gaussian_are_lemma_2_1():
    law = _law("gaussian", 3)
    g, U, _ = _params(3)
    z = torch.randn(5, 3, generator=g, **F64)
    mean, cov = conc.tilted_moments(law, z, U)
    tilted_mean, tilted_cov = att.tilted_gaussian(law.mean, law.cov, z, U)
    assert torch.allclose(mean, tilted_mean, atol=1e-12) and torch.allclose(cov, tilted_cov, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_tilted_covariance_is_symmetric_positive_definite(kind):
    law = _law(kind, 4)
    g, U, _ = _params(4, u_scale=0.4)
    _, cov = conc.tilted_moments(law, torch.randn(6, 3, generator=g, **F64), U)
    assert torch.allclose(cov, cov.transpose(-1, -2), atol=1e-12)
    assert (torch.linalg.eigvalsh(cov) > 0).all()


def test_laplace_limit_outside_its_domain_is_an_error():
    law = TokenLaw.standard("laplace", 2)
    with pytest.raises(ValueError, match="law"):
        conc.tilted_moments(law, torch.tensor([[3.0, 0.0]], **F64), torch.eye(2, **F64))


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
    out = conc.icl_batch_gaps(soft, task, 40, 16, draw=conc.tensor_draw(batch.tokens), queries=batch.query,
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
    grads = [torch.autograd.grad(((sal.models.predict(batch.tokens, batch.query, U, V, a) - batch.target) ** 2).mean(),
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
    curve = conc.gap_curve(law, U, V, [10, 100, 1000], activation="linear", n_prompts=200, n_queries=8, seed=seed)
    exact = np.array([_linear_exact_gap(cov, U, V, L) for L in curve.lengths])
    assert np.all((curve.output.low <= exact) & (exact <= curve.output.high))
    slope, se = curve.slope()
    assert abs(slope + 1) < 0.05 and se < 0.05


def test_confidence_intervals_cover_at_their_level():
    # 200 independent 90% intervals of the exact linear E_L: coverage within 3 binomial standard errors.
    # The squared gaps are very skewed (skewness about 4 here): with 100 prompts and 2 queries each the
    # Student-t interval covers only about 85%, so the test uses enough prompts for the CLT to hold.
    g, U, V = _params(4, u_scale=1.0)
    cov = random_spd(3, g)
    law = TokenLaw("gaussian", torch.zeros(3, **F64), cov)
    exact = _linear_exact_gap(cov, U, V, 20)
    covered = []
    for seed in range(200):
        est = conc.gap_curve(law, U, V, [20], activation="linear", n_prompts=400, n_queries=16, level=0.9,
                             seed=seed).output
        covered.append(est.low[0] <= exact <= est.high[0])
    rate = np.mean(covered)
    assert abs(rate - 0.9) < 3 * math.sqrt(0.9 * 0.1 / 200), rate


@pytest.mark.parametrize("include_query", [False, True])
def test_softmax_gap_estimate_agrees_with_brute_force(include_query):
    # the same numbers as a direct computation with the same random draws, and an independent brute-force
    # Monte Carlo estimate inside the interval of the streaming one
    law = TokenLaw.standard("gaussian", 3, 0.8)
    g, U, V = _params(8, u_scale=1.0)
    P, Q, L = 80, 4, 200
    curve = conc.gap_curve(law, U, V, [L], n_prompts=P, n_queries=Q, seed=5, chunk=L, include_query=include_query)
    gen = torch.Generator().manual_seed(conc._length_seed(5, L))
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


def test_mean_interval_matches_the_t_interval():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    mean, low, high = conc.mean_interval(x, 0.95)
    assert mean == pytest.approx(3.5)
    assert high - mean == pytest.approx(3.182446 * x.std(ddof=1) / 2, rel=1e-5)
    assert mean - low == pytest.approx(high - mean)


# ------------------------------------------------------------------------------------------ Figure 1

def test_figure1_small_preset(monkeypatch):
    monkeypatch.setitem(conc.FIGURE1_PRESETS, "tiny", dict(lengths=[10, 1000], batch=16, n_batches=3))
    out = conc.figure1("tiny", device="cpu")
    json.dumps(out)
    assert out["lengths"] == [10, 1000] and out["settings"]["n_prompts"] == 48
    for name in ("output", "grad_weights", "grad_uv", "grad_norm_linear", "ess"):
        assert len(out[name]["mean"]) == 2
    assert out["output"]["mean"][1] < out["output"]["mean"][0] / 10
    assert out["grad_weights"]["mean"][1] < out["grad_weights"]["mean"][0] / 10
    assert out == conc.figure1("tiny", device="cpu")


def test_figure1_unknown_preset():
    with pytest.raises(ValueError, match="preset"):
        conc.figure1("huge")


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
    (lambda: conc.mean_interval([1.0]), "samples"),
    (lambda: conc.mean_interval([1.0, 2.0], level=0.0), "level"),
    (lambda: conc.tilted_moments("gaussian", torch.zeros(3), torch.eye(3)), "law"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
