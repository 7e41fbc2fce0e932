r"""Chapter 6's coding exercises: the mean of a discrete law tilted by :math:`e^{u^\top x}`, and the uniform entry's
tilted mean :math:`k'(b)` in closed form.

Shapes: ``atoms (n, d)``, ``probs (n,)``, ``u (d,)`` -> ``(d,)``; ``b`` any shape -> the same shape. The references
are a short implementation here (softmax weights of the scores :math:`u^\top x_i + \log p_i`; with equal
probabilities it is :func:`~softmax_as_linear.theory.tilting.importance_moments`'s mean) and
:func:`~softmax_as_linear.theory.covariates.tilted_mean`.
"""
from __future__ import annotations

import itertools
import math

import torch

from ..theory import covariates
from .feedback import Case, Exercise, Mistake

_F64 = dict(dtype=torch.float64)
_ROOT3 = math.sqrt(3.0)


def _discrete_cases() -> list[Case]:
    g = torch.Generator().manual_seed(601)
    cases = []
    atoms = torch.randn(7, 3, generator=g, **_F64)
    probs = torch.rand(7, generator=g, **_F64) + 0.1
    cases.append(Case("random atoms and probabilities", (atoms, probs / probs.sum(), torch.randn(3, generator=g,
                                                                                                 **_F64))))
    corners = torch.tensor(list(itertools.product((-1.0, 1.0), repeat=3)), **_F64)
    cases.append(Case("Rademacher law on {-1, 1}^3 (eight corners, 1/8 each)",
                      (corners, torch.full((8,), 1 / 8, **_F64), torch.tensor([0.3, -1.2, 2.0], **_F64))))
    probs = torch.rand(5, generator=g, **_F64) + 0.1
    cases.append(Case("u = 0 (no tilt)", (torch.randn(5, 2, generator=g, **_F64), probs / probs.sum(),
                                          torch.zeros(2, **_F64))))
    cases.append(Case("one atom", (torch.randn(1, 3, generator=g, **_F64), torch.ones(1, **_F64),
                                   torch.randn(3, generator=g, **_F64))))
    probs = torch.rand(6, generator=g, **_F64) + 0.1
    cases.append(Case("u in the thousands (scores in the thousands)",
                      (torch.randn(6, 2, generator=g, **_F64), probs / probs.sum(), torch.tensor([1500.0, -900.0],
                                                                                              **_F64))))
    return cases


def discrete_tilted_mean(atoms, probs, u):
    r""":math:`\mathbb{E}_{\nu_u}[x] = \sum_i p_i e^{u^\top x_i} x_i / \sum_j p_j e^{u^\top x_j}`, the reference.

    The weights are the softmax of the scores :math:`u^\top x_i + \log p_i` (max-subtracted: no overflow).
    """
    atoms, probs, u = (torch.as_tensor(a, dtype=torch.float64) for a in (atoms, probs, u))
    return torch.softmax(atoms @ u + torch.log(probs), dim=0) @ atoms


def uniform_tilted_mean(b):
    r""":math:`k'(b) = \sqrt3\coth(\sqrt3 b) - 1/b` (:math:`0` at :math:`b = 0`), elementwise, the reference."""
    return covariates.tilted_mean("uniform", torch.as_tensor(b, dtype=torch.float64))


def _uniform_cases() -> list[Case]:
    g = torch.Generator().manual_seed(602)
    return [Case("random b of shape (4, 3)", (torch.randn(4, 3, generator=g, **_F64),)),
            Case("b = 0 and small b", (torch.tensor([0.0, 1e-2, -1e-2, 0.2], **_F64),)),
            Case("large |b| (up to 1000)", (torch.tensor([-1000.0, -60.0, 5.0, 60.0, 1000.0], **_F64),))]


DISCRETE = Exercise(
    function="discrete_tilted_mean", chapter=6, reference=discrete_tilted_mean, cases=_discrete_cases,
    mistakes=(
        Mistake("the tilted weights do not sum to one: divide p_i e^{u^T x_i} by the sum of all of them.",
                lambda x, p, u: (p * torch.exp(x @ u)) @ x),
        Mistake("the law's probabilities p_i are missing: it tilts the uniform weights 1/n of a prompt, which is the"
                " answer only when every atom is equally likely.",
                lambda x, p, u: torch.softmax(x @ u, 0) @ x),
        Mistake("p_i multiplies the softmax weights after they were normalised, so the weights no longer sum to one:"
                " put p_i inside the normalisation, p_i e^{u^T x_i} / sum_j p_j e^{u^T x_j}.",
                lambda x, p, u: (p * torch.softmax(x @ u, 0)) @ x),
        Mistake("the tilt is e^{u^T x}, which favours atoms along u: yours favours atoms along -u (a sign in the"
                " exponent).", lambda x, p, u: discrete_tilted_mean(x, p, -u)),
    ),
    nonfinite=("e^{u^T x_i} overflows for scores in the thousands, and infinity / infinity is NaN; subtract the"
               " largest score from every score first, or take the softmax of u^T x_i + log p_i"))

UNIFORM = Exercise(
    function="uniform_tilted_mean", chapter=6, reference=uniform_tilted_mean, cases=_uniform_cases,
    mistakes=(
        Mistake("that is the tilted mean of the uniform law on [-1, 1], whose variance is 1/3: the course's entries"
                " are uniform on [-sqrt 3, sqrt 3] (variance 1).",
                covariates.langevin),
        Mistake("only the output is scaled: the entry is xi = sqrt(3) eta with eta uniform on [-1, 1], and tilting xi"
                " by e^{b xi} tilts eta by e^{sqrt(3) b eta}, so the argument of coth is sqrt(3) b as well.",
                lambda b: _ROOT3 * covariates.langevin(b)),
        Mistake("only the argument is scaled: the mean of xi = sqrt(3) eta is sqrt(3) times the mean of eta.",
                lambda b: covariates.langevin(_ROOT3 * b)),
        Mistake("that is tanh(b), the Rademacher entry's tilted mean: the uniform entry's is sqrt(3) coth(sqrt(3) b)"
                " - 1/b.", torch.tanh),
        Mistake("that is the cumulant generating function k(b) = log(sinh(sqrt(3) b) / (sqrt(3) b)): the tilted"
                " mean is its derivative k'(b).",
                lambda b: torch.log(torch.sinh(_ROOT3 * b) / (_ROOT3 * b))),
    ),
    nonfinite=("at b = 0 the formula reads infinity - infinity (the answer is 0 there, the law being symmetric: near"
               " 0 use k'(b) ~ b), and for large |b| cosh / sinh overflow (write coth as 1 / tanh)"))

EXERCISES = (DISCRETE, UNIFORM)
