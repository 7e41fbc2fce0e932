r"""The infinite-prompt K-layer network on in-context regression: the Gaussian recursion of each task's token law.

Given the task :math:`w`, the tokens of Chapter 4's regression prompts are i.i.d. :math:`N(0, \Gamma_w)`
(:meth:`~softmax_as_linear.theory.regression.RegressionTask.token_covariance`), so the infinite-prompt limit of the
K-layer residual network of :mod:`~softmax_as_linear.theory.depth` is the exact recursion
:func:`~softmax_as_linear.theory.depth.gaussian_recursion` started from :math:`(m_0, \Gamma_0) = (0, \Gamma_w)` with the
query :math:`z_q^{(0)} = (x_q, 0)`:

.. math::
    A_\ell &= I + V_\ell \Gamma_{\ell-1} U_\ell, \qquad \Gamma_\ell = A_\ell \Gamma_{\ell-1} A_\ell^\top, \\
    z_q^{(\ell)} &= A_\ell z_q^{(\ell-1)}, \qquad \hat y_\infty = \big(z_q^{(K)}\big)_D .

The tokens are centred, so :math:`m_\ell = 0` at every layer and the softmax and normalised linear recursions are the
same function of the weights (Chapter 7, Section 7.2): one infinite-prompt model serves both activations. At
:math:`K = 1` it is the one-layer infinite-prompt model of Chapters 4-6, :math:`v^\top \Gamma_w U z_q`
(:func:`~softmax_as_linear.theory.limit_model.infinite_prompt_prediction`). It reads :math:`(w, x_q)` and no prompt, and
is differentiable in the weights. The recursion is exact for Gaussian covariates only (Lemma 2.1); other covariate
laws are refused.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..registry import ACTIVATIONS
from .depth import gaussian_recursion_unchecked
from .regression import RegressionTask


def deep_limit_prediction(U: Tensor, V: Tensor, task: RegressionTask, w: Tensor, query: Tensor,
                          activation: str = "softmax") -> Tensor:
    r"""The prediction :math:`\hat y_\infty` of the K-layer network with an infinite prompt of task ``w`` (module
    docstring).

    U, V ``(..., K, D, D)``, w ``(..., d)``, query ``(..., D)`` (its last entry is read as it is, 0 for regression
    queries); leading dimensions broadcast -> ``(...)``. No checks of the tensors (training loops call it); the
    task's covariate law must be Gaussian.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    if task.covariates != "gaussian":
        raise ValueError(f"task: the Gaussian recursion is the infinite-prompt network for Gaussian covariates only, "
                         f"got covariates {task.covariates!r}")
    cov = token_covariance_unchecked(task, w.to(U.dtype))
    mean = cov.new_zeros(cov.shape[:-1])
    return gaussian_recursion_unchecked(mean, cov, query.to(U.dtype), U, V, activation).queries[-1][..., -1]


def token_covariance_unchecked(task: RegressionTask, w: Tensor) -> Tensor:
    r""":math:`\Gamma_w` ``(..., D, D)`` for ``w (..., d)``, as
    :meth:`~softmax_as_linear.theory.regression.RegressionTask.token_covariance` without its checks (training loops):
    :math:`\begin{pmatrix} P & P w \\ w^\top P & w^\top P w + s^2 \end{pmatrix}` with :math:`P` the prompt
    covariance."""
    P = task.on_device("prompt_covariance", w)
    # (..., d): w^T P; a broadcast product, far cheaper than a batched (1, d) @ (d, d)
    Pw = (w.unsqueeze(-1) * P).sum(-2)
    corner = (Pw * w).sum(-1, keepdim=True) + task.noise_var
    top = torch.cat([P.expand(*w.shape[:-1], *P.shape), Pw.unsqueeze(-1)], dim=-1)
    return torch.cat([top, torch.cat([Pw, corner], dim=-1).unsqueeze(-2)], dim=-2)
