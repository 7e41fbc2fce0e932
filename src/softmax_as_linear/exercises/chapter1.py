r"""Chapter 1's coding exercises: softmax and normalised linear attention of a prompt's empirical measure.

Shapes: ``tokens (L, D)``, ``query (D,)``, ``U, V (D, D)``; each function returns ``(D,)``. The references are
:func:`~softmax_as_linear.theory.attention.softmax_attention` and
:func:`~softmax_as_linear.theory.attention.linear_attention`.
"""
from __future__ import annotations

import torch

from ..theory import attention
from .feedback import Case, Exercise, Mistake

_F64 = dict(dtype=torch.float64)


def _prompts(lengths=(8, 1), dim: int = 3) -> list[Case]:
    g = torch.Generator().manual_seed(101)
    cases = []
    for L, name in zip(lengths, ("random prompt", "one token")):
        tokens, query = torch.randn(L, dim, generator=g, **_F64), torch.randn(dim, generator=g, **_F64)
        U, V = torch.randn(dim, dim, generator=g, **_F64), torch.randn(dim, dim, generator=g, **_F64)
        cases.append(Case(name, (tokens, query, U, V)))
    tokens, query = torch.randn(500, 2, generator=g, **_F64), torch.randn(2, generator=g, **_F64)
    U, V = torch.randn(2, 2, generator=g, **_F64), torch.randn(2, 2, generator=g, **_F64)
    cases.append(Case("long prompt", (tokens, query, U, V)))
    tokens, query = torch.randn(6, dim, generator=g, **_F64), torch.randn(dim, generator=g, **_F64)
    cases.append(Case("zero scores (U = 0)", (tokens, query, torch.zeros(dim, dim, **_F64),
                                              torch.randn(dim, dim, generator=g, **_F64))))
    return cases


def _softmax_cases() -> list[Case]:
    cases = _prompts()
    g = torch.Generator().manual_seed(102)
    tokens, query = 30 * torch.randn(5, 3, generator=g, **_F64), 30 * torch.randn(3, generator=g, **_F64)
    U, V = torch.randn(3, 3, generator=g, **_F64), torch.randn(3, 3, generator=g, **_F64)
    return cases + [Case("scores in the thousands", (tokens, query, U, V))]


def _scores(tokens, query, U):
    return tokens @ (U @ query)


def softmax_attention(tokens, query, U, V):
    r""":math:`T[\hat\mu_L](z) = \sum_i \frac{e^{z_i^\top Uz}}{\sum_j e^{z_j^\top Uz}}\, Vz_i`, the reference."""
    return attention.softmax_attention(tokens, query, U, V)


def linear_attention(tokens, query, U, V):
    r""":math:`T_{\mathrm{lin}}[\hat\mu_L](z) = V\frac1L\sum_i (z_i^\top Uz)\, z_i`, the reference."""
    return attention.linear_attention(tokens, query, U, V)


SOFTMAX = Exercise(
    function="softmax_attention", chapter=1, reference=softmax_attention, cases=_softmax_cases,
    mistakes=(
        Mistake("the weights do not sum to one: divide each exponential by the sum of all of them.",
                lambda t, q, U, V: V @ (torch.exp(_scores(t, q, U)) @ t)),
        Mistake("the score of token z_i is z_i^T U z (the query on the right of U): yours uses U transposed.",
                lambda t, q, U, V: softmax_attention(t, q, U.T, V)),
        Mistake("V multiplies the weighted mean of the tokens from the left (V z_i): yours applies V transposed.",
                lambda t, q, U, V: torch.softmax(_scores(t, q, U), -1) @ t @ V),
        Mistake("the weights ignore the scores: every token gets 1/L, which is the answer only when U = 0.",
                lambda t, q, U, V: V @ t.mean(0)),
    ),
    nonfinite=("exp of a score in the thousands overflows to infinity, and infinity / infinity is NaN; subtract"
               " the largest score from every score first (the weights do not change)"))

LINEAR = Exercise(
    function="linear_attention", chapter=1, reference=linear_attention, cases=_prompts,
    mistakes=(
        Mistake("it sums over the tokens without dividing by L: normalised linear attention averages, and the 1/L"
                " is what gives it a limit as L grows.",
                lambda t, q, U, V: V @ (_scores(t, q, U) @ t)),
        Mistake("the score of token z_i is z_i^T U z (the query on the right of U): yours uses U transposed.",
                lambda t, q, U, V: linear_attention(t, q, U.T, V)),
        Mistake("V multiplies the average from the left (V z_i): yours applies V transposed.",
                lambda t, q, U, V: (_scores(t, q, U) @ t) @ V / t.shape[0]),
        Mistake("these are softmax weights: linear attention weighs token z_i by its score itself, not by its"
                " exponential.", softmax_attention),
    ))

EXERCISES = (SOFTMAX, LINEAR)
