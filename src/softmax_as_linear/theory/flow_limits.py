r"""Where the gradient flow of in-context regression starts and where it ends (Assumption 5.1, Remark 5.3, Appendix
F.3).

The start :func:`block_init` and the scale :func:`init_scale_bound` under which convergence is proved; the
limits :func:`limit_parameters` (invertible :math:`\Sigma`, infinite or finite prompts) and
:func:`degenerate_limit_parameters` (degenerate :math:`\Sigma`). Matrices are ``(D, D)``, ``D = d + 1``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core import checks
from .regression import RegressionTask, is_degenerate
from .risks import finite_prompt_covariance


def limit_parameters(task: RegressionTask, L: int | None = None) -> tuple[Tensor, Tensor]:
    r"""Limit of the gradient flow from the Assumption 5.1 initialisation (Remark 5.3, Zhang et al. 2024).

    .. math:: U^* = c^{-1} \begin{pmatrix} G^{-1} & 0 \\ 0 & 0 \end{pmatrix}, \quad V^* = c\, e_D e_D^\top,
        \quad c = \operatorname{tr}(G^{-2})^{1/4},

    with :math:`G = P` (the prompt covariance, :math:`\Sigma` for the paper's sampler) for infinite prompts
    (the limit of softmax and of normalised linear attention alike) and :math:`G = \Gamma_L` at prompt
    length ``L``. At finite ``L`` this is the limit of *normalised linear attention* trained on
    :math:`R_L` (Zhang et al. 2024, Theorem 4.1, there without label noise; the noise enters
    :math:`\Gamma_L` through :math:`s^2/\tau^2`), which attains
    :func:`~softmax_as_linear.theory.risks.optimal_linear_risk`; it is not the limit of softmax attention at finite
    ``L``, which has no closed form. For a degenerate :math:`\Sigma` use :func:`degenerate_limit_parameters` (Appendix
    F.3).

    For a non-Gaussian covariate law the infinite-prompt limit (``L=None``) is that of normalised linear
    attention only (the flow of softmax attention goes elsewhere, or nowhere: Chapter 6,
    :func:`~softmax_as_linear.theory.flow.infinite_prompt_flow`), and ``L`` must be None.
    Returns ``(U*, V*)``, each ``(D, D)`` in float64.
    """
    if L is not None and task.covariates != "gaussian":
        raise ValueError("L: the finite-L limit is derived for Gaussian covariates only, got covariates "
                         f"{task.covariates!r}")
    if L is None and is_degenerate(task.prompt_covariance):
        raise ValueError("task: the covariance is degenerate; its limit depends on the initialisation "
                         "(Appendix F.3): use degenerate_limit_parameters(task, alpha)")
    G = task.prompt_covariance if L is None else finite_prompt_covariance(L, task)
    G_inv = torch.linalg.inv(G)
    c = torch.trace(G_inv @ G_inv) ** 0.25
    D = task.D
    U = torch.zeros(D, D, dtype=torch.float64)
    U[: task.d, : task.d] = G_inv / c
    V = torch.zeros(D, D, dtype=torch.float64)
    V[task.d, task.d] = c
    return U, V


def degenerate_limit_parameters(task: RegressionTask, alpha: float, theta=None) -> tuple[Tensor, Tensor]:
    r"""Limit of the infinite-prompt gradient flow from Assumption 5.1 for a possibly degenerate :math:`\Sigma`
    (Appendix F.3, extending Zhang et al. 2024 with the Moore-Penrose inverse :math:`\Sigma^+`).

    The gradient of :math:`R_\infty` in the block :math:`A_x` of :math:`U` has the form :math:`\Sigma(\cdot)\Sigma`,
    so with :math:`\Pi` the orthogonal projection on the range of :math:`\Sigma` only :math:`\Pi A_x \Pi` moves;
    the rest, :math:`N = \alpha(\Theta\Theta^\top - \Pi\Theta\Theta^\top\Pi)`, keeps its initial value. The
    flow converges to

    .. math:: A_x^* = \Sigma^+ / c + N, \qquad v_y^* = c, \qquad \text{with} \\
        c^2 = \tfrac12\big(\|N\|_F^2 + \sqrt{\|N\|_F^4 + 4\|\Sigma^+\|_F^2}\big),

    where :math:`c` keeps the balance :math:`\|A_x\|_F^2 = v_y^2` of the start; the predictor
    :math:`v_y x_q^\top A_x^{*\top}\Sigma w = x_q^\top \Pi w = w^\top x_q` (inputs lie in the range of
    :math:`\Sigma`) is Bayes optimal. For an invertible :math:`\Sigma`, :math:`N = 0` and this is
    :func:`limit_parameters` (Remark 5.3). ``alpha``, ``theta``: as in :func:`block_init`.
    Returns ``(U*, V*)``, each ``(D, D)`` in float64.
    """
    U0, _ = block_init(task, alpha, theta)
    d = task.d
    sigma = task.prompt_covariance
    pinv = torch.linalg.pinv(sigma, hermitian=True)
    project = sigma @ pinv
    start = U0[:d, :d]
    N = start - project @ start @ project
    n2, p2 = float((N**2).sum()), float((pinv**2).sum())
    c = math.sqrt(0.5 * (n2 + math.sqrt(n2**2 + 4 * p2)))
    U = torch.zeros(task.D, task.D, dtype=torch.float64)
    U[:d, :d] = pinv / c + N
    V = torch.zeros(task.D, task.D, dtype=torch.float64)
    V[d, d] = c
    return U, V


def block_init(task: RegressionTask, alpha: float, theta=None) -> tuple[Tensor, Tensor]:
    r"""Initialisation of Assumption 5.1:
    :math:`U(0) = \alpha \begin{pmatrix}\Theta\Theta^\top & 0\\ 0 & 0\end{pmatrix}`,
    :math:`V(0) = \alpha\, e_D e_D^\top`.

    ``theta`` is a ``(d, k)`` matrix with the two conditions of Assumption 5.1,
    :math:`\|\Theta\Theta^\top\|_F = 1` and :math:`\Theta\Theta^\top\Sigma \neq 0` (automatic for an invertible
    :math:`\Sigma`); the default has :math:`\Theta\Theta^\top = I_d/\sqrt d`. Returns ``(U0, V0)``, each
    ``(D, D)`` in float64. The scale condition under which the flow provably converges is
    :func:`init_scale_bound`.
    """
    alpha = checks.positive_float("alpha", alpha)
    d = task.d
    if theta is None:
        gram = torch.eye(d, dtype=torch.float64) / math.sqrt(d)
    else:
        theta = checks.finite("theta", checks.as_float_tensor("theta", theta).to(torch.float64))
        if theta.ndim != 2 or theta.shape[0] != d:
            raise ValueError(f"theta must have shape ({d}, k), got {tuple(theta.shape)}")
        gram = theta @ theta.T
        norm = float(torch.linalg.matrix_norm(gram))
        if abs(norm - 1.0) > 1e-6:
            raise ValueError(f"theta must satisfy ||theta theta^T||_F = 1, got {norm:.6g}")
        if float(torch.linalg.matrix_norm(gram @ task.covariance)) < 1e-12:
            raise ValueError("theta must satisfy theta theta^T Sigma != 0 (Assumption 5.1): this start is invisible "
                             "to every input")
    U = torch.zeros(task.D, task.D, dtype=torch.float64)
    U[:d, :d] = alpha * gram
    V = torch.zeros(task.D, task.D, dtype=torch.float64)
    V[d, d] = alpha
    return U, V


def init_scale_bound(task: RegressionTask, L: int | None = None) -> float:
    r"""Largest block-initialisation scale covered by Zhang, Frei & Bartlett (2024, Theorem 4.1), which
    Theorem 5.2 inherits: gradient flow from :func:`block_init` converges to :func:`limit_parameters` when

    .. math:: \alpha^2 \sqrt d\, \|\Gamma\|_{\mathrm{op}} < 2, \qquad\text{i.e.}\qquad
        \alpha < \frac{\sqrt 2}{d^{1/4}\, \|\Gamma\|_{\mathrm{op}}^{1/2}},

    with :math:`\Gamma = (1 + \tfrac1L)\Sigma + \tfrac{\operatorname{tr}\Sigma}{L} I_d` for prompts of length ``L``
    (their setting has no label noise) and its infinite-prompt limit :math:`\Gamma = \Sigma` for ``L=None``.
    The power :math:`\tfrac12` of :math:`\|\Gamma\|` is the source's. A symmetry of the flow (inputs scaled by
    :math:`\sqrt c` map the flow from :math:`(c\Sigma, \alpha)` onto the flow from :math:`(\Sigma, \alpha\sqrt c)`,
    sped up and shrunk) makes the *exact* threshold scale with that power; a sufficient condition need not. A
    sufficient condition, not a necessary one. Uses :math:`\Sigma` (the paper's model).
    """
    sigma = task.covariance
    if L is not None:
        L = checks.positive_int("L", L)
        sigma = (1 + 1 / L) * sigma + float(torch.trace(sigma)) / L * torch.eye(task.d, dtype=sigma.dtype)
    norm = float(torch.linalg.matrix_norm(sigma, ord=2))
    if norm == 0:
        raise ValueError("task: the covariance is zero")
    return math.sqrt(2) / (task.d**0.25 * math.sqrt(norm))
