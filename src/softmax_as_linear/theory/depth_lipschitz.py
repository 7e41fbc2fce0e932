r"""A layer-by-layer Lipschitz bound on the finite-prompt error of K residual softmax layers, against the measured one.

**The chain** (the course's own). Let :math:`\Phi_\ell` be the infinite-prompt maps of the recursion
(:func:`~softmax_as_linear.theory.depth.gaussian_recursion`) and :math:`\hat\Phi_\ell` the finite network's. Compare,
after :math:`\ell` layers, the finite prompt :math:`(\hat z_i^{(\ell)})` and query with the same input tokens and query
pushed through the infinite maps; measure clouds of the same length with the coupling distance
:math:`d(X, X')^2 = \frac1L\sum_i |x_i - x'_i|^2` (which bounds their Wasserstein-2 distance). If layer :math:`\ell` is
:math:`\Lambda_\ell`-Lipschitz as a map of (cloud, point) in that distance, and :math:`g_\ell` is its *one-layer gap*,
the root-mean-square error of the layer alone on a fresh prompt of its input law :math:`N(m_{\ell-1}, \Gamma_{\ell-1})`
(Chapter 3's :math:`\sqrt{E_L}` for that layer), the triangle inequality gives for the root-mean-square error of the
query after :math:`K` layers

.. math:: e_K \le B_K = \sum_{\ell=1}^{K} \Big(\prod_{j=\ell+1}^{K} \Lambda_j\Big)\, g_\ell

(:func:`chain_bound`): per-layer constants times one-layer gaps (up to a factor at most :math:`\sqrt2` from carrying the
query's error and the cloud's together, and an :math:`O(1/L)` term from each prompt token attending to itself, both left
out here; the cloud's one-layer gap is the query's for a token drawn from the same law). Two choices of
:math:`\Lambda_\ell`:

- :func:`compact_layer_constant`, a true Lipschitz constant on clouds and points in the ball :math:`B_R`: for
  :math:`T[\mu](z) = V \sum_i p_i z_i` with :math:`p = \mathrm{softmax}(z_i^\top U z)`, the derivative in the cloud is
  :math:`V\sum_j p_j (I + (z_j - \bar z_p)(Uz)^\top)\delta_j` and :math:`p_j \le e^{2R^2\|U\|}/L`, the derivative in the
  point is :math:`V\,\mathrm{Cov}_p(z)\, U` with :math:`\|\mathrm{Cov}_p\| \le R^2`, so that

  .. math:: \Lambda(R) = 1 + \|V\|\big(R^2\|U\| + (1 + 2R^2\|U\|)\, e^{R^2\|U\|}\big).

  It does not depend on :math:`L` and grows exponentially in :math:`R^2\|U\|`: a bound of the kind Castin, Ablin &
  Peyré (ICML 2024, "How smooth is attention?") prove for mean-field self-attention on measures supported in a ball
  (their constants differ; the derivation here is the course's). Gaussian tokens have no bounded support: the ball
  must hold the prompt, so :math:`R` is the largest token norm, which grows like
  :math:`\sqrt{2\lambda_{\max}(\Gamma)\log L}`.
- :func:`gaussian_local_constant`, the linearised constant at the Gaussian law the layer actually sees (a first-order
  heuristic, not a bound): :math:`\Lambda^{\mathrm{loc}} = \|A\| + (\mathbb{E}_\zeta\, \ell(\zeta)^2)^{1/2}` with
  :math:`A = I + V\Gamma U` (the point derivative, Lemma 2.1) and :math:`\ell(\zeta)^2 = e^{u^\top\Gamma u}
  \operatorname{tr}\big(V S(u) V^\top\big)`, :math:`u = U\zeta`,
  :math:`S(u) = I + \Gamma u u^\top + u u^\top\Gamma + |u|^2(\Gamma + \Gamma u u^\top \Gamma)`: the norm of the
  derivative of :math:`\mu \mapsto T[\mu](\zeta)` for transports :math:`\delta` in :math:`L^2(\mu)`, averaged over
  :math:`\zeta \sim N(m, \Gamma)`. That average is finite if and only if :math:`\Gamma^{-1} - 2U^\top\Gamma U` is
  positive definite, that is exactly when Chapter 3's tail index (:func:`~softmax_as_linear.theory.depth.tail_index`)
  is below :math:`1/2`; otherwise the constant is infinite.

:func:`lipschitz_comparison` measures :math:`e_K`, the one-layer gaps and both chains for one network.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core import checks
from ..core.stats import mean_se_along
from .depth import (
    _layers,
    gaussian_prompts,
    gaussian_recursion_unchecked,
    layer_affine_map,
    layer_outputs,
    query_errors,
)
from .measures import TokenLaw


def compact_layer_constant(U: Tensor, V: Tensor, radius: float) -> float:
    r""":math:`\Lambda(R) = 1 + \|V\|(R^2\|U\| + (1 + 2R^2\|U\|) e^{R^2\|U\|})` (module docstring) for one residual
    softmax layer, U, V ``(D, D)`` (spectral norms), on clouds and points in the ball of radius ``radius``."""
    radius = checks.positive_float("radius", radius)
    u, v = float(torch.linalg.matrix_norm(U, 2)), float(torch.linalg.matrix_norm(V, 2))
    r2u = radius**2 * u
    return 1.0 + v * (r2u + (1.0 + 2.0 * r2u) * math.exp(r2u))


def gaussian_local_constant(U: Tensor, V: Tensor, mean: Tensor, cov: Tensor, n_samples: int = 1 << 16,
                            seed: int = 0) -> float:
    r""":math:`\Lambda^{\mathrm{loc}} = \|I + V\Gamma U\| + (\mathbb{E}_{\zeta \sim N(m, \Gamma)}\ell(\zeta)^2)^{1/2}`
    (module docstring) for one softmax layer on tokens :math:`N(m, \Gamma)`, ``inf`` when the tail index is at least
    1/2.

    The average is :math:`\mathbb{E}[e^{\zeta^\top B\zeta} f(\zeta)] = Z\,\mathbb{E}_{\nu}[f]` with
    :math:`B = U^\top\Gamma U`, :math:`\nu = N(m', \Sigma')`, :math:`\Sigma' = (\Gamma^{-1} - 2B)^{-1}`,
    :math:`m' = \Sigma'\Gamma^{-1}m` and
    :math:`Z = \sqrt{\det\Sigma'/\det\Gamma}\, \exp(\tfrac12 m'^\top\Sigma'^{-1}m' - \tfrac12 m^\top\Gamma^{-1}m)`; the
    polynomial :math:`f = \operatorname{tr}(VSV^\top)` is averaged over ``n_samples`` draws of :math:`\nu` (seeded by
    ``seed``). U, V, cov ``(D, D)`` (cov positive definite), mean ``(D,)``.
    """
    U, V, mean, cov = (t.double() for t in (U, V, mean, cov))
    precision = torch.linalg.inv(cov)
    B = U.T @ cov @ U
    tilted = precision - 2 * B
    tilted = 0.5 * (tilted + tilted.T)
    if float(torch.linalg.eigvalsh(tilted)[0]) <= 0:
        return math.inf
    sigma = torch.linalg.inv(tilted)
    m = sigma @ precision @ mean
    log_z = 0.5 * (torch.logdet(sigma) - torch.logdet(cov)) + 0.5 * (m @ tilted @ m - mean @ precision @ mean)
    zeta = TokenLaw("gaussian", m, sigma).sample((n_samples,),
                                                 torch.Generator().manual_seed(seed))  # nu = N(m', Sigma')
    u = zeta @ U.T  # (n, D)
    gu = u @ cov  # Gamma u (cov symmetric)
    VtV = V.T @ V
    norm2 = (u * u).sum(-1)
    f = (torch.trace(VtV) + 2 * ((gu @ VtV) * u).sum(-1) + norm2 * torch.trace(VtV @ cov)
         + norm2 * ((gu @ VtV) * gu).sum(-1))
    A, _ = layer_affine_map(mean, cov, U, V)
    return float(torch.linalg.matrix_norm(A, 2)) + math.sqrt(float(torch.exp(log_z) * f.mean()))


def chain_bound(one_layer_gaps, constants) -> Tensor:
    r""":math:`B_K = \sum_{\ell \le K} (\prod_{\ell < j \le K} \Lambda_j)\, g_\ell` for every :math:`K`: gaps and
    constants
    ``(K,)`` (entry :math:`\ell - 1` for layer :math:`\ell`) -> ``(K,)`` float64 (``inf`` propagates)."""
    gaps = torch.as_tensor(one_layer_gaps, dtype=torch.float64)
    constants = torch.as_tensor(constants, dtype=torch.float64)
    if gaps.shape != constants.shape or gaps.ndim != 1:
        raise ValueError(f"one_layer_gaps and constants must be vectors of the same length, got {tuple(gaps.shape)} "
                         f"and {tuple(constants.shape)}")
    bounds, total = [], torch.tensor(0.0, dtype=torch.float64)
    for g, c in zip(gaps, constants):
        total = (total * c if total > 0 else total) + g  # B_l = Lambda_l B_{l-1} + g_l
        bounds.append(total)
    return torch.stack(bounds)


def _rms(squared: Tensor) -> tuple[float, float]:
    """Root mean square of i.i.d. squared errors and its delta-method standard error."""
    mean, se = (float(x) for x in mean_se_along(squared.reshape(-1)))
    root = math.sqrt(mean)
    return root, se / (2 * root) if root > 0 else 0.0


def lipschitz_comparison(mean, cov, U, V, L: int, n_prompts: int, seed: int = 0, n_samples: int = 1 << 16) -> dict:
    r"""The chain :math:`B_K` against the measured error :math:`e_K`, ``K = 1..len(U)``, for softmax layers on tokens
    :math:`N(m, \Gamma)` at prompt length ``L`` (``n_prompts`` prompts and queries of
    :func:`~softmax_as_linear.theory.depth.gaussian_prompts`).

    Returns, each a list over :math:`K` (entry :math:`K - 1`): ``measured`` :math:`e_K` and ``measured_se`` (root mean
    square over the prompts, delta-method standard error); ``one_layer`` :math:`g_\ell` and ``one_layer_se`` (layer
    :math:`\ell` alone on fresh prompts of its input law, seed ``seed + ell``); ``radius`` :math:`R_\ell` (the largest
    norm of a layer-:math:`(\ell-1)` token, finite or pushed through the infinite maps, over all prompts); ``compact``
    and ``local`` the constants :math:`\Lambda_\ell`, :math:`\Lambda^{\mathrm{loc}}_\ell`; ``bound_compact`` and
    ``bound_local`` the chains; ``ratio_compact``, ``ratio_local`` the bounds over the measured errors.
    """
    mean = checks.vector("mean", checks.as_float_tensor("mean", mean).double())
    cov = checks.covariance("cov", checks.as_float_tensor("cov", cov).double(), mean.shape[-1])
    U, V = _layers(U, V, mean)
    U, V = U.double(), V.double()
    K = U.shape[-3]
    finite, path = layer_outputs(mean, cov, U, V, L, n_prompts, seed)
    measured = [_rms(((finite.queries[k] - path.queries[k]) ** 2).sum(-1)) for k in range(1, K + 1)]
    # the input tokens pushed through the infinite maps, for the radius of the ball that must hold both clouds
    tokens, _ = gaussian_prompts(mean, cov, L, n_prompts, seed, torch.float64)
    law = gaussian_recursion_unchecked(mean, cov, mean, U, V)
    out = {"L": int(L), "n_prompts": int(n_prompts), "K": K, "measured": [], "measured_se": [], "one_layer": [],
           "one_layer_se": [], "radius": [], "compact": [], "local": []}
    mapped = tokens
    for k in range(K):
        m_k, c_k = law.means[k], law.covs[k]
        radius = max(float(finite.tokens[k].norm(dim=-1).max()), float(mapped.norm(dim=-1).max()))
        gaps = (query_errors(m_k, c_k, U[k:k + 1], V[k:k + 1], [L], n_prompts, seed + k + 1, dtype=torch.float64)[0]
                ** 2).sum(-1)
        g, g_se = _rms(gaps)
        out["one_layer"].append(g)
        out["one_layer_se"].append(g_se)
        out["radius"].append(radius)
        out["compact"].append(compact_layer_constant(U[k], V[k], radius))
        out["local"].append(gaussian_local_constant(U[k], V[k], m_k, c_k, n_samples, seed))
        out["measured"].append(measured[k][0])
        out["measured_se"].append(measured[k][1])
        A, b = layer_affine_map(m_k, c_k, U[k], V[k])
        mapped = mapped @ A.T + b
    for name in ("compact", "local"):
        bound = chain_bound(out["one_layer"], out[name])
        out[f"bound_{name}"] = bound.tolist()
        out[f"ratio_{name}"] = (bound / torch.tensor(out["measured"], dtype=torch.float64)).tolist()
    return out
