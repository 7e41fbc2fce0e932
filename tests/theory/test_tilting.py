"""The tilted measure three ways (closed form, quadrature, importance sampling) and the infinite-prompt limits."""
import functools

import pytest
import torch

from softmax_as_linear.registry import LAW_KINDS as KINDS
from softmax_as_linear.theory import attention as att
from softmax_as_linear.theory import tilting
from softmax_as_linear.theory.measures import TokenLaw

from helpers import chunk_mean_check, random_spd

SEEDS = [21, 22, 23]


def _setup(kind, D, seed, u_scale=0.4):
    g = torch.Generator().manual_seed(seed)
    law = TokenLaw(kind, 0.5 * torch.randn(D, generator=g, dtype=torch.float64), random_spd(D, g))
    U = u_scale * torch.randn(D, D, generator=g, dtype=torch.float64) / D**0.5
    V = torch.randn(D, D, generator=g, dtype=torch.float64)
    query = torch.randn(D, generator=g, dtype=torch.float64)
    return g, law, U, V, query


@functools.cache
def _quadrature(kind, D, seed):
    """The law of ``_setup(kind, D, seed)``, three random tilts ``u``, and the quadrature at the rows of
    ``[u, 0.8 u[0], 0]`` (the last two for the importance-sampling and zero-tilt tests).

    The 2-D grid costs the same for one tilt or several, so every test on this law reads the one quadrature.
    """
    g, law, *_ = _setup(kind, D, seed)
    u = 0.5 * torch.randn(3, D, generator=g, dtype=torch.float64)
    q = tilting.quadrature_tilted_moments(law, torch.cat([u, 0.8 * u[:1], torch.zeros(1, D, dtype=torch.float64)]))
    return law, u, q


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("D", [1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_quadrature_matches_closed_form(kind, D, seed):
    # Quadrature uses the density only; the closed forms use the cumulant generating function.
    law, u, q = _quadrature(kind, D, seed)
    assert q.log_mass.shape == (5,) and q.mean.shape == (5, D) and q.cov.shape == (5, D, D)
    assert torch.allclose(q.log_mass[:3], law.log_mgf(u), atol=1e-9)
    assert torch.allclose(q.mean[:3], law.tilted_mean(u), atol=1e-9)
    # The tilted covariance is the Hessian of K at u.
    hessian = torch.stack([torch.autograd.functional.hessian(law.log_mgf, row) for row in u])
    assert torch.allclose(q.cov[:3], hessian, atol=1e-8)


def test_quadrature_of_a_single_tilt_is_unbatched():
    _, law, *_ = _setup("laplace", 1, 5)
    u = torch.tensor([0.3], dtype=torch.float64)
    q = tilting.quadrature_tilted_moments(law, u)
    assert q.log_mass.shape == () and q.mean.shape == (1,) and q.cov.shape == (1, 1)
    assert torch.allclose(q.mean, law.tilted_mean(u), atol=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_quadrature_without_tilt_gives_the_law_moments(kind):
    law, _, q = _quadrature(kind, 2, SEEDS[0])
    assert float(q.log_mass[4]) == pytest.approx(0.0, abs=1e-10)
    assert torch.allclose(q.mean[4], law.mean, atol=1e-10)
    assert torch.allclose(q.cov[4], law.cov, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_importance_moments_converge_to_the_tilted_moments(kind, seed):
    # 20 independent estimates from 50,000 tokens each; their mean vs the quadrature, within 5 standard errors
    # (plus the O(1/L) bias of a ratio estimator, far below the floor).
    law, tilts, q = _quadrature(kind, 2, seed)
    u = 0.8 * tilts[0]  # 0.4 times the first standard normal draw after the law's
    tokens = law.sample((20, 50_000), torch.Generator().manual_seed(seed + 50))
    mean, cov = tilting.importance_moments(tokens, u)
    chunk_mean_check(mean, q.mean[3], floor=1e-3)
    chunk_mean_check(cov.flatten(-2), q.cov[3].flatten(), floor=2e-3)


def test_importance_mean_is_finite_prompt_softmax_attention():
    g, law, U, V, query = _setup("laplace", 3, 7)
    tokens = law.sample((4, 100), g)
    mean, _ = tilting.importance_moments(tokens, U @ query)
    assert torch.allclose(mean @ V.T, att.softmax_attention(tokens, query, U, V), atol=1e-12)
    # The moments are those of a probability measure: duplicating every token changes nothing.
    twice_mean, twice_cov = tilting.importance_moments(tokens.repeat(1, 2, 1), U @ query)
    assert torch.allclose(twice_mean, mean, atol=1e-12)
    assert torch.allclose(twice_cov, tilting.importance_moments(tokens, U @ query)[1], atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_infinite_prompt_softmax_is_the_limit_of_softmax_attention(kind, seed):
    # Law of large numbers: 30 prompts of 40,000 tokens vs the closed-form limit.
    g, law, U, V, query = _setup(kind, 3, seed)
    tokens = law.sample((30, 40_000), g)
    outputs = att.softmax_attention(tokens, query, U, V)
    chunk_mean_check(outputs, tilting.infinite_prompt_softmax(law, query, U, V), floor=2e-3)


def test_infinite_prompt_softmax_of_a_gaussian_is_lemma_2_1():
    g, law, U, V, _ = _setup("gaussian", 3, 8)
    queries = torch.randn(6, 3, generator=g, dtype=torch.float64)
    assert torch.allclose(tilting.infinite_prompt_softmax(law, queries, U, V),
                          att.gaussian_attention(law.mean, law.cov, queries, U, V), atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_infinite_prompt_linear(kind):
    g, law, U, V, query = _setup(kind, 3, 9)
    limit = tilting.infinite_prompt_linear(law, query, U, V)
    assert torch.allclose(limit, att.gaussian_linear_attention(law.mean, law.cov, query, U, V), atol=1e-12)
    tokens = law.sample((30, 40_000), g)
    chunk_mean_check(att.linear_attention(tokens, query, U, V), limit, floor=1e-3)


@pytest.mark.parametrize("kind", ["uniform", "laplace", "mixture"])
def test_non_gaussian_limits_are_not_affine(kind):
    # Second differences of z -> T[mu](z) along a line vanish for a Gaussian law only.
    law = TokenLaw.standard(kind, 1)
    gaussian = TokenLaw.standard("gaussian", 1)
    U, V = 0.5 * torch.eye(1), torch.eye(1)
    z = torch.tensor([[0.5], [1.0], [1.5]], dtype=torch.float64)
    second_difference = lambda law: (lambda t: t[0] - 2 * t[1] + t[2])(  # noqa: E731
        tilting.infinite_prompt_softmax(law, z, U, V)[:, 0])
    assert abs(float(second_difference(gaussian))) < 1e-14
    assert abs(float(second_difference(law))) > 1e-3


def test_tilted_density_of_a_gaussian_is_the_shifted_gaussian():
    g, law, U, _, query = _setup("gaussian", 2, 10)
    u = U @ query
    points = torch.randn(50, 2, generator=g, dtype=torch.float64) * 2
    shifted = torch.distributions.MultivariateNormal(law.mean + law.cov @ u, law.cov)
    assert torch.allclose(tilting.tilted_log_density(law, points, u), shifted.log_prob(points), atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_tilted_density_is_normalised_with_the_tilted_mean(kind):
    # A fine trapezoid rule in dimension 1, independent of the Gauss-Legendre quadrature.
    law = TokenLaw(kind, torch.tensor([0.2], dtype=torch.float64), torch.tensor([[0.7]], dtype=torch.float64))
    u = torch.tensor([0.6], dtype=torch.float64)
    x = torch.linspace(-40, 40, 400_001, dtype=torch.float64)[:, None]
    density = torch.exp(tilting.tilted_log_density(law, x, u))
    assert float(torch.trapezoid(density, x[:, 0])) == pytest.approx(1.0, abs=2e-4)
    assert float(torch.trapezoid(density * x[:, 0], x[:, 0])) == pytest.approx(float(law.tilted_mean(u)), abs=2e-4)


@pytest.mark.parametrize("call, match", [
    (lambda: tilting.infinite_prompt_softmax("gaussian", torch.zeros(2), torch.eye(2), torch.eye(2)), "law"),
    (lambda: tilting.infinite_prompt_softmax(TokenLaw.standard("gaussian", 2), torch.zeros(3), torch.eye(2),
                                             torch.eye(2)), "query"),
    (lambda: tilting.infinite_prompt_linear(TokenLaw.standard("gaussian", 2), torch.zeros(2), torch.eye(3),
                                            torch.eye(2)), "U"),
    (lambda: tilting.infinite_prompt_softmax(TokenLaw.standard("laplace", 1), torch.tensor([2.0]), torch.eye(1),
                                             torch.eye(1)), "u"),
    (lambda: tilting.quadrature_tilted_moments(TokenLaw.standard("gaussian", 3), torch.zeros(3)), "law"),
    (lambda: tilting.quadrature_tilted_moments(TokenLaw.standard("gaussian", 1), torch.zeros(1), panels=7), "panels"),
    (lambda: tilting.quadrature_tilted_moments(TokenLaw.standard("laplace", 1), torch.tensor([2.0])), "u"),
    (lambda: tilting.tilted_log_density(TokenLaw.standard("laplace", 1), torch.zeros(1), torch.tensor([2.0])), "u"),
    (lambda: tilting.tilted_log_density(TokenLaw.standard("gaussian", 2), torch.zeros(3), torch.zeros(2)), "points"),
    (lambda: tilting.importance_moments(torch.zeros(5), torch.zeros(5)), "tokens"),
    (lambda: tilting.importance_moments(torch.zeros(4, 2), torch.zeros(3)), "u"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_affine_misfit():
    g = torch.Generator().manual_seed(30)
    x = torch.randn(40, 2, generator=g, dtype=torch.float64)
    A, c = torch.randn(3, 2, generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)
    assert tilting.affine_misfit(x, x @ A.T + c) < 1e-12
    bent = x @ A.T + c
    bent[:, 0] += 0.1 * x[:, 0] ** 2
    assert tilting.affine_misfit(x, bent) > 0.05
    with pytest.raises(ValueError, match="inputs"):
        tilting.affine_misfit(x[:3], bent[:3])
    with pytest.raises(ValueError, match="outputs"):
        tilting.affine_misfit(x, bent[:10])
