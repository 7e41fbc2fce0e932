"""Chapter 8's checkers against wrong implementations a student might write (written here, not taken from the
checker's own list), each told what is wrong; and the references against a direct computation."""
import numpy as np
import torch

from softmax_as_linear.exercises import chapter8

from helpers import diagnosis as _message


def test_the_references_agree_with_the_formulas_and_with_monte_carlo():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 3, generator=g, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True)
    y, q = torch.randn(9, generator=g, dtype=torch.float64), x[0]
    e = torch.exp(4.0 * x @ q)
    assert torch.allclose(chapter8.sphere_smoother(x, y, q, 4.0), e @ y / e.sum())
    omega, phase, coef = (torch.randn(3, 2, generator=g, dtype=torch.float64), torch.rand(3, generator=g,
                          dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64))
    mean, cov = torch.randn(2, generator=g, dtype=torch.float64), torch.tensor([[0.5, 0.2], [0.2, 0.3]],
                                                                                  dtype=torch.float64)
    xi = torch.randn(400_000, 2, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov).T
    values = torch.cos((mean + xi) @ omega.T + phase) @ coef
    se = float(values.std() / len(values) ** 0.5)
    exact = float(chapter8.gaussian_smoothed_cosines(omega, phase, coef, mean, cov))
    assert abs(float(values.mean()) - exact) < 5 * se


def test_smoother_with_raw_exponentials_overflows():
    def naive(inputs, labels, query, w):
        e = torch.exp(w * inputs @ query)
        return (e * labels).sum() / e.sum()
    assert "subtract the largest score" in _message(naive, "sphere_smoother")


def test_smoother_summing_instead_of_averaging():
    def summed(inputs, labels, query, w):
        return (torch.exp(w * (inputs @ query)) * labels).sum()
    assert "do not sum to one" in _message(summed, "sphere_smoother")


def test_smoother_written_with_the_distance_and_no_half():
    def distance(inputs, labels, query, w):
        d2 = ((inputs - query) ** 2).sum(1)
        return torch.softmax(-w * d2, 0) @ labels
    assert "twice too narrow" in _message(distance, "sphere_smoother")


def test_smoother_with_w_as_a_variance():
    def variance(inputs, labels, query, w):
        x, y, q = (np.asarray(a) for a in (inputs, labels, query))
        with np.errstate(divide="ignore", invalid="ignore"):   # w = 0 divides by zero, as the student's would
            s = -((x - q) ** 2).sum(1) / (2 * w)
            a = np.exp(s - s.max())
            return a @ y / a.sum()
    assert "divides by w" in _message(variance, "sphere_smoother")


def test_smoother_with_the_minus_sign_of_a_distance_kept_on_the_inner_product():
    def flipped(inputs, labels, query, w):
        return torch.softmax(-w * inputs @ query, 0) @ labels
    assert "sign is flipped" in _message(flipped, "sphere_smoother")


def test_smoother_returning_the_weights_has_the_wrong_shape():
    def weights(inputs, labels, query, w):
        return torch.softmax(w * inputs @ query, 0)
    assert "expected a scalar" in _message(weights, "sphere_smoother")


def test_smoothed_cosines_without_the_damping():
    def unsmoothed(omega, phase, coef, mean, cov):
        return (coef * torch.cos(omega @ mean + phase)).sum()
    assert "without smoothing" in _message(unsmoothed, "gaussian_smoothed_cosines")


def test_smoothed_cosines_without_the_half():
    def no_half(omega, phase, coef, mean, cov):
        q = torch.einsum("jk,kl,jl->j", omega, cov, omega)
        return (coef * torch.exp(-q) * torch.cos(omega @ mean + phase)).sum()
    assert "misses its 1/2" in _message(no_half, "gaussian_smoothed_cosines")


def test_smoothed_cosines_with_an_identity_covariance():
    def identity(omega, phase, coef, mean, cov):
        return (coef * torch.exp(-0.5 * omega.norm(dim=1) ** 2) * torch.cos(omega @ mean + phase)).sum()
    assert "ignores Sigma" in _message(identity, "gaussian_smoothed_cosines")


def test_smoothed_cosines_with_the_variances_only():
    def variances(omega, phase, coef, mean, cov):
        damping = torch.exp(-0.5 * (omega**2 * torch.diag(cov)).sum(1))
        return (coef * damping * torch.cos(omega @ mean + phase)).sum()
    assert "diagonal of Sigma only" in _message(variances, "gaussian_smoothed_cosines")


def test_smoothed_cosines_with_the_row_sums():
    def rows(omega, phase, coef, mean, cov):
        damping = torch.exp(-(omega @ cov @ omega.T).sum(1) / 2)
        return coef @ (damping * torch.cos(omega @ mean + phase))
    assert "sums its rows" in _message(rows, "gaussian_smoothed_cosines")


def test_smoothed_cosines_with_a_sign_flipped():
    def minus(omega, phase, coef, mean, cov):
        damping = torch.exp(-0.5 * ((omega @ cov) * omega).sum(1))
        return -(coef * damping * torch.cos(omega @ mean + phase)).sum()
    assert "sign is flipped" in _message(minus, "gaussian_smoothed_cosines")
