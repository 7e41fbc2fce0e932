"""Covariate laws: standardised draws, cumulant generating functions and their derivatives, moments, quadrature."""
import math

import pytest
import torch

from softmax_as_linear.theory import covariates

LAWS = ("gaussian", "uniform", "rademacher")


@pytest.mark.parametrize("law", LAWS)
def test_draws_are_standardised_with_the_law_s_moments(law):
    xi = covariates.draw(law, 400_000, generator=torch.Generator().manual_seed(0))
    n = xi.numel()
    for k, expected in ((1, 0.0), (2, 1.0), (3, 0.0), (4, covariates.moment(law, 4))):
        values = xi**k
        se = float(values.std()) / math.sqrt(n)
        assert abs(float(values.mean()) - expected) < 5 * se + 1e-12, (k, float(values.mean()))
    if law == "rademacher":
        assert set(xi.unique().tolist()) == {-1.0, 1.0}
    if law == "uniform":
        assert float(xi.abs().max()) <= math.sqrt(3)


def test_gaussian_draws_are_those_of_randn():
    a = covariates.draw("gaussian", 7, 3, generator=torch.Generator().manual_seed(4))
    b = torch.randn(7, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rademacher_draws_are_those_of_bernoulli(dtype):
    # the CPU draws them as bernoulli_(1/2) does (a float64 uniform per entry against 1/2), faster: the same signs
    # and the same generator state after, into a strided view as into a whole tensor
    drawn, expected = torch.zeros(40, 301, 6, dtype=dtype), torch.zeros(40, 301, 6, dtype=dtype)
    mine, theirs = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    covariates.fill_("rademacher", drawn[..., :5], mine)
    expected[..., :5].bernoulli_(0.5, generator=theirs).mul_(2).sub_(1)
    assert torch.equal(drawn, expected) and torch.equal(mine.get_state(), theirs.get_state())
    torch.manual_seed(5)
    default = covariates.draw("rademacher", 1000, dtype=dtype)
    torch.manual_seed(5)
    assert torch.equal(default, torch.empty(1000, dtype=dtype).bernoulli_(0.5).mul_(2).sub_(1))


def test_quadrature_rules_are_computed_once_and_handed_out_as_copies():
    nodes, weights = covariates.quadrature("uniform", 24)
    nodes.zero_()
    again, _ = covariates.quadrature("uniform", 24)
    assert float(again.abs().min()) > 0 and again.data_ptr() != nodes.data_ptr()


@pytest.mark.parametrize("law", LAWS)
def test_cgf_derivatives_match_autograd_and_monte_carlo(law):
    # (not b = 0 itself, where autograd differentiates |b| in log cosh to a second derivative of 0)
    b = torch.tensor([-2.5, -0.7, -1e-4, 3e-4, 0.4, 1.9], dtype=torch.float64, requires_grad=True)
    k = covariates.cgf(law, b)
    (first,) = torch.autograd.grad(k.sum(), b, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), b)
    assert torch.allclose(first, covariates.tilted_mean(law, b), atol=1e-6)
    assert torch.allclose(second, covariates.tilted_variance(law, b.detach()), atol=1e-5)
    # the tilt of a sample: E[xi e^{b xi}] / E[e^{b xi}], self-normalised (exact for the two Rademacher atoms)
    xi = covariates.draw(law, 1_000_000, generator=torch.Generator().manual_seed(1))
    for value in (0.7, -1.3):
        weights = torch.exp(value * xi)
        estimate = float((weights * xi).sum() / weights.sum())
        assert abs(estimate - float(covariates.tilted_mean(law, torch.tensor(value)))) < 0.01
        assert abs(math.log(float(weights.mean())) - float(covariates.cgf(law, torch.tensor(value)))) < 0.01


@pytest.mark.parametrize("law", LAWS)
def test_quadrature_integrates_the_moments(law):
    nodes, weights = covariates.quadrature(law, 12)
    assert abs(float(weights.sum()) - 1) < 1e-12
    for k in (2, 4, 6):
        assert abs(float((weights * nodes**k).sum()) - covariates.moment(law, k)) < 1e-10


def test_bad_law_names_the_argument():
    with pytest.raises(ValueError, match="covariates"):
        covariates.check_covariates("laplace")
    with pytest.raises(ValueError, match="covariates"):
        covariates.tilted_mean("cauchy", torch.zeros(2))
    with pytest.raises(ValueError, match="k must"):
        covariates.moment("uniform", 3)
