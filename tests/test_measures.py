"""Token laws have the mean and covariance they claim, and reject bad input."""
import pytest
import torch

from softmax_as_linear.measures import KINDS, TokenLaw

from conftest import random_spd


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
