"""Chapter 6's checkers against wrong implementations a student might write (written here, not taken from the
checker's own list), each told what is wrong; and the references against the library's other routes."""
import itertools
import math

import numpy as np
import torch

from softmax_as_linear.exercises import chapter6
from softmax_as_linear.theory import covariates, tilting

from helpers import diagnosis as _message


def test_the_discrete_reference_agrees_with_importance_sampling_and_the_rademacher_closed_form():
    g = torch.Generator().manual_seed(0)
    atoms, u = torch.randn(9, 3, generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)
    equal = torch.full((9,), 1 / 9, dtype=torch.float64)
    assert torch.allclose(chapter6.discrete_tilted_mean(atoms, equal, u), tilting.importance_moments(atoms, u)[0])
    corners = torch.tensor(list(itertools.product((-1.0, 1.0), repeat=3)), dtype=torch.float64)
    assert torch.allclose(chapter6.discrete_tilted_mean(corners, torch.full((8,), 1 / 8, dtype=torch.float64), u),
                          covariates.tilted_mean("rademacher", u))


def test_discrete_tilted_mean_with_the_exponential_taken_as_is_overflows():
    def naive(atoms, probs, u):
        w = probs * torch.exp(atoms @ u)
        return (w / w.sum()) @ atoms
    assert "subtract the largest score" in _message(naive, "discrete_tilted_mean")


def test_discrete_tilted_mean_without_the_probabilities():
    def prompt_like(atoms, probs, u):
        s = atoms @ u
        w = np.exp(np.asarray(s - s.max()))
        return (w / w.sum()) @ np.asarray(atoms)
    assert "probabilities p_i are missing" in _message(prompt_like, "discrete_tilted_mean")


def test_discrete_tilted_mean_weighting_after_the_softmax():
    def late(atoms, probs, u):
        return (torch.softmax(atoms @ u, dim=0) * probs) @ atoms
    assert "after they were normalised" in _message(late, "discrete_tilted_mean")


def test_discrete_tilted_mean_unnormalised():
    def unnormalised(atoms, probs, u):
        return (probs[:, None] * torch.exp(atoms @ u)[:, None] * atoms).sum(0)
    assert "do not sum to one" in _message(unnormalised, "discrete_tilted_mean")


def test_discrete_tilted_mean_with_the_tilt_reversed():
    def reversed_tilt(atoms, probs, u):
        return torch.softmax(torch.log(probs) - atoms @ u, dim=0) @ atoms
    assert "sign in the exponent" in _message(reversed_tilt, "discrete_tilted_mean")


def test_discrete_tilted_mean_returning_the_weights_has_the_wrong_shape():
    def weights(atoms, probs, u):
        return torch.softmax(atoms @ u + torch.log(probs), dim=0)
    assert "expected shape (3,)" in _message(weights, "discrete_tilted_mean")


def test_uniform_tilted_mean_with_cosh_over_sinh_and_no_care_at_zero():
    def naive(b):
        a = math.sqrt(3)
        return a * torch.cosh(a * b) / torch.sinh(a * b) - 1 / b
    assert "infinity - infinity" in _message(naive, "uniform_tilted_mean")


def _langevin(x):
    small = x.abs() < 1e-4
    safe = torch.where(small, torch.ones_like(x), x)
    return torch.where(small, x / 3, 1 / torch.tanh(safe) - 1 / safe)


def test_uniform_tilted_mean_of_the_unit_interval():
    assert "uniform law on [-1, 1]" in _message(_langevin, "uniform_tilted_mean")


def test_uniform_tilted_mean_scaling_only_the_output_or_only_the_argument():
    assert "only the output is scaled" in _message(lambda b: math.sqrt(3) * _langevin(b), "uniform_tilted_mean")
    assert "only the argument is scaled" in _message(lambda b: _langevin(math.sqrt(3) * b), "uniform_tilted_mean")


def test_uniform_tilted_mean_with_the_rademacher_formula():
    assert "Rademacher" in _message(lambda b: np.tanh(np.asarray(b)), "uniform_tilted_mean")


def test_uniform_tilted_mean_with_the_sign_flipped():
    assert "sign is flipped" in _message(lambda b: -math.sqrt(3) * _langevin(math.sqrt(3) * b), "uniform_tilted_mean")
