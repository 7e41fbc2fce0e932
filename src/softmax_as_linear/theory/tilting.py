r"""The tilted measure behind softmax attention, and the infinite-prompt limit of any token law.

For a query :math:`z` the softmax weights tilt the token law :math:`\mu` into

.. math:: d\nu_z(z') = \frac{e^{z'^\top U z}}{\int e^{z''^\top U z}\, d\mu(z'')}\, d\mu(z'),
          \qquad T[\mu](z) = V\, \mathbb{E}_{\nu_z}[z'] = V \nabla K_\mu(U z),

where :math:`K_\mu(u) = \log \mathbb{E}_\mu[e^{u^\top z'}]` is the cumulant generating function. This
module computes the tilt three independent ways, so that each can check the others:

- in closed form, from :meth:`TokenLaw.log_mgf <softmax_as_linear.theory.measures.TokenLaw.log_mgf>` and
  :meth:`TokenLaw.tilted_mean <softmax_as_linear.theory.measures.TokenLaw.tilted_mean>`
  (:func:`infinite_prompt_softmax`, :func:`tilted_log_density`);
- by self-normalised importance sampling of tokens drawn from :math:`\mu` (:func:`importance_moments`),
  which is exactly what finite-prompt softmax attention does;
- by deterministic quadrature in dimension 1 or 2 (:func:`quadrature_tilted_moments`).

The tilt is written with the vector :math:`u = U z`, so that it also serves tokens living on a
subspace (write :math:`z' = B x` and tilt the law of :math:`x` by :math:`B^\top u`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from ..core import checks
from .attention import matvec
from .measures import OutsideTiltDomain, TokenLaw


def _law(law) -> TokenLaw:
    if not isinstance(law, TokenLaw):
        raise ValueError(f"law must be a TokenLaw, got {type(law).__name__}")
    return law


def _query_U_V(law: TokenLaw, query, U, V):
    as64 = lambda name, value: checks.as_float_tensor(name, value).to(torch.float64)  # noqa: E731
    query = checks.vector("query", as64("query", query), law.D)
    U = checks.square("U", as64("U", U), law.D)
    V = checks.square("V", as64("V", V), law.D)
    return query, U, V


def infinite_prompt_softmax(law, query, U, V) -> Tensor:
    r"""Softmax attention of the whole token law, :math:`T[\mu](z) = V \nabla K_\mu(U z)`, in closed form.

    The almost-sure limit of :func:`~softmax_as_linear.theory.attention.softmax_attention` on prompts of
    :math:`L \to \infty` i.i.d. tokens of ``law``. For a Gaussian law it is Lemma 2.1,
    :math:`V m + V \Gamma U z`; for the other laws it is not affine in :math:`z`.

    law: a :class:`~softmax_as_linear.theory.measures.TokenLaw` on :math:`\mathbb{R}^D`; query ``(..., D)``;
    U, V ``(..., D, D)`` -> ``(..., D)`` (float64).
    """
    law = _law(law)
    query, U, V = _query_U_V(law, query, U, V)
    return matvec(V, law.tilted_mean(matvec(U, query)))


def infinite_prompt_linear(law, query, U, V) -> Tensor:
    r"""Normalised linear attention of the whole token law, :math:`T_{\mathrm{lin}}[\mu](z) = V M_2(\mu) U z`.

    :math:`M_2(\mu) = \Gamma + m m^\top` depends on the first two moments only, so this is the same
    for every law with the same mean and covariance.

    law: a :class:`~softmax_as_linear.theory.measures.TokenLaw`; query ``(..., D)``; U, V ``(..., D, D)`` ->
    ``(..., D)``.
    """
    law = _law(law)
    query, U, V = _query_U_V(law, query, U, V)
    return matvec(V, matvec(law.second_moment, matvec(U, query)))


def tilted_log_density(law, points, u) -> Tensor:
    r"""Log density of the tilted law :math:`\nu_u`, :math:`u^\top z' - K_\mu(u) + \log p_\mu(z')`.

    law: a :class:`~softmax_as_linear.theory.measures.TokenLaw`; points ``(..., D)``; u ``(..., D)``
    (broadcast against points) -> ``(...)``. For a Gaussian law it equals the log density of
    :math:`N(m + \Gamma u, \Gamma)`. ``ValueError`` where :math:`K_\mu(u)` is infinite.
    """
    law = _law(law)
    u = checks.vector("u", checks.as_float_tensor("u", u).to(torch.float64), law.D)
    points = checks.vector("points", checks.as_float_tensor("points", points).to(torch.float64), law.D)
    log_mass = law.log_mgf(u)
    if torch.isinf(log_mass).any():
        raise OutsideTiltDomain(float((u @ law.cholesky).abs().max()))
    return (points * u).sum(-1) - log_mass + law.log_density(points)


def importance_moments(tokens, u) -> tuple[Tensor, Tensor]:
    r"""Mean and covariance of the tokens reweighted by softmax weights :math:`a_i \propto e^{u^\top z_i}`.

    .. math:: \hat m = \sum_i a_i z_i, \qquad \hat\Gamma = \sum_i a_i (z_i - \hat m)(z_i - \hat m)^\top .

    For tokens i.i.d. from :math:`\mu` these are self-normalised importance-sampling estimates of the
    moments of the tilted law :math:`\nu_u`; with :math:`u = U z`, :math:`V \hat m` is exactly the
    finite-prompt softmax attention :math:`T[\hat\mu_L](z)`.

    tokens ``(..., L, D)``, u ``(..., D)`` -> (mean ``(..., D)``, cov ``(..., D, D)``).
    """
    tokens = checks.finite("tokens", checks.as_float_tensor("tokens", tokens))
    if tokens.ndim < 2 or tokens.shape[-2] < 1:
        raise ValueError(f"tokens must have shape (..., L, D) with L >= 1, got {tuple(tokens.shape)}")
    u = checks.vector("u", checks.as_float_tensor("u", u, like=tokens), tokens.shape[-1])
    weights = torch.softmax(matvec(tokens, u), dim=-1)
    mean = (weights.unsqueeze(-2) @ tokens).squeeze(-2)
    centred = tokens - mean.unsqueeze(-2)
    cov = (centred * weights.unsqueeze(-1)).transpose(-1, -2) @ centred
    return mean, cov


class TiltedMoments(NamedTuple):
    """Result of :func:`quadrature_tilted_moments`: ``log_mass (...)``, ``mean (..., D)``, ``cov (..., D, D)``."""

    log_mass: Tensor
    mean: Tensor
    cov: Tensor


def _gauss_legendre(radius: float, panels: int, order: int) -> tuple[Tensor, Tensor]:
    """Composite Gauss-Legendre nodes and weights on ``[-radius, radius]`` (0 is a panel edge)."""
    x, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(-radius, radius, panels + 1)
    half = np.diff(edges)[:, None] / 2
    nodes = (edges[:-1, None] + half) + half * x[None, :]
    weights = half * w[None, :]
    return torch.from_numpy(nodes.ravel()), torch.from_numpy(weights.ravel())


def _radius(law: TokenLaw, b: Tensor) -> float:
    r"""Half-width of the box in whitened coordinates :math:`\xi = C^{-1}(z - m)` that holds the tilted mass."""
    if law.kind == "uniform":
        return math.sqrt(3.0)
    if law.kind == "laplace":
        # the tilted density of xi_j decays like exp(-(sqrt 2 - |b_j|) |xi_j|)
        return max(14.0, 40.0 / (math.sqrt(2.0) - float(b.abs().max())))
    # Gaussian and mixture: every tilted component has mean of norm <= |b| + 1 and covariance <= I
    return float(b.norm(dim=-1).max()) + 14.0


def quadrature_tilted_moments(law, u, *, panels: int = 48, order: int = 12) -> TiltedMoments:
    r"""Deterministic quadrature of the tilted law :math:`\nu_u` of a law on :math:`\mathbb{R}^1` or
    :math:`\mathbb{R}^2`.

    .. math:: \log \int e^{u^\top z'} d\mu(z'), \qquad \mathbb{E}_{\nu_u}[z'], \qquad \mathrm{Cov}_{\nu_u}[z'],

    computed on a tensor grid of composite Gauss-Legendre rules (``panels`` panels of ``order`` nodes per
    axis) in whitened coordinates :math:`\xi = C^{-1}(z' - m)`, using only the law's density: the
    uniform law's support is the box :math:`[-\sqrt3, \sqrt3]^D` exactly, and the Laplace kink at
    :math:`\xi_j = 0` falls on a panel edge. It uses neither sampling nor the closed-form tilt, so it
    checks both. Accuracy degrades for a Laplace law as :math:`|C^\top u|` approaches :math:`\sqrt2`.

    law: a :class:`~softmax_as_linear.theory.measures.TokenLaw` with ``D`` 1 or 2; u ``(..., D)`` ->
    :class:`TiltedMoments` with ``log_mass (...)``, ``mean (..., D)``, ``cov (..., D, D)`` (float64).
    """
    law = _law(law)
    if law.D not in (1, 2):
        raise ValueError(f"law must live in dimension 1 or 2 for quadrature, got D = {law.D}")
    panels = checks.int_at_least("panels", panels, 2)
    if panels % 2:
        raise ValueError(f"panels must be even (so that 0 is a panel edge), got {panels}")
    order = checks.int_at_least("order", order, 2)
    u = checks.vector("u", checks.as_float_tensor("u", u).to(torch.float64), law.D)
    b = u @ law.cholesky
    if torch.isinf(law.log_mgf(u)).any():
        raise OutsideTiltDomain(float(b.abs().max()))
    nodes, weights = _gauss_legendre(_radius(law, b), panels, order)
    grids = torch.meshgrid(*([nodes] * law.D), indexing="ij")
    xi = torch.stack([g.reshape(-1) for g in grids], dim=-1)                       # (P, D)
    log_w = sum(torch.log(g.reshape(-1)) for g in torch.meshgrid(*([weights] * law.D), indexing="ij"))
    points = law.mean + xi @ law.cholesky.T                                        # (P, D)
    log_det = torch.log(torch.diagonal(law.cholesky)).sum()
    log_base = log_w + law.log_density(points) + log_det                           # dmu on the grid
    log_tilted = log_base + u @ points.T                                           # (..., P)
    log_mass = torch.logsumexp(log_tilted, dim=-1)
    a = torch.softmax(log_tilted, dim=-1)
    mean = a @ points
    second = (a.unsqueeze(-1) * points).transpose(-1, -2) @ points
    cov = second - mean.unsqueeze(-1) * mean.unsqueeze(-2)
    return TiltedMoments(log_mass, mean, cov)


def affine_misfit(inputs, outputs) -> float:
    r"""How far a sampled map is from affine: :math:`\max_k \| y_k - (A x_k + c) \|` for the least-squares
    :math:`(A, c)`.

    Zero (up to rounding) exactly when :math:`x \mapsto y` is affine on the sample, e.g. for
    :math:`z \mapsto T[\mu](z)` with a Gaussian :math:`\mu` (Lemma 2.1).

    inputs ``(n, D_in)``, outputs ``(n, D_out)`` with ``n > D_in + 1`` -> a float.
    """
    inputs = checks.finite("inputs", checks.as_float_tensor("inputs", inputs).to(torch.float64))
    outputs = checks.finite("outputs", checks.as_float_tensor("outputs", outputs).to(torch.float64))
    if inputs.ndim != 2 or outputs.ndim != 2 or inputs.shape[0] != outputs.shape[0]:
        raise ValueError(f"inputs (n, D_in) and outputs (n, D_out) must be matrices with the same n, got "
                         f"{tuple(inputs.shape)} and {tuple(outputs.shape)}")
    if inputs.shape[0] <= inputs.shape[1] + 1:
        raise ValueError(f"inputs must hold more than D_in + 1 = {inputs.shape[1] + 1} points, got {inputs.shape[0]}")
    design = torch.cat([inputs, torch.ones_like(inputs[:, :1])], dim=1)
    coefficients = torch.linalg.lstsq(design, outputs).solution
    return float((outputs - design @ coefficients).norm(dim=1).max())
