"""Token laws have the mean, covariance, density and cumulant generating function they claim."""
import math

import pytest
import torch

from softmax_as_linear.registry import LAW_KINDS as KINDS
from softmax_as_linear.theory.measures import TokenLaw

from helpers import chunk_mean_check, random_spd


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [1, 2])
def test_moments(kind, seed):
    g = torch.Generator().manual_seed(seed)
    mean = torch.tensor([0.5, -1.0, 0.2], dtype=torch.float64)
    cov = random_spd(3, g)
    law = TokenLaw(kind, mean, cov)
    x = law.sample((400_000,), torch.Generator().manual_seed(10 + seed))
    assert x.shape == (400_000, 3)
    assert torch.allclose(x.mean(0), mean, atol=0.01)
    assert torch.allclose(torch.cov(x.T), cov, atol=0.02)


def test_non_gaussian_laws_differ_in_their_fourth_moment():
    kurtosis = {}
    for kind in KINDS:
        x = TokenLaw.standard(kind, 1).sample((400_000,), torch.Generator().manual_seed(0))[:, 0]
        kurtosis[kind] = float((x**4).mean())
    assert kurtosis["gaussian"] == pytest.approx(3.0, abs=0.05)
    assert kurtosis["uniform"] == pytest.approx(1.8, abs=0.05)
    assert kurtosis["laplace"] == pytest.approx(6.0, abs=0.3)


@pytest.mark.parametrize("call, match", [
    (lambda: TokenLaw("cauchy", torch.zeros(2), torch.eye(2)), "kind"),
    (lambda: TokenLaw("gaussian", torch.zeros(2), torch.eye(3)), "cov"),
    (lambda: TokenLaw("gaussian", torch.zeros(2), -torch.eye(2)), "cov"),
    (lambda: TokenLaw("mixture", torch.zeros(2), torch.eye(2), separation=1.0), "separation"),
    (lambda: TokenLaw.standard("gaussian", 2, scale=0.0), "scale"),
    (lambda: TokenLaw.standard("gaussian", 2).sample((0,)), "shape"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------- densities, cumulants and tilts
LAWS_1D_2D = [(kind, D) for kind in KINDS for D in (1, 2)]


def _law(kind, D, seed):
    g = torch.Generator().manual_seed(seed)
    mean = 0.5 * torch.randn(D, generator=g, dtype=torch.float64)
    return TokenLaw(kind, mean, random_spd(D, g)), g


@pytest.mark.parametrize("kind", KINDS)
def test_log_density_matches_torch_distributions(kind):
    # Closed-form references: torch's own Normal, Uniform, Laplace and a hand-written mixture in D = 1.
    law = TokenLaw(kind, torch.tensor([0.3], dtype=torch.float64), torch.tensor([[2.0]], dtype=torch.float64))
    x = torch.linspace(-4, 4, 81, dtype=torch.float64)[:, None]
    sd, m = torch.tensor(2.0, dtype=torch.float64).sqrt(), torch.tensor(0.3, dtype=torch.float64)
    dist = torch.distributions
    if kind == "gaussian":
        expected = dist.Normal(m, sd).log_prob(x[:, 0])
    elif kind == "uniform":
        expected = dist.Uniform(m - 3**0.5 * sd, m + 3**0.5 * sd, validate_args=False).log_prob(x[:, 0])
    elif kind == "laplace":
        expected = dist.Laplace(m, sd / 2**0.5).log_prob(x[:, 0])
    else:
        delta, inner_sd = (0.8 * 2.0) ** 0.5, (0.2 * 2.0) ** 0.5
        expected = torch.logsumexp(torch.stack([dist.Normal(m + delta, inner_sd).log_prob(x[:, 0]),
                                                dist.Normal(m - delta, inner_sd).log_prob(x[:, 0])]), 0) - math.log(2)
    got = law.log_density(x)
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(got), finite)
    assert torch.allclose(got[finite], expected[finite], atol=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind, D", LAWS_1D_2D)
def test_log_mgf_against_monte_carlo(kind, D, seed):
    # E exp(u^T z) over 20 independent chunks of 12,500 samples vs exp K(u), within 5 standard errors: every case
    # still rejects a wrong sign of m^T u or a factor 2 or 1/2 on the rest of K by more than twice the tolerance.
    law, g = _law(kind, D, seed)
    u = 0.3 * torch.randn(D, generator=g, dtype=torch.float64)
    x = law.sample((20, 12_500), torch.Generator().manual_seed(100 + seed))
    chunks = torch.exp(x @ u).mean(-1, keepdim=True)
    chunk_mean_check(chunks, torch.exp(law.log_mgf(u)).reshape(1))


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_tilted_mean_is_the_gradient_of_log_mgf(kind, seed):
    law, g = _law(kind, 3, seed)
    u = (0.3 * torch.randn(4, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
    (grad,) = torch.autograd.grad(law.log_mgf(u).sum(), u)
    assert torch.allclose(law.tilted_mean(u.detach()), grad, atol=1e-12)


def test_gaussian_tilt_is_lemma_2_1():
    law, g = _law("gaussian", 3, 4)
    u = torch.randn(5, 3, generator=g, dtype=torch.float64)
    assert torch.allclose(law.tilted_mean(u), law.mean + u @ law.cov, atol=1e-12)
    assert torch.allclose(law.log_mgf(u), u @ law.mean + 0.5 * ((u @ law.cov) * u).sum(-1), atol=1e-12)


def test_tilts_at_zero_and_uniform_tilt_is_bounded():
    for kind in KINDS:
        law, _ = _law(kind, 2, 5)
        assert torch.allclose(law.log_mgf(torch.zeros(2)), torch.zeros((), dtype=torch.float64), atol=1e-14)
        assert torch.allclose(law.tilted_mean(torch.zeros(2)), law.mean, atol=1e-14)
    # A tilted uniform law stays in its support: the standardised tilted mean tends to +-sqrt(3).
    law = TokenLaw.standard("uniform", 1)
    far = law.tilted_mean(torch.tensor([[1e3], [-1e3], [1e-6]], dtype=torch.float64))[:, 0]
    assert far[0] == pytest.approx(3**0.5, abs=1e-2) and far[1] == pytest.approx(-(3**0.5), abs=1e-2)
    assert far[2] == pytest.approx(1e-6, rel=1e-6)


def test_laplace_tilt_domain():
    law = TokenLaw.standard("laplace", 1)
    assert torch.isinf(law.log_mgf(torch.tensor([1.5])))
    assert torch.isfinite(law.log_mgf(torch.tensor([1.4])))
    assert float(law.tilted_mean(torch.tensor([1.0]))[0]) == pytest.approx(2.0)   # b / (1 - b^2/2) at b = 1
    with pytest.raises(ValueError, match="u"):
        law.tilted_mean(torch.tensor([1.5]))


def test_second_moment():
    law, _ = _law("mixture", 3, 6)
    x = law.sample((400_000,), torch.Generator().manual_seed(7))
    assert torch.allclose(x.T @ x / x.shape[0], law.second_moment, atol=0.03)


@pytest.mark.parametrize("call, match", [
    (lambda: TokenLaw.standard("gaussian", 2).log_density(torch.zeros(3)), "points"),
    (lambda: TokenLaw.standard("gaussian", 2).log_mgf(torch.zeros(3)), "u"),
    (lambda: TokenLaw.standard("uniform", 2).tilted_mean(torch.tensor([float("nan"), 0.0])), "u"),
])
def test_bad_input_to_tilts(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("kind", KINDS)
def test_tilted_moments_are_the_gradient_and_hessian_of_the_cgf(kind):
    law = TokenLaw.standard(kind, 2)
    u = torch.tensor([[0.3, -0.2], [0.1, 0.4]], dtype=torch.float64)
    mean, cov = law.tilted_moments(u)
    assert torch.allclose(mean, law.tilted_mean(u), atol=1e-14) and cov.shape == (2, 2, 2)
    hessian = torch.autograd.functional.hessian(lambda v: law.log_mgf(v), u[0])
    assert torch.allclose(cov[0], hessian, atol=1e-10)
    if kind == "gaussian":  # Lemma 2.1: N(m + Gamma u, Gamma)
        assert torch.allclose(cov, law.cov.expand(2, 2, 2), atol=1e-12)

