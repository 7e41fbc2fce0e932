r"""Deep residual attention: K layers on a finite prompt, and their exact infinite-prompt recursion on Gaussian laws.

Layer :math:`\ell = 1, \dots, K` has its own :math:`(U_\ell, V_\ell)` and moves every token by the attention of the
current prompt measure :math:`\hat\mu^{(\ell-1)}_L = \frac1L \sum_i \delta_{z_i^{(\ell-1)}}`:

.. math:: z_i^{(\ell)} = z_i^{(\ell-1)} + T_\ell[\hat\mu^{(\ell-1)}_L](z_i^{(\ell-1)}), \qquad
    z_q^{(\ell)} = z_q^{(\ell-1)} + T_\ell[\hat\mu^{(\ell-1)}_L](z_q^{(\ell-1)}),

(every prompt token attends to the prompt, the query attends to the prompt and is not part of it), with
:math:`T_\ell` softmax or normalised linear attention (:mod:`~softmax_as_linear.theory.attention`); the prediction is
the last coordinate of :math:`z_q^{(K)}`. Softmax costs :math:`O(K L^2 D)` per prompt, linear :math:`O(K L D^2)`.

For :math:`\mu = N(m, \Gamma)`, Lemma 2.1 makes the infinite-prompt layer affine, :math:`T[\mu](z) = V(m + \Gamma U z)`,
so :math:`z \mapsto z + T[\mu](z) = A z + b` with :math:`A = I + V\Gamma U`, :math:`b = Vm`, and the token law stays
Gaussian: :math:`m' = A m + b`, :math:`\Gamma' = A \Gamma A^\top`; the query follows the same affine maps. Linear
attention gives :math:`A_{\mathrm{lin}} = I + V(\Gamma + m m^\top) U`, :math:`b_{\mathrm{lin}} = 0`. This recursion
(:func:`gaussian_recursion`) is the course's own, a direct consequence of Lemma 2.1; Castin et al. (2025) prove its
continuous-depth analogue. It needs no prompt and is differentiable in the weights.

Shapes: layers are stacked on the third axis from the end, ``U, V (..., K, D, D)``; tokens ``(..., L, D)``, query
``(..., D)``, mean ``(..., D)``, cov ``(..., D, D)``; leading dimensions broadcast.

The plane weights of Chapter 7's examples and panel (:func:`family_weights`: quarter turns, expanding, rotations)
are built here too, with the plane :func:`rotation`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import checks
from ..registry import ACTIVATIONS
from .attention import matvec

_CHUNK_ELEMENTS = 2**23  # entries of the largest score block per chunk of query rows

#: Chapter 7's families of plane weights (:func:`family_weights`).
PLANE_FAMILIES = ("quarter turns", "expanding", "rotations")


def rotation(degrees: float, dtype=torch.float64) -> Tensor:
    r"""The ``(2, 2)`` rotation by ``degrees``,
    :math:`\begin{pmatrix}\cos\theta & -\sin\theta\\ \sin\theta & \cos\theta\end{pmatrix}`."""
    angle = math.radians(checks.number("degrees", degrees))
    return torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=dtype)


def family_weights(family: str, K: int, u: float, v: float) -> tuple[Tensor, Tensor]:
    r"""Plane weights ``U, V (K, 2, 2)`` of one of Chapter 7's families, with angles that change from layer to layer:
    quarter turns :math:`U_\ell = uR(\theta_\ell)`, :math:`V_\ell = vR(90° - \theta_\ell)`,
    :math:`\theta_\ell = 17° + 63°(\ell - 1)` (so :math:`V_\ell U_\ell = uv R(90°)`); expanding :math:`U_\ell = uI`,
    :math:`V_\ell = vI`; rotations :math:`U_\ell = uR(23° + 52°(\ell - 1))`,
    :math:`V_\ell = vR(-17° + 74°(\ell - 1))\operatorname{diag}(1, -0.6)`. The first layers are the same at every
    ``K``."""
    checks.one_of("family", family, PLANE_FAMILIES)
    K = checks.positive_int("K", K)
    if family == "expanding":
        eye = torch.eye(2, dtype=torch.float64)
        return torch.stack([u * eye] * K), torch.stack([v * eye] * K)
    if family == "quarter turns":
        angles = [17 + 63 * k for k in range(K)]
        return torch.stack([u * rotation(a) for a in angles]), torch.stack([v * rotation(90 - a) for a in angles])
    flip = torch.diag(torch.tensor([1.0, -0.6], dtype=torch.float64))
    return (torch.stack([u * rotation(23 + 52 * k) for k in range(K)]),
            torch.stack([v * rotation(-17 + 74 * k) @ flip for k in range(K)]))


def plane_weights(K: int) -> tuple[Tensor, Tensor]:
    """Section 7.2's weights: the rotations family at scales 0.5 (:func:`family_weights`), ``(K, 2, 2)`` each."""
    return family_weights("rotations", K, 0.5, 0.5)


def quarter_turn_weights(K: int, u: float = 0.45, v: float = 0.45) -> tuple[Tensor, Tensor]:
    """Section 7.5's weights: the quarter-turns family (:func:`family_weights`), ``(K, 2, 2)`` each."""
    return family_weights("quarter turns", K, u, v)


def _layers(U, V, like: Tensor) -> tuple[Tensor, Tensor]:
    U = checks.as_float_tensor("U", U, like=like)
    V = checks.as_float_tensor("V", V, like=like)
    for name, value in (("U", U), ("V", V)):
        if value.ndim < 3 or value.shape[-1] != like.shape[-1] or value.shape[-2] != like.shape[-1]:
            raise ValueError(f"{name} must have shape (..., K, D, D) with D = {like.shape[-1]}, got "
                             f"{tuple(value.shape)}")
        checks.finite(name, value)
    if U.shape[-3] != V.shape[-3]:
        raise ValueError(f"U and V must have the same number of layers K, got {U.shape[-3]} and {V.shape[-3]}")
    return U, V


def _softmax_layer(tokens: Tensor, points: Tensor, U: Tensor, V: Tensor) -> Tensor:
    """Softmax attention of the measure of ``tokens (..., L, D)`` at every row of ``points (..., n, D)``, chunked."""
    L, n = tokens.shape[-2], points.shape[-2]
    batch = max(1, tokens[..., 0, 0].numel())
    rows = max(1, _CHUNK_ELEMENTS // max(1, L * batch))
    keys = tokens @ U  # row i: z_i^T U, so that score(point p, token i) = z_i^T U z_p
    outputs = []
    for start in range(0, n, rows):
        chunk = points[..., start:start + rows, :]
        weights = torch.softmax(chunk @ keys.transpose(-1, -2), dim=-1)  # (..., c, L)
        outputs.append(weights @ tokens)
    return torch.cat(outputs, dim=-2) @ V.transpose(-1, -2)


def _linear_layer(tokens: Tensor, points: Tensor, U: Tensor, V: Tensor) -> Tensor:
    r""":math:`V \hat M U z` at every row ``z`` of ``points``, :math:`\hat M = \frac1L \sum_i z_i z_i^\top`."""
    second_moment = tokens.transpose(-1, -2) @ tokens / tokens.shape[-2]
    return points @ (V @ second_moment @ U).transpose(-1, -2)


@dataclass(frozen=True)
class DeepOutputs:
    """Tokens and query after every layer: tokens ``(K + 1, ..., L, D)``, queries ``(K + 1, ..., D)`` (index 0 =
    input)."""

    tokens: Tensor
    queries: Tensor

    @property
    def prediction(self) -> Tensor:
        """The last coordinate of the query after the last layer, ``(...)``."""
        return self.queries[-1][..., -1]


def deep_forward_unchecked(tokens: Tensor, query: Tensor, U: Tensor, V: Tensor, activation: str = "softmax",
                           keep_layers: bool = False) -> Tensor | DeepOutputs:
    """:func:`deep_forward` without argument checks, for inner loops."""
    layer = _softmax_layer if activation == "softmax" else _linear_layer
    batch = torch.broadcast_shapes(tokens.shape[:-2], query.shape[:-1], U.shape[:-3], V.shape[:-3])
    tokens = tokens.expand(*batch, *tokens.shape[-2:])
    points = torch.cat([tokens, query.expand(*batch, query.shape[-1]).unsqueeze(-2)], dim=-2)
    history = [points]
    K = U.shape[-3]
    for k in range(K):
        U_k, V_k = U[..., k, :, :], V[..., k, :, :]
        if k == K - 1 and not keep_layers:  # the last layer moves the query only: O(L) instead of O(L^2)
            return points[..., -1, :] + layer(points[..., :-1, :], points[..., -1:, :], U_k, V_k)[..., 0, :]
        points = points + layer(points[..., :-1, :], points, U_k, V_k)
        history.append(points)
    stacked = torch.stack(history)
    return DeepOutputs(stacked[..., :-1, :], stacked[..., -1, :])


def deep_forward(tokens, query, U, V, activation: str = "softmax", keep_layers: bool = False) -> Tensor | DeepOutputs:
    r"""The query after K residual attention layers on a finite prompt (module docstring), ``(..., D)``.

    tokens ``(..., L, D)``, query ``(..., D)``, U, V ``(..., K, D, D)``. With ``keep_layers`` returns
    :class:`DeepOutputs` (every layer's tokens and query). Differentiable; softmax is max-subtracted and chunked over
    the rows of the score matrix, so memory stays :math:`O(L \cdot \text{chunk})`.
    """
    checks.one_of("activation", activation, ACTIVATIONS)
    tokens = checks.as_float_tensor("tokens", tokens)
    if tokens.ndim < 2 or tokens.shape[-2] < 1:
        raise ValueError(f"tokens must have shape (..., L, D) with L >= 1, got {tuple(tokens.shape)}")
    checks.finite("tokens", tokens)
    query = checks.vector("query", checks.as_float_tensor("query", query, like=tokens), tokens.shape[-1])
    U, V = _layers(U, V, tokens)
    return deep_forward_unchecked(tokens, query, U, V, activation, keep_layers)


def deep_predict(tokens, query, U, V, activation: str = "softmax") -> Tensor:
    """The prediction: last coordinate of :func:`deep_forward`, ``(...)``."""
    return deep_forward(tokens, query, U, V, activation)[..., -1]


def layer_affine_map(mean: Tensor, cov: Tensor, U: Tensor, V: Tensor,
                     activation: str = "softmax") -> tuple[Tensor, Tensor]:
    r"""The infinite-prompt residual layer of :math:`N(m, \Gamma)` as :math:`z \mapsto A z + b`.

    Softmax (Lemma 2.1): :math:`A = I + V\Gamma U`, :math:`b = V m`; linear: :math:`A = I + V(\Gamma + m m^\top)U`,
    :math:`b = 0`. mean ``(..., D)``, cov, U, V ``(..., D, D)`` -> A ``(..., D, D)``, b ``(..., D)``.
    """
    eye = torch.eye(mean.shape[-1], dtype=mean.dtype, device=mean.device)
    if activation == "softmax":
        return eye + V @ cov @ U, matvec(V, mean)
    second_moment = cov + mean.unsqueeze(-1) * mean.unsqueeze(-2)
    return eye + V @ second_moment @ U, torch.zeros_like(matvec(V, mean))


@dataclass(frozen=True)
class GaussianPath:
    """The infinite-prompt recursion: token law and query after every layer (index 0 = input).

    means ``(K + 1, ..., D)``, covs ``(K + 1, ..., D, D)``, queries ``(K + 1, ..., D)``.
    """

    means: Tensor
    covs: Tensor
    queries: Tensor

    @property
    def prediction(self) -> Tensor:
        """The last coordinate of the query after the last layer, ``(...)``."""
        return self.queries[-1][..., -1]


def gaussian_recursion_unchecked(mean: Tensor, cov: Tensor, query: Tensor, U: Tensor, V: Tensor,
                                 activation: str = "softmax") -> GaussianPath:
    """:func:`gaussian_recursion` without argument checks, for training loops."""
    means, covs, queries = [mean], [cov], [query]
    for k in range(U.shape[-3]):
        A, b = layer_affine_map(mean, cov, U[..., k, :, :], V[..., k, :, :], activation)
        mean, cov, query = matvec(A, mean) + b, A @ cov @ A.transpose(-1, -2), matvec(A, query) + b
        means.append(mean)
        covs.append(cov)
        queries.append(query)
    batch = torch.broadcast_shapes(*(m.shape[:-1] for m in means), *(c.shape[:-2] for c in covs),
                                   *(q.shape[:-1] for q in queries))
    D = mean.shape[-1]
    return GaussianPath(torch.stack([m.expand(*batch, D) for m in means]),
                        torch.stack([c.expand(*batch, D, D) for c in covs]),
                        torch.stack([q.expand(*batch, D) for q in queries]))


def gaussian_recursion(mean, cov, query, U, V, activation: str = "softmax") -> GaussianPath:
    r"""The exact infinite-prompt K-layer network on tokens :math:`N(m, \Gamma)` (module docstring).

    mean ``(..., D)``, cov ``(..., D, D)`` positive semi-definite, query ``(..., D)``, U, V ``(..., K, D, D)`` ->
    :class:`GaussianPath`. Differentiable in every argument.
    """
    checks.one_of("activation", activation, ACTIVATIONS)
    mean = checks.vector("mean", checks.as_float_tensor("mean", mean))
    D = mean.shape[-1]
    cov = checks.covariance("cov", checks.as_float_tensor("cov", cov, like=mean), D, definite=False)
    query = checks.vector("query", checks.as_float_tensor("query", query, like=mean), D)
    U, V = _layers(U, V, mean)
    return gaussian_recursion_unchecked(mean, cov, query, U, V, activation)


def softmax_linear_gap(mean: Tensor, cov: Tensor, query: Tensor, U: Tensor, V: Tensor) -> Tensor:
    r"""Chapter 2's gap of one infinite-prompt layer,
    :math:`T[\mu](z) - T_{\mathrm{lin}}[\mu](z) = (1 - m^\top U z)\, V m`.

    mean, query ``(..., D)``, cov, U, V ``(..., D, D)`` -> ``(..., D)`` (``cov`` does not enter).
    """
    del cov
    return (1 - (mean * matvec(U, query)).sum(-1, keepdim=True)) * matvec(V, mean)


def tail_index(token_cov: Tensor, query_cov: Tensor, U: Tensor) -> Tensor:
    r"""Chapter 3's light-tail index of one layer,
    :math:`a = \lambda_{\max}(\Gamma_q^{1/2} U^\top \Gamma U \Gamma_q^{1/2})`.

    For tokens :math:`N(m, \Gamma)` and a Gaussian query with covariance :math:`\Gamma_q`, the log-weight of a token
    has variance :math:`\lambda^2 = z^\top U^\top \Gamma U z` given the query, the weights' second moment ratio is
    :math:`e^{\lambda^2}` (Chapter 3), and its average over the query is finite if and only if :math:`a < 1/2`: the
    light-tailed regime, where :math:`L E_L` has a finite limit. (For :math:`\Gamma = \sigma^2 I`,
    :math:`\Gamma_q = I` and :math:`U` a scaled rotation, :math:`a = \sigma^2\|U\|^2`, Chapter 3's.)
    token_cov, query_cov, U ``(..., D, D)`` -> ``(...)``.
    """
    values, vectors = torch.linalg.eigh(query_cov)
    root = vectors @ torch.diag_embed(values.clamp_min(0).sqrt()) @ vectors.transpose(-1, -2)
    inner = root @ U.transpose(-1, -2) @ token_cov @ U @ root
    return torch.linalg.eigvalsh(0.5 * (inner + inner.transpose(-1, -2)))[..., -1]


def path_tail_indices(path: GaussianPath, U: Tensor) -> Tensor:
    r""":func:`tail_index` of every layer along a :class:`GaussianPath` whose query is drawn from the token law
    (:math:`\Gamma_q = \Gamma_{\ell-1}`, as for the prompt tokens, which are the queries of self-attention):
    ``(K, ...)``, entry :math:`\ell - 1` for layer :math:`\ell`."""
    K = U.shape[-3]
    return torch.stack([tail_index(path.covs[k], path.covs[k], U[..., k, :, :]) for k in range(K)])


# ---------------------------------------------------------------------------------------------
# Estimators: finite prompts against the recursion
# ---------------------------------------------------------------------------------------------

def gaussian_prompts(mean, cov, L: int, n_prompts: int, seed: int = 0, dtype=torch.float64) -> tuple[Tensor, Tensor]:
    r"""``n_prompts`` prompts of ``L`` tokens of :math:`N(m, \Gamma)` and one query from the same law each.

    Drawn from the ``"prompts"`` stream of ``seed`` at length ``L`` (:mod:`~softmax_as_linear.core.seeding`):
    tokens ``(n_prompts, L, D)``, queries ``(n_prompts, D)``.
    """
    from ..core import seeding
    from .measures import TokenLaw

    law = TokenLaw("gaussian", checks.as_float_tensor("mean", mean).double(),
                   checks.as_float_tensor("cov", cov).double())
    draw = law.sample((checks.positive_int("n_prompts", n_prompts), checks.positive_int("L", L) + 1),
                      seeding.generator(seed, "prompts", L)).to(dtype)
    return draw[:, :-1], draw[:, -1]


def query_errors(mean, cov, U, V, lengths, n_prompts: int, seed: int = 0, activation: str = "softmax",
                 dtype=torch.float32) -> Tensor:
    r"""Signed errors :math:`z_q^{(K)}(\hat\mu_L) - z_q^{(K)}(\mu)` of the finite network's query against the recursion.

    For every ``L`` in ``lengths``, ``n_prompts`` independent prompts and queries of :func:`gaussian_prompts` (the
    network runs in ``dtype``; float32 halves the :math:`O(K L^2 D)` cost and its rounding, about
    :math:`10^{-6}`, stays far below the sampling error at the lengths used here). mean ``(D,)``, cov ``(D, D)``,
    U, V ``(K, D, D)`` -> ``(len(lengths), n_prompts, D)`` float64. Their squared norms estimate
    :math:`E_L = \mathbb{E}\|z_q^{(K)}(\hat\mu_L) - z_q^{(K)}(\mu)\|^2` with one independent sample per prompt.
    """
    checks.one_of("activation", activation, ACTIVATIONS)
    mean = checks.vector("mean", checks.as_float_tensor("mean", mean).double())
    cov = checks.covariance("cov", checks.as_float_tensor("cov", cov).double(), mean.shape[-1], definite=False)
    U, V = _layers(U, V, mean)
    rows = []
    for L in lengths:
        tokens, queries = gaussian_prompts(mean, cov, L, n_prompts, seed, dtype)
        finite = deep_forward_unchecked(tokens, queries, U.to(dtype), V.to(dtype), activation).double()
        limit = gaussian_recursion_unchecked(mean, cov, queries.double(), U, V, activation).queries[-1]
        rows.append(finite - limit)
    return torch.stack(rows)


def layer_outputs(mean, cov, U, V, L: int, n_prompts: int, seed: int = 0, activation: str = "softmax",
                  dtype=torch.float32) -> tuple[DeepOutputs, GaussianPath]:
    r"""Every layer of the finite network on :func:`gaussian_prompts`, and the recursion at the same queries.

    Returns :class:`DeepOutputs` (tokens ``(K + 1, n_prompts, L, D)``, queries ``(K + 1, n_prompts, D)``, float64)
    and :class:`GaussianPath` (means ``(K + 1, D)``, covs ``(K + 1, D, D)``, queries ``(K + 1, n_prompts, D)``).
    """
    checks.one_of("activation", activation, ACTIVATIONS)
    mean = checks.vector("mean", checks.as_float_tensor("mean", mean).double())
    cov = checks.covariance("cov", checks.as_float_tensor("cov", cov).double(), mean.shape[-1], definite=False)
    U, V = _layers(U, V, mean)
    tokens, queries = gaussian_prompts(mean, cov, L, n_prompts, seed, dtype)
    finite = deep_forward_unchecked(tokens, queries, U.to(dtype), V.to(dtype), activation, keep_layers=True)
    path = gaussian_recursion_unchecked(mean, cov, queries.double(), U, V, activation)
    path = GaussianPath(path.means[:, 0], path.covs[:, 0], path.queries)  # the law does not depend on the query
    return DeepOutputs(finite.tokens.double(), finite.queries.double()), path


def sampled_slope(lengths, squared_errors, level: float = 0.95) -> tuple[float, float, float]:
    r"""Least-squares slope of :math:`\log \bar e_L` against :math:`\log L` and its sampling interval.

    ``squared_errors`` holds, for each length, ``n_L >= 2`` independent samples (an array ``(len(lengths), n)`` or a
    list of arrays of any sizes; independent across lengths). The slope is :math:`\sum_L w_L \log \bar e_L` with
    :math:`w_L = (\log L - \overline{\log L}) / \sum (\log L - \overline{\log L})^2`; by the delta method its variance
    is :math:`\sum_L a_L` with :math:`a_L = w_L^2\, s_L^2 / (n_L \bar e_L^2)`, and the interval at ``level`` takes the
    Student-t quantile with the Welch-Satterthwaite degrees of freedom
    :math:`(\sum_L a_L)^2 / \sum_L a_L^2 / (n_L - 1)`, so that a length sampled with few prompts but a large weight
    widens it as it should. It measures the sampling error only, not a bend of the curve. Returns
    ``(slope, low, high)``.
    """
    import numpy as np
    from scipy import stats as scipy_stats

    x = np.log(np.asarray(lengths, dtype=float))
    rows = [np.asarray(r, dtype=float).ravel() for r in squared_errors]
    if len(rows) != x.size or x.size < 2 or min(r.size for r in rows) < 2:
        raise ValueError(f"squared_errors must hold at least 2 samples for each of the {x.size} lengths "
                         f"(at least 2 lengths), got {[r.size for r in rows]}")
    w = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    mean = np.array([r.mean() for r in rows])
    var = np.array([r.var(ddof=1) / r.size for r in rows])
    slope = float(w @ np.log(mean))
    share = w**2 * var / mean**2                              # each length's part of the slope's variance
    dof = share.sum() ** 2 / (share**2 / (np.array([r.size for r in rows]) - 1)).sum()
    half = float(scipy_stats.t.ppf(0.5 + level / 2, dof) * np.sqrt(share.sum()))
    return slope, slope - half, slope + half


def law_layer_outputs(law, U, V, L: int, n_prompts: int, seed: int = 0, activation: str = "softmax",
                      dtype=torch.float32) -> DeepOutputs:
    r"""Every layer of the finite network on prompts and queries drawn i.i.d. from any
    :class:`~softmax_as_linear.theory.measures.TokenLaw` (the ``"prompts"`` stream of ``seed`` at length ``L``).

    Beyond Gaussian laws there is no closed-form recursion after the first layer; compare with
    :func:`gaussian_recursion` at the law's mean and covariance to see how far the Gaussian closure is.
    U, V ``(K, D, D)`` -> :class:`DeepOutputs` (tokens ``(K + 1, n_prompts, L, D)``, queries ``(K + 1, n_prompts, D)``,
    float64).
    """
    from ..core import seeding

    checks.one_of("activation", activation, ACTIVATIONS)
    U, V = _layers(U, V, law.mean.double())
    draw = law.sample((checks.positive_int("n_prompts", n_prompts), checks.positive_int("L", L) + 1),
                      seeding.generator(seed, "prompts", L)).to(dtype)
    finite = deep_forward_unchecked(draw[:, :-1], draw[:, -1], U.to(dtype), V.to(dtype), activation, keep_layers=True)
    return DeepOutputs(finite.tokens.double(), finite.queries.double())
