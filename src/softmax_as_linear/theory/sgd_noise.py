r"""The gradient noise of SGD on normalised linear attention: per-prompt gradients and the excess risk they leave.

:func:`linear_attention_gradients` gives the per-prompt gradients of the half squared error,
:func:`sgd_noise_floor` the excess risk at which SGD settles around the optimum of :math:`R_L` (Chapter 4).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core import checks
from .flow_limits import limit_parameters
from .regression import Batch, RegressionTask
from .risks import linear_attention_risk_unchecked


def linear_attention_gradients(batch: Batch, U: Tensor, V: Tensor) -> Tensor:
    r"""Per-prompt gradients of the half squared error :math:`r = \tfrac12(\hat y - y_q)^2` of normalised linear
    attention, :math:`\hat y = v^\top M U z_q` with :math:`M = \tfrac1L Z^\top Z` and :math:`v` the last row of V:

    .. math:: \partial_U r = (\hat y - y_q)\, M v\, z_q^\top, \qquad
        \partial_{v} r = (\hat y - y_q)\, M U z_q, \\ \text{other rows of } V\!: 0 .

    ``batch`` of ``n`` prompts, U, V ``(D, D)`` -> ``(n, 2 D^2)``, the gradients in ``U``, then ``V``, flattened.
    """
    tokens, query, target = batch.tokens.to(U.dtype), batch.query.to(U.dtype), batch.target.to(U.dtype)
    D = U.shape[-1]
    M = tokens.transpose(-1, -2) @ tokens / tokens.shape[-2]  # (n, D, D)
    v = V[-1]
    MUz = (M @ (U @ query.unsqueeze(-1))).squeeze(-1)  # (n, D)
    residual = MUz @ v - target
    grad_U = residual[:, None, None] * (M @ v)[:, :, None] * query[:, None, :]
    grad_V = torch.zeros(len(residual), D, D, dtype=U.dtype)
    grad_V[:, -1] = residual[:, None] * MUz
    return torch.cat([grad_U.flatten(1), grad_V.flatten(1)], 1)


def sgd_noise_floor(task: RegressionTask, L: int, lr: float, batch_size: int, n_prompts: int = 20_000,
                    seed: int = 0) -> tuple[float, float]:
    r"""Expected excess risk :math:`\mathbb{E}[R_L(\theta)] - R^*_{\mathrm{lin}}(L)` at which SGD on normalised linear
    attention settles around its optimum :math:`\theta^*_L`
    (:func:`~softmax_as_linear.theory.flow_limits.limit_parameters` at ``L``).

    SGD at learning rate ``lr`` on the MSE (:math:`= 2R`) is :math:`\theta \leftarrow \theta - \eta(\nabla R + \xi)`
    with :math:`\eta = 2\,\mathrm{lr}` and noise :math:`\xi` of covariance :math:`C/B` (``B`` = ``batch_size``,
    :math:`C` the covariance of the per-prompt gradients, :func:`linear_attention_gradients`). Near the optimum,
    with :math:`H = \nabla^2 R_L(\theta^*_L)` (exact: autograd on
    :func:`~softmax_as_linear.theory.risks.linear_attention_risk`) of eigenvalues :math:`\lambda_k`, the stationary
    covariance :math:`S = (I - \eta H) S (I - \eta H) + \eta^2 C/B` gives

    .. math:: \tfrac12 \operatorname{tr}(H S) = \frac{\eta}{2B} \sum_{\lambda_k > 0} \frac{\tilde C_{kk}}{2 -
       \eta\lambda_k},

    :math:`\tilde C` in the eigenbasis of :math:`H` (:math:`\eta\,\operatorname{tr}C / (4B)` for small steps). The flat
    directions of :math:`H` (the rescaling :math:`(cU, v/c)` and the unused entries) receive no gradient noise.
    :math:`C` is the mean of :math:`g g^\top` over ``n_prompts`` fresh prompts (:math:`\nabla R_L = 0` at the optimum),
    so the floor is a mean of per-prompt terms: returns ``(floor, standard_error)``.
    """
    L = checks.positive_int("L", L)
    eta = 2 * checks.positive_float("lr", lr)
    batch_size = checks.positive_int("batch_size", batch_size)
    n_prompts = checks.int_at_least("n_prompts", n_prompts, 2)
    U, V = limit_parameters(task, L)
    D = task.D
    theta = torch.cat([U.flatten(), V.flatten()])

    def risk(th):
        return linear_attention_risk_unchecked(th[: D * D].reshape(D, D), th[D * D:].reshape(D, D), L, task)

    H = torch.autograd.functional.hessian(risk, theta)
    eigenvalues, basis = torch.linalg.eigh(H)
    keep = eigenvalues > 1e-9 * float(eigenvalues.max())
    if float((eta * eigenvalues).max()) >= 2:
        raise ValueError(f"lr: SGD with step {eta:g} on R is unstable at this optimum (largest eta lambda >= 2)")
    generator = torch.Generator().manual_seed(seed)
    terms = []
    for start in range(0, n_prompts, 4096):
        batch = task.sample(min(4096, n_prompts - start), L, generator, dtype=torch.float64)
        projected = linear_attention_gradients(batch, U, V) @ basis[:, keep]  # (n, k)
        terms.append((projected**2 / (2 - eta * eigenvalues[keep])).sum(-1) * eta / (2 * batch_size))
    values = torch.cat(terms)
    return float(values.mean()), float(values.std() / math.sqrt(values.numel()))
