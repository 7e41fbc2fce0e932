r"""Single-query attention of a prompt, seen as a map on measures (paper, Section 2).

A prompt of tokens :math:`z_1, \dots, z_L \in \mathbb{R}^D` is its empirical measure
:math:`\hat\mu_L = \frac1L \sum_i \delta_{z_i}`. With the reparametrisation :math:`U = K^\top Q`
the score of token :math:`z'` for the query :math:`z` is :math:`z'^\top U z`, and

.. math::

    T[\mu](z) = \frac{\int e^{z'^\top U z}\, V z' \, d\mu(z')}{\int e^{z'^\top U z}\, d\mu(z')},
    \qquad
    T_{\mathrm{lin}}[\mu](z) = V \int (z'^\top U z)\, z' \, d\mu(z').

Shapes: ``tokens (..., L, D)``, ``query (..., D)``, ``U, V (D, D)`` or batched ``(..., D, D)``;
results ``(..., D)``. Leading dimensions broadcast. Any float dtype and device.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..core import checks
from ..registry import ACTIVATIONS  # noqa: F401  (re-exported: the activations attention has)


def _prompt(tokens, query, U, V=None, include_query: bool = False):
    tokens = checks.as_float_tensor("tokens", tokens)
    if tokens.ndim < 2:
        raise ValueError(f"tokens must have shape (..., L, D), got {tuple(tokens.shape)}")
    if tokens.shape[-2] < 1:
        raise ValueError("tokens must hold at least one token (L >= 1)")
    D = tokens.shape[-1]
    checks.finite("tokens", tokens)
    query = checks.vector("query", checks.as_float_tensor("query", query, like=tokens), D)
    U = checks.square("U", checks.as_float_tensor("U", U, like=tokens), D)
    if V is not None:
        V = checks.square("V", checks.as_float_tensor("V", V, like=tokens), D)
    if include_query:
        query_token = query.unsqueeze(-2)
        batch = torch.broadcast_shapes(tokens.shape[:-2], query_token.shape[:-2])
        tokens = torch.cat([tokens.expand(*batch, *tokens.shape[-2:]), query_token.expand(*batch, 1, D)], dim=-2)
    return tokens, query, U, V


def matvec(matrix: Tensor, vec: Tensor) -> Tensor:
    """``matrix @ vec`` for ``matrix (..., D, D)`` and ``vec (..., D)``, broadcasting, -> ``(..., D)``."""
    return (matrix @ vec.unsqueeze(-1)).squeeze(-1)


def softmax_attention_unchecked(tokens: Tensor, query: Tensor, U: Tensor, V: Tensor) -> Tensor:
    """:func:`softmax_attention` without argument checks, for inner loops (training, estimators)."""
    s = (tokens @ matvec(U, query).unsqueeze(-1)).squeeze(-1)
    return matvec(V, (torch.softmax(s, dim=-1).unsqueeze(-2) @ tokens).squeeze(-2))


def linear_attention_unchecked(tokens: Tensor, query: Tensor, U: Tensor, V: Tensor) -> Tensor:
    """:func:`linear_attention` without argument checks, for inner loops (training, estimators)."""
    s = (tokens @ matvec(U, query).unsqueeze(-1)).squeeze(-1)
    return matvec(V, (s.unsqueeze(-2) @ tokens).squeeze(-2) / tokens.shape[-2])


def scores(tokens, query, U) -> Tensor:
    r"""Attention scores :math:`s_i = z_i^\top U z`, shape ``(..., L)``."""
    tokens, query, U, _ = _prompt(tokens, query, U)
    return (tokens @ matvec(U, query).unsqueeze(-1)).squeeze(-1)


def softmax_weights(tokens, query, U, include_query: bool = False) -> Tensor:
    r"""Softmax weights :math:`a_i = e^{s_i} / \sum_j e^{s_j}`, shape ``(..., L)`` (``L + 1`` with the query)."""
    tokens, query, U, _ = _prompt(tokens, query, U, include_query=include_query)
    return torch.softmax((tokens @ matvec(U, query).unsqueeze(-1)).squeeze(-1), dim=-1)


def softmax_attention(tokens, query, U, V, include_query: bool = False) -> Tensor:
    r"""Softmax attention of the prompt measure at the query, :math:`T[\hat\mu_L](z)`.

    .. math:: T[\hat\mu_L](z) = \sum_{i=1}^L \frac{e^{z_i^\top U z}}{\sum_j e^{z_j^\top U z}}\, V z_i

    Numerically stable for huge scores (max-subtraction inside ``torch.softmax``). With
    ``include_query=True`` the query joins the measure, :math:`\frac{1}{L+1}(\sum_i \delta_{z_i} + \delta_z)`
    (Remark 3.2).

    tokens ``(..., L, D)``, query ``(..., D)``, U, V ``(..., D, D)`` -> ``(..., D)``.
    """
    return softmax_attention_unchecked(*_prompt(tokens, query, U, V, include_query))


def linear_attention(tokens, query, U, V, include_query: bool = False) -> Tensor:
    r"""Normalised linear attention, :math:`T_{\mathrm{lin}}[\hat\mu_L](z) = V \frac1L \sum_i (z_i^\top U z)\, z_i`.

    The :math:`1/L` makes the :math:`L \to \infty` limit exist: :math:`V M_2(\mu) U z` with
    :math:`M_2(\mu) = \mathbb{E}_\mu[z z^\top]`.

    tokens ``(..., L, D)``, query ``(..., D)``, U, V ``(..., D, D)`` -> ``(..., D)``.
    """
    return linear_attention_unchecked(*_prompt(tokens, query, U, V, include_query))


def _gaussian(mean, cov, query, U, V=None):
    mean = checks.as_float_tensor("mean", mean)
    cov = checks.as_float_tensor("cov", cov)
    mean = mean.to(torch.promote_types(mean.dtype, cov.dtype))  # never round a covariance down
    checks.vector("mean", mean)
    D = mean.shape[-1]
    cov = checks.covariance("cov", cov.to(mean), D, definite=False)
    query = checks.vector("query", checks.as_float_tensor("query", query, like=mean), D)
    U = checks.square("U", checks.as_float_tensor("U", U, like=mean), D)
    if V is not None:
        V = checks.square("V", checks.as_float_tensor("V", V, like=mean), D)
    return mean, cov, query, U, V


def tilted_gaussian(mean, cov, query, U) -> tuple[Tensor, Tensor]:
    r"""The tilted measure :math:`d\nu_z(z') \propto e^{z'^\top U z} d\mu(z')` for :math:`\mu = N(m, \Gamma)`.

    Completing the square gives :math:`\nu_z = N(m + \Gamma U z, \Gamma)`; it holds for singular
    :math:`\Gamma` too (on the affine support of :math:`\mu`).

    mean ``(..., D)``, cov ``(..., D, D)``, query ``(..., D)``, U ``(..., D, D)`` ->
    (mean ``(..., D)``, cov ``(..., D, D)``).
    """
    mean, cov, query, U, _ = _gaussian(mean, cov, query, U)
    tilted_mean = mean + matvec(cov, matvec(U, query))
    return tilted_mean, cov.expand(*tilted_mean.shape, tilted_mean.shape[-1])


def gaussian_attention(mean, cov, query, U, V) -> Tensor:
    r"""Lemma 2.1 (Castin et al., 2025): for :math:`\mu = N(m, \Gamma)`, :math:`T[\mu](z) = V m + V \Gamma U z`.

    mean ``(..., D)``, cov ``(..., D, D)`` (positive semi-definite), query ``(..., D)``,
    U, V ``(..., D, D)`` -> ``(..., D)``.
    """
    mean, cov, query, U, V = _gaussian(mean, cov, query, U, V)
    return matvec(V, mean + matvec(cov, matvec(U, query)))


def gaussian_linear_attention(mean, cov, query, U, V) -> Tensor:
    r"""Infinite-prompt normalised linear attention of :math:`N(m, \Gamma)`: :math:`V (\Gamma + m m^\top) U z`.

    Equal to :func:`gaussian_attention` when :math:`m = 0`, different otherwise.
    """
    mean, cov, query, U, V = _gaussian(mean, cov, query, U, V)
    second_moment = cov + mean.unsqueeze(-1) * mean.unsqueeze(-2)
    return matvec(V, matvec(second_moment, matvec(U, query)))
