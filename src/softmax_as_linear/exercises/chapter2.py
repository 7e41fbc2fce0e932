r"""Chapter 2's coding exercises: Lemma 2.1's affine limit of a Gaussian measure, and the tilted covariance by weights.

Shapes: ``mean (D,)``, ``cov (D, D)``, ``query (D,)``, ``U, V (D, D)`` -> ``(D,)`` for :func:`gaussian_attention`
(reference :func:`~softmax_as_linear.theory.attention.gaussian_attention`, :math:`Vm + V\Gamma Uz`); ``tokens (N, D)``,
``u (D,)`` -> ``(D, D)`` for :func:`tilted_covariance`, the softmax-weighted covariance
:math:`\sum_i a_i (z_i - \hat m)(z_i - \hat m)^\top` with :math:`a_i \propto e^{z_i^\top u}` (reference
:func:`~softmax_as_linear.theory.tilting.importance_moments`).
"""
from __future__ import annotations

import torch

from ..theory import attention, tilting
from .feedback import Case, Exercise, Mistake

_F64 = dict(dtype=torch.float64)


def _randn(g, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=g, **_F64)


def _covariance(g, D):
    # a non-identity, non-diagonal covariance: B B^T + 0.2 I
    B = _randn(g, D, D)
    return B @ B.T / D + 0.2 * torch.eye(D, **_F64)


def _gaussian_cases() -> list[Case]:
    g = torch.Generator().manual_seed(201)
    cases = []
    for name, D, centred in (("random Gaussian, D = 3", 3, False), ("centred tokens (m = 0)", 3, True),
                             ("D = 2, correlated coordinates", 2, False), ("D = 4", 4, False)):
        mean = torch.zeros(D, **_F64) if centred else _randn(g, D)
        cases.append(Case(name, (mean, _covariance(g, D), _randn(g, D), _randn(g, D, D), _randn(g, D, D))))
    D = 3
    cases.append(Case("U = 0 (the scores do not depend on the query)",
                      (_randn(g, D), _covariance(g, D), _randn(g, D), torch.zeros(D, D, **_F64), _randn(g, D, D))))
    return cases


def gaussian_attention(mean, cov, query, U, V):
    r""":math:`T[\mu](z) = Vm + V\Gamma Uz` for :math:`\mu = N(m, \Gamma)` (Lemma 2.1), the reference."""
    return attention.gaussian_attention(mean, cov, query, U, V)


def _tilted_cases() -> list[Case]:
    g = torch.Generator().manual_seed(202)
    cases = []
    for name, N, D, scale in (("correlated tokens, N = 40", 40, 3, 0.7), ("N = 200, D = 2", 200, 2, 0.5),
                              ("u = 0 (equal weights)", 30, 3, 0.0), ("one token", 1, 3, 1.0)):
        L = torch.linalg.cholesky(_covariance(g, D))
        tokens = _randn(g, D) + _randn(g, N, D) @ L.T
        cases.append(Case(name, (tokens, _randn(g, D, scale=scale))))
    tokens = _randn(g, 25, 2)
    cases.append(Case("a strong tilt: scores in the thousands", (tokens, _randn(g, 2, scale=800.0))))
    return cases


def tilted_covariance(tokens, u):
    r""":math:`\sum_i a_i (z_i - \hat m)(z_i - \hat m)^\top`, :math:`a_i = \operatorname{softmax}_i(z_i^\top u)`,
    :math:`\hat m = \sum_i a_i z_i`: the reference."""
    return tilting.importance_moments(tokens, u)[1]


def _weighted(weights, tokens, centre):
    centred = tokens - centre
    return (weights[:, None] * centred).T @ centred


SHIFT = Exercise(
    function="gaussian_attention", chapter=2, reference=gaussian_attention, cases=_gaussian_cases,
    mistakes=(
        Mistake("the tilt direction is u = U z and the shift is Gamma u = Gamma U z: yours uses U transposed.",
                lambda m, G, z, U, V: V @ (m + G @ U.T @ z)),
        Mistake("the shift multiplies by Gamma, not by its inverse: Gamma^{-1} belongs in the density of N(m, Gamma),"
                " and completing the square turns it into a shift by Gamma U z.",
                lambda m, G, z, U, V: V @ (m + torch.linalg.solve(G, U @ z))),
        Mistake("the product is Gamma U z, in this order (first the tilt direction u = U z, then Gamma): yours"
                " multiplies by U Gamma.", lambda m, G, z, U, V: V @ (m + U @ G @ z)),
        Mistake("the mean m is missing: tilting shifts the mean of mu from m to m + Gamma U z, it does not replace"
                " it (your answer is right for centred tokens only).", lambda m, G, z, U, V: V @ G @ U @ z),
        Mistake("this is the mean of the tilted measure nu_z; attention is V applied to that mean.",
                lambda m, G, z, U, V: m + G @ U @ z),
        Mistake("V multiplies the whole tilted mean, m included: yours applies V to the shift Gamma U z only.",
                lambda m, G, z, U, V: m + V @ G @ U @ z),
        Mistake("V multiplies the tilted mean from the left (V m + V Gamma U z): yours applies V transposed.",
                lambda m, G, z, U, V: V.T @ (m + G @ U @ z)),
        Mistake("this is the limit of normalised linear attention, V (Gamma + m m^T) U z (Chapter 1); the softmax"
                " limit is V m + V Gamma U z, and the two differ unless V m = 0.",
                lambda m, G, z, U, V: V @ (G + torch.outer(m, m)) @ U @ z),
    ))

TILTED_COVARIANCE = Exercise(
    function="tilted_covariance", chapter=2, reference=tilted_covariance, cases=_tilted_cases,
    mistakes=(
        Mistake("the weights do not sum to one: divide each exponential by the sum of all of them.",
                lambda t, u: _weighted(torch.exp(t @ u), t, torch.softmax(t @ u, 0) @ t)),
        Mistake("each term is weighted by a_i squared: multiply by the weights once, (a[:, None] * c).T @ c with c"
                " the centred tokens, not (a[:, None] * c).T @ (a[:, None] * c).",
                lambda t, u: (lambda a, c: (a[:, None] * c).T @ (a[:, None] * c))(
                    torch.softmax(t @ u, 0), t - torch.softmax(t @ u, 0) @ t)),
        Mistake("it ignores the softmax weights: this is the sample covariance of the tokens, an estimate of the"
                " covariance of mu, not of the tilted measure nu_u.", lambda t, u: _weighted(
                    torch.full((t.shape[0],), 1.0 / t.shape[0], **_F64), t, t.mean(0))),
        Mistake("it ignores the softmax weights: this is the sample covariance of the tokens, an estimate of the"
                " covariance of mu, not of the tilted measure nu_u.",
                lambda t, u: torch.cov(t.T) if t.shape[0] > 1 else torch.full((t.shape[1],) * 2, torch.nan, **_F64)),
        Mistake("it centres the tokens at their plain mean: centre them at the weighted mean sum_i a_i z_i, the"
                " mean of the tilted measure.", lambda t, u: _weighted(torch.softmax(t @ u, 0), t, t.mean(0))),
        Mistake("it does not centre the tokens: sum_i a_i z_i z_i^T is the second moment; subtract the weighted"
                " mean first (or subtract its outer product).",
                lambda t, u: _weighted(torch.softmax(t @ u, 0), t, torch.zeros(t.shape[1], **_F64))),
        Mistake("the weights tilt the wrong way: a_i is proportional to e^{+z_i^T u}; yours to e^{-z_i^T u}.",
                lambda t, u: tilted_covariance(t, -u)),
    ),
    nonfinite=("exp of a score in the thousands overflows to infinity, and infinity / infinity is NaN; subtract"
               " the largest score from every score first (the weights do not change), or use torch.softmax"))

EXERCISES = (SHIFT, TILTED_COVARIANCE)
