r"""Chapter 7's coding exercises: one step of the Gaussian depth recursion, and one residual softmax layer on a prompt.

Shapes: ``cov, U, V (D, D)`` -> ``(D, D)``; ``tokens (L, D)``, ``U, V (D, D)`` -> ``(L, D)``. The references are
:func:`~softmax_as_linear.theory.depth.gaussian_recursion` and :func:`~softmax_as_linear.theory.depth.deep_forward`
with one layer.
"""
from __future__ import annotations

import torch

from ..theory import depth
from .feedback import Case, Exercise, Mistake

_F64 = dict(dtype=torch.float64)


def _spd(D: int, g: torch.Generator) -> torch.Tensor:
    B = torch.randn(D, D, generator=g, **_F64)
    return B @ B.T / D + 0.2 * torch.eye(D, **_F64)


def _covariance_cases() -> list[Case]:
    g = torch.Generator().manual_seed(701)
    cases = []
    for D, name in ((3, "random covariance, non-symmetric U and V"), (1, "D = 1")):
        cases.append(Case(name, (_spd(D, g), 0.5 * torch.randn(D, D, generator=g, **_F64),
                                 0.5 * torch.randn(D, D, generator=g, **_F64))))
    cases.append(Case("U = 0 (the layer adds a constant)", (_spd(3, g), torch.zeros(3, 3, **_F64),
                                                            torch.randn(3, 3, generator=g, **_F64))))
    U, V = depth.plane_weights(1)
    cases.append(Case("Section 7.2's plane weights", (_spd(2, g), U[0], V[0])))
    return cases


def next_covariance(cov, U, V):
    r""":math:`\Gamma' = A\Gamma A^\top`, :math:`A = I + V\Gamma U` (Proposition ch7-prop-closure), the reference."""
    cov, U, V = (torch.as_tensor(a, dtype=torch.float64) for a in (cov, U, V))
    D = cov.shape[-1]
    path = depth.gaussian_recursion(torch.zeros(D, **_F64), cov, torch.zeros(D, **_F64), U[None], V[None])
    return path.covs[-1]


def _layer_cases() -> list[Case]:
    g = torch.Generator().manual_seed(702)
    cases = []
    for L, D, name in ((6, 3, "random prompt"), (1, 3, "one token")):
        cases.append(Case(name, (torch.randn(L, D, generator=g, **_F64), torch.randn(D, D, generator=g, **_F64),
                                 torch.randn(D, D, generator=g, **_F64))))
    cases.append(Case("U = 0 (equal weights)", (torch.randn(5, 2, generator=g, **_F64), torch.zeros(2, 2, **_F64),
                                                torch.randn(2, 2, generator=g, **_F64))))
    cases.append(Case("scores in the thousands", (30 * torch.randn(5, 3, generator=g, **_F64),
                                                  torch.randn(3, 3, generator=g, **_F64),
                                                  torch.randn(3, 3, generator=g, **_F64))))
    return cases


def residual_attention_layer(tokens, U, V):
    r""":math:`z_i + T[\hat\mu_L](z_i)` for every token (Definition ch7-def-deep), ``(L, D)``, the reference."""
    tokens, U, V = (torch.as_tensor(a, dtype=torch.float64) for a in (tokens, U, V))
    return depth.deep_forward(tokens, tokens[0], U[None], V[None], keep_layers=True).tokens[1]


def _weights(tokens, U):
    # row i: the softmax over j of z_j^T U z_i
    return torch.softmax(tokens @ U.T @ tokens.T, dim=-1)


def _eye(M):
    return torch.eye(M.shape[-1], **_F64)


COVARIANCE = Exercise(
    function="next_covariance", chapter=7, reference=next_covariance, cases=_covariance_cases,
    mistakes=(
        Mistake("the residual is missing: the layer maps z to z + T(z) = Az + b with A = I + V Gamma U, not V Gamma"
                " U.", lambda c, U, V: (V @ c @ U) @ c @ (V @ c @ U).T),
        Mistake("A multiplies the covariance on one side only: the covariance of Az is A Gamma A^T, with A on both"
                " sides.", lambda c, U, V: (_eye(c) + V @ c @ U) @ c),
        Mistake("it returns A itself, the matrix of the layer's affine map: the new covariance is A Gamma A^T.",
                lambda c, U, V: _eye(c) + V @ c @ U),
        Mistake("the covariance of Az is A Gamma A^T: yours is A^T Gamma A.",
                lambda c, U, V: (_eye(c) + V @ c @ U).T @ c @ (_eye(c) + V @ c @ U)),
        Mistake("A uses U transposed: Lemma 2.1 gives T(z) = V(m + Gamma U z), so A = I + V Gamma U.",
                lambda c, U, V: next_covariance(c, U.T, V)),
        Mistake("U and V are swapped: the value V acts last, T(z) = V(m + Gamma U z), so A = I + V Gamma U, not"
                " I + U Gamma V.", lambda c, U, V: next_covariance(c, V, U)),
    ))

LAYER = Exercise(
    function="residual_attention_layer", chapter=7, reference=residual_attention_layer, cases=_layer_cases,
    mistakes=(
        Mistake("the residual is missing: each token becomes z_i + T(z_i), not T(z_i) alone.",
                lambda t, U, V: _weights(t, U) @ t @ V.T),
        Mistake("each token attends to itself only (z_i + V z_i): its attention is a softmax over all the prompt's"
                " tokens z_j, j = 1..L.", lambda t, U, V: t + t @ V.T),
        Mistake("each token attends to the others but not to itself: the measure is the whole prompt, z_i"
                " included.",
                lambda t, U, V: t + torch.softmax(t @ U.T @ t.T - torch.diag(torch.full((t.shape[0],), torch.inf,
                                                                                        **_F64)), -1) @ t @ V.T),
        Mistake("the score of token z_j seen from z_i is z_j^T U z_i (the attending token on the right of U): yours"
                " uses U transposed.", lambda t, U, V: residual_attention_layer(t, U.T, V)),
        Mistake("the softmax is taken over the wrong axis: for each attending token z_i the weights over the tokens"
                " z_j must sum to one.", lambda t, U, V: t + torch.softmax(t @ U.T @ t.T, 0) @ t @ V.T),
        Mistake("V multiplies each token from the left (V z_j): yours applies V transposed.",
                lambda t, U, V: t + _weights(t, U) @ t @ V),
    ),
    nonfinite=("exp of a score in the thousands overflows to infinity, and infinity / infinity is NaN; subtract, in"
               " each row, the largest score first (the weights do not change)"))

EXERCISES = (COVARIANCE, LAYER)
