r"""The infinite-prompt softmax model of in-context regression for any covariate law (Chapter 6).

Given the task vector :math:`w`, a regression token :math:`z = (x, y)` with :math:`x = F\xi` (entries of
:math:`\xi` i.i.d. from the law :math:`\lambda`, :mod:`~softmax_as_linear.theory.covariates`) and
:math:`y = w^\top x + \varepsilon`, :math:`\varepsilon \sim N(0, s^2)`, has the cumulant generating function
(:math:`y` given :math:`x` is Gaussian)

.. math:: K_w(u) = \log \mathbb{E}\, e^{u^\top z} = \tfrac{s^2}{2} u_y^2 + \sum_{j=1}^d k_\lambda(b_j),
    \qquad b = F^\top (u_x + u_y w),

so the softmax-tilted mean of the token law, the infinite-prompt softmax attention
:math:`T[\mu_w](z_q) = V \nabla K_w(U z_q)`, is in closed form:

.. math:: \nabla K_w(u) = \big(m_x,\; w^\top m_x + s^2 u_y\big), \qquad m_x = F\, k'_\lambda(b).

For the Gaussian law :math:`\nabla K_w(u) = \Gamma_w u` (Lemma 2.1); for the others it is not linear in
:math:`u`. Normalised linear attention has the limit :math:`v^\top \Gamma_w U z_q` whatever the law (second
moments only). This module is the course's own derivation; the paper's Section 5 treats Gaussian
covariates only.

- :func:`tilted_moments`: :math:`\nabla K_w(u)` and :math:`\nabla^2 K_w(u)`;
- :func:`infinite_prompt_prediction`: :math:`\hat y_\infty = v^\top \nabla K_w(U z_q)` (or the linear limit);
- :func:`infinite_prompt_risk_estimate`: :math:`R_\infty(U, V)` by Monte Carlo over :math:`(w, x_q)` alone, with
  its standard error;
- :func:`block_infinite_prompt_risk`: :math:`R_\infty` exactly (quadrature) in the block structure of
  Assumption 5.1;
- :func:`gap_constant`: the delta-method limit of :math:`L\,\mathbb{E}[(\hat y_L - \hat y_\infty)^2]`.
"""
from __future__ import annotations

import functools
import itertools
import math

import torch
from torch import Tensor

from ..core import checks
from ..registry import ACTIVATIONS
from . import covariates
from .regression import RegressionTask
from .risks import parameter_blocks


def _factor(task: RegressionTask, like: Tensor) -> Tensor:
    return task.on_device("prompt_factor", like)


def token_log_mgf(task: RegressionTask, u: Tensor, w: Tensor) -> Tensor:
    r""":math:`K_w(u)` for ``u (..., D)`` and ``w (..., d)`` (broadcast), ``(...)``."""
    F = _factor(task, u)
    b = (u[..., :-1] + u[..., -1:] * w) @ F
    return 0.5 * task.noise_var * u[..., -1] ** 2 + covariates.cgf(task.covariates, b).sum(-1)


def tilted_moments(task: RegressionTask, u: Tensor, w: Tensor,
                   covariance: bool = False) -> tuple[Tensor, Tensor | None]:
    r"""Mean :math:`\nabla K_w(u)` ``(..., D)`` of the token law of task :math:`w` tilted by :math:`e^{u^\top z}`, and
    with ``covariance`` its covariance
    :math:`\nabla^2 K_w(u) = J^\top \operatorname{diag}(k''_\lambda(b)) J + s^2 e_D e_D^\top`,
    :math:`J = F^\top [I_d, w]`, ``(..., D, D)``. ``u (..., D)`` and ``w (..., d)`` broadcast."""
    F = _factor(task, u)
    b = (u[..., :-1] + u[..., -1:] * w) @ F  # F^T (u_x + u_y w), as rows
    m_x = covariates.tilted_mean(task.covariates, b) @ F.T
    m_y = (m_x * w).sum(-1, keepdim=True) + task.noise_var * u[..., -1:]
    mean = torch.cat([m_x, m_y], -1)
    if not covariance:
        return mean, None
    J = torch.cat([F.T.expand(*w.shape[:-1], *F.T.shape), (w @ F).unsqueeze(-1)], -1)  # (..., d, D)
    cov = J.transpose(-1, -2) @ (covariates.tilted_variance(task.covariates, b).unsqueeze(-1) * J)
    cov[..., -1, -1] += task.noise_var
    return mean, cov


def infinite_prompt_prediction(U: Tensor, V: Tensor, task: RegressionTask, w: Tensor, query: Tensor,
                               activation: str = "softmax") -> Tensor:
    r"""The prediction of attention with an infinite prompt of task :math:`w`, ``(...)``.

    Softmax: :math:`\hat y_\infty = v^\top \nabla K_w(U z_q)`; linear: :math:`v^\top \Gamma_w U z_q` (the Gaussian
    formula, for every law). U, V ``(..., D, D)``, w ``(..., d)``, query ``(..., D)`` broadcast; no checks
    (training loops call it), differentiable in U and V.
    """
    return prediction_from_scores((U @ query.unsqueeze(-1)).squeeze(-1), V[..., -1, :], task, w, activation)


def prediction_from_scores(u: Tensor, v: Tensor, task: RegressionTask, w: Tensor,
                           activation: str = "softmax") -> Tensor:
    r""":func:`infinite_prompt_prediction` from :math:`u = U z_q` ``(..., D)`` and the last row :math:`v` of :math:`V`
    ``(..., D)``: :math:`v^\top \nabla K_w(u)` (softmax) or :math:`v^\top \Gamma_w u` (linear), ``(...)``."""
    if activation == "softmax" and task.covariates != "gaussian":
        mean, _ = tilted_moments(task, u, w)
        return (mean * v).sum(-1)
    # Gamma_w u without forming Gamma_w: x-part P (u_x + u_y w), y-part w^T P (u_x + u_y w) + s^2 u_y
    t = (u[..., :-1] + u[..., -1:] * w) @ task.on_device("prompt_covariance", u)
    return (t * (v[..., :-1] + v[..., -1:] * w)).sum(-1) + task.noise_var * u[..., -1] * v[..., -1]


def infinite_prompt_risk_estimate(U, V, task: RegressionTask, n_samples: int = 1 << 16,
                                  generator: torch.Generator | None = None, seed: int = 0,
                                  activation: str = "softmax") -> tuple[Tensor, Tensor]:
    r"""Monte Carlo estimate of
    :math:`R_\infty(U, V) = \tfrac12 \mathbb{E}_{w, x_q}[(\hat y_\infty - w^\top x_q)^2] + \tfrac{s^2}{2}`.

    The query's label noise is integrated exactly (the :math:`s^2/2`); the estimate is the mean of
    :math:`\ell_i = \tfrac12(\hat y_\infty(w_i, x_{q,i}) - w_i^\top x_{q,i})^2 + \tfrac{s^2}{2}` over ``n_samples``
    i.i.d. :math:`(w, x_q)` of the task (:meth:`~softmax_as_linear.theory.regression.RegressionTask.stream`, no prompt
    tokens), and its standard error :math:`\mathrm{sd}(\ell)/\sqrt n`. Its gradient in :math:`(U, V)` is an unbiased
    estimate of :math:`\nabla R_\infty`. U, V ``(..., D, D)`` -> ``(mean (...), se (...))``, float64.
    """
    checks.one_of("activation", activation, ACTIVATIONS)
    n = checks.int_at_least("n_samples", n_samples, 2)
    U = checks.square("U", checks.as_float_tensor("U", U).double(), task.D)
    V = checks.square("V", checks.as_float_tensor("V", V, like=U).double(), task.D)
    if generator is None:
        generator = torch.Generator().manual_seed(seed)
    stream = task.stream(n, generator)
    w, query = stream.w.to(U.device), stream.query.to(U.device)
    Ub, Vb = U.unsqueeze(-3), V.unsqueeze(-3)  # (..., 1, D, D) against the n samples
    pred = infinite_prompt_prediction(Ub, Vb, task, w, query, activation)  # (..., n)
    losses = 0.5 * (pred - (query[:, :-1] * w).sum(-1)) ** 2 + 0.5 * task.noise_var
    return losses.mean(-1), losses.std(-1) / math.sqrt(n)


def _grid(name: str, d: int, n: int) -> tuple[Tensor, Tensor]:
    points, mass = _tensor_grid(name, d, n)
    return points.clone(), mass.clone()


@functools.lru_cache(maxsize=None)
def _tensor_grid(name: str, d: int, n: int) -> tuple[Tensor, Tensor]:
    # built once per (law, d, n): n^d points listed in Python, asked for at every evaluation of the risk
    nodes, weights = covariates.quadrature(name, n)
    points = torch.tensor(list(itertools.product(nodes.tolist(), repeat=d)), dtype=torch.float64)
    mass = torch.tensor([math.prod(c) for c in itertools.product(weights.tolist(), repeat=d)], dtype=torch.float64)
    return points, mass


def block_infinite_prompt_risk(A_x: Tensor, v_y: Tensor, task: RegressionTask, n_nodes: int = 6) -> Tensor:
    r""":math:`R_\infty` in the block structure :math:`a_y = 0`, :math:`v_x = 0` (Assumption 5.1), by quadrature.

    There :math:`\hat y_\infty = v_y w^\top m_x(A_x x_q)` with :math:`m_x(t) = F k'_\lambda(F^\top t)`, and averaging
    over :math:`w` and the query noise leaves an expectation over the query's standard entries alone,

    .. math:: R_\infty = \tfrac{\tau^2}{2}\, \mathbb{E}_\xi \big\| v_y F k'_\lambda(F^\top A_x F_q \xi) - F_q \xi
       \big\|^2 + \tfrac{s^2}{2}

    (:math:`F_q` the query factor): label noise enters only through the constant. Computed on a tensor
    grid of the law's rule (:func:`~softmax_as_linear.theory.covariates.quadrature`, ``n_nodes`` per axis; the
    Rademacher rule is exact), or, for :math:`\Sigma = I` and a diagonal :math:`A_x`, as a sum of one-dimensional
    integrals (24 nodes). A_x ``(..., d, d)``, v_y ``(...)`` -> ``(...)``, differentiable.
    """
    d, name = task.d, task.covariates
    v_y = v_y.unsqueeze(-1)
    if task.is_isotropic and bool((A_x - torch.diag_embed(torch.diagonal(A_x, dim1=-2, dim2=-1)) == 0).all()):
        nodes, weights = (t.to(A_x) for t in covariates.quadrature(name, 24))
        a = torch.diagonal(A_x, dim1=-2, dim2=-1).unsqueeze(-1)  # (..., d, 1)
        residual = v_y.unsqueeze(-1) * covariates.tilted_mean(name, a * nodes) - nodes  # (..., d, m)
        return 0.5 * task.task_var * (residual**2 * weights).sum((-1, -2)) + 0.5 * task.noise_var
    points, mass = (t.to(A_x) for t in _grid(name, d, n_nodes))
    F, Fq = task.prompt_factor.to(A_x), task.query_factor.to(A_x)
    x = points @ Fq.T  # (m, d)
    b = (x @ A_x.transpose(-1, -2)) @ F  # (..., m, d): F^T A_x x as rows
    m_x = covariates.tilted_mean(name, b) @ F.T
    residual = v_y.unsqueeze(-1) * m_x - x
    return 0.5 * task.task_var * ((residual**2).sum(-1) * mass).sum(-1) + 0.5 * task.noise_var


def is_block(U: Tensor, V: Tensor, d: int) -> bool:
    """Whether ``(U, V)`` have the block structure of Assumption 5.1 where it acts: :math:`a_y = 0`, :math:`v_x = 0`."""
    _, a_y, v_x, _ = parameter_blocks(U, V, d)
    return bool((a_y == 0).all()) and bool((v_x == 0).all())


def gap_constant(U, V, task: RegressionTask, w: Tensor, query: Tensor) -> Tensor:
    r"""The limit of :math:`L\,\mathbb{E}[(\hat y_L - \hat y_\infty)^2]` for one task :math:`w` and query, by the delta
    method.

    :math:`\hat y_L = \sum_i a_i c_i / \sum_i a_i` with :math:`a_i = e^{u^\top z_i}`, :math:`c_i = v^\top z_i` is a
    ratio of means; its variance times :math:`L` tends to
    :math:`\mathbb{E}[a^2 (c - \hat y_\infty)^2] / (\mathbb{E} a)^2`, which the cumulant generating function gives in
    closed form (the tilt by :math:`2u` appears):

    .. math:: C = e^{K_w(2u) - 2K_w(u)} \big[v^\top \nabla^2 K_w(2u)\, v + (v^\top(\nabla K_w(2u) - \nabla
       K_w(u)))^2\big].

    Finite for every law here; the rate :math:`1/L` it implies is Chapter 3's for light weights.
    U, V ``(D, D)``, w ``(n, d)``, query ``(n, D)`` -> ``(n,)``.
    """
    U = checks.square("U", checks.as_float_tensor("U", U).double(), task.D)
    V = checks.square("V", checks.as_float_tensor("V", V, like=U).double(), task.D)
    u = query.double() @ U.T
    w = w.double()
    v = V[-1]
    mean1, _ = tilted_moments(task, u, w)
    mean2, cov2 = tilted_moments(task, 2 * u, w, covariance=True)
    weight = torch.exp(token_log_mgf(task, 2 * u, w) - 2 * token_log_mgf(task, u, w))
    return weight * ((cov2 @ v) @ v + ((mean2 - mean1) @ v) ** 2)
