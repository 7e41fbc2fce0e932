"""softmax / linear attention and Lemma 2.1 against Monte Carlo, invariances, stability, bad input."""
import math

import pytest
import torch

from softmax_as_linear import RegressionTask
from softmax_as_linear.theory import attention as att

from helpers import chunk_mean_check, random_spd

SEEDS = [11, 12, 13]


def _setup(seed, D=3, u_scale=0.4):
    g = torch.Generator().manual_seed(seed)
    mean = 0.5 * torch.randn(D, generator=g, dtype=torch.float64)
    cov = random_spd(D, g)
    U = u_scale * torch.randn(D, D, generator=g, dtype=torch.float64) / math.sqrt(D)
    V = torch.randn(D, D, generator=g, dtype=torch.float64)
    query = torch.randn(D, generator=g, dtype=torch.float64)
    return g, mean, cov, U, V, query


def _gaussian_samples(g, mean, cov, shape):
    chol = torch.linalg.cholesky(cov)
    return mean + torch.randn(*shape, mean.shape[-1], generator=g, dtype=torch.float64) @ chol.T


@pytest.fixture(scope="module")
def gaussian_prompts():
    """``draw(seed)``: the 40 prompts of 50,000 tokens drawn after ``_setup(seed)``, drawn once for both attentions
    (the same tokens either would draw) and forgotten after the second use."""
    drawn, uses = {}, {}

    def draw(seed):
        if seed not in drawn:
            g, mean, cov, *_ = _setup(seed)
            drawn[seed] = _gaussian_samples(g, mean, cov, (40, 50_000))
        uses[seed] = uses.get(seed, 0) + 1
        return drawn.pop(seed) if uses[seed] == 2 else drawn[seed]
    return draw


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("finite, limit", [(att.softmax_attention, att.gaussian_attention),
                                           (att.linear_attention, att.gaussian_linear_attention)],
                         ids=["softmax (Lemma 2.1)", "linear"])
def test_gaussian_limits_against_monte_carlo(seed, finite, limit, gaussian_prompts):
    # 40 independent prompts of 50,000 tokens: mean of the finite-prompt outputs vs the closed-form
    # limit (V m + V Gamma U z for softmax attention, Lemma 2.1).
    _, mean, cov, U, V, query = _setup(seed)
    tokens = gaussian_prompts(seed)
    chunk_mean_check(finite(tokens, query, U, V), limit(mean, cov, query, U, V))


@pytest.mark.parametrize("seed", SEEDS)
def test_tilted_gaussian_moments(seed):
    # Importance-weighted samples of mu = N(m, Gamma) with weights exp(z'^T U z) have the moments of nu_z.
    g, mean, cov, U, V, query = _setup(seed)
    samples = _gaussian_samples(g, mean, cov, (400_000,))
    w = torch.softmax(samples @ (U @ query), dim=0)
    tilted_mean, tilted_cov = att.tilted_gaussian(mean, cov, query, U)
    mc_mean = w @ samples
    centred = samples - mc_mean
    mc_cov = (centred * w[:, None]).T @ centred
    assert torch.allclose(mc_mean, tilted_mean, atol=0.02)
    assert torch.allclose(mc_cov, tilted_cov, atol=0.03)


@pytest.mark.parametrize("seed", SEEDS)
def test_lemma_2_1_singular_covariance(seed):
    # Noise-free regression tokens (x, w^T x) have a rank-d covariance Gamma_w; the lemma still holds.
    task = RegressionTask.isotropic(d=3, task_var=1.0, noise_var=0.0)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(3, generator=g, dtype=torch.float64)
    gamma_w = task.token_covariance(w)
    assert torch.linalg.matrix_rank(gamma_w) == 3
    x = torch.randn(40, 50_000, 3, generator=g, dtype=torch.float64)
    tokens = torch.cat([x, (x @ w)[..., None]], dim=-1)
    U = 0.3 * torch.randn(4, 4, generator=g, dtype=torch.float64)
    V = torch.randn(4, 4, generator=g, dtype=torch.float64)
    query = torch.randn(4, generator=g, dtype=torch.float64) / 2
    outputs = att.softmax_attention(tokens, query, U, V)
    chunk_mean_check(outputs, att.gaussian_attention(torch.zeros(4, dtype=torch.float64), gamma_w, query, U, V))


def test_centred_softmax_equals_linear_limit_and_not_otherwise():
    g, mean, cov, U, V, query = _setup(5)
    zero = torch.zeros_like(mean)
    assert torch.allclose(att.gaussian_attention(zero, cov, query, U, V),
                          att.gaussian_linear_attention(zero, cov, query, U, V))
    gap = att.gaussian_attention(mean, cov, query, U, V) - att.gaussian_linear_attention(mean, cov, query, U, V)
    assert gap.norm() > 1e-3


def test_permutation_and_duplication_invariance():
    g = torch.Generator().manual_seed(3)
    tokens = torch.randn(7, 4, generator=g, dtype=torch.float64)
    query = torch.randn(4, generator=g, dtype=torch.float64)
    U, V = torch.randn(2, 4, 4, generator=g, dtype=torch.float64)
    out = att.softmax_attention(tokens, query, U, V)
    perm = torch.randperm(7, generator=g)
    assert torch.allclose(att.softmax_attention(tokens[perm], query, U, V), out)
    assert torch.allclose(att.softmax_attention(tokens.repeat(3, 1), query, U, V), out)
    assert torch.allclose(att.linear_attention(tokens.repeat(3, 1), query, U, V),
                          att.linear_attention(tokens, query, U, V))
    # Same length, different measure: a different output (it is not a function of L alone).
    other = tokens.clone()
    other[0] = other[1]
    assert not torch.allclose(att.softmax_attention(other, query, U, V), out)


def test_include_query_adds_the_query_to_the_measure():
    g = torch.Generator().manual_seed(4)
    tokens = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    query = torch.randn(2, 3, generator=g, dtype=torch.float64)
    U, V = torch.randn(2, 3, 3, generator=g, dtype=torch.float64)
    joined = torch.cat([tokens, query[:, None]], dim=1)
    assert torch.allclose(att.softmax_attention(tokens, query, U, V, include_query=True),
                          att.softmax_attention(joined, query, U, V))
    assert torch.allclose(att.linear_attention(tokens, query, U, V, include_query=True),
                          att.linear_attention(joined, query, U, V))


def test_huge_scores_are_stable():
    tokens = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    query = torch.tensor([1.0, 0.0])
    U = 1e4 * torch.eye(2)
    V = torch.eye(2)
    out = att.softmax_attention(tokens, query, U, V)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, tokens[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batching_and_dtype(dtype):
    g = torch.Generator().manual_seed(6)
    tokens = torch.randn(2, 3, 5, 4, generator=g).to(dtype)
    query = torch.randn(3, 4, generator=g).to(dtype)
    U = torch.randn(2, 1, 4, 4, generator=g).to(dtype)
    V = torch.randn(4, 4, generator=g).to(dtype)
    out = att.softmax_attention(tokens, query, U, V)
    assert out.shape == (2, 3, 4) and out.dtype == dtype
    assert torch.allclose(out[1, 2], att.softmax_attention(tokens[1, 2], query[2], U[1, 0], V), atol=1e-5)


@pytest.mark.parametrize("call, match", [
    (lambda: att.softmax_attention(torch.zeros(0, 3), torch.zeros(3), torch.eye(3), torch.eye(3)), "tokens"),
    (lambda: att.softmax_attention(torch.zeros(4, 3), torch.zeros(2), torch.eye(3), torch.eye(3)), "query"),
    (lambda: att.softmax_attention(torch.zeros(4, 3), torch.zeros(3), torch.eye(2), torch.eye(3)), "U"),
    (lambda: att.linear_attention(torch.zeros(4, 3), torch.zeros(3), torch.eye(3), torch.ones(3, 2)), "V"),
    (lambda: att.softmax_attention(torch.full((4, 3), float("nan")), torch.zeros(3), torch.eye(3), torch.eye(3)),
     "tokens"),
    (lambda: att.gaussian_attention(torch.zeros(2), -torch.eye(2), torch.zeros(2), torch.eye(2), torch.eye(2)),
     "cov"),
    (lambda: att.gaussian_attention(torch.zeros(2), torch.tensor([[1.0, 2.0], [0.0, 1.0]]), torch.zeros(2),
                                    torch.eye(2), torch.eye(2)), "cov"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_float32_mean_with_singular_float64_covariance():
    task = RegressionTask.isotropic(d=2, task_var=1.0, noise_var=0.0)
    gamma = task.token_covariance(torch.tensor([0.3, -1.2], dtype=torch.float64))
    out = att.gaussian_attention(torch.zeros(3), gamma, torch.ones(3), torch.eye(3), torch.eye(3))
    assert out.dtype == torch.float64 and torch.allclose(out, gamma @ torch.ones(3, dtype=torch.float64))
