r"""Steps of preconditioned gradient descent on the prompt's least squares, and the best preconditioners for a task.

On a prompt :math:`(x_i, y_i)_{i \le L}` write :math:`M = \frac1L \sum_i x_i x_i^\top` ``(d, d)`` and
:math:`h = \frac1L \sum_i y_i x_i` ``(d,)``. Gradient descent on the in-context loss
:math:`\ell(w) = \frac1{2L}\sum_i (w^\top x_i - y_i)^2` from :math:`w_0 = 0` with preconditioners
:math:`\Gamma_1, \dots, \Gamma_K` ``(d, d)`` is

.. math:: w_k = w_{k-1} - \Gamma_k \nabla\ell(w_{k-1}) = w_{k-1} + \Gamma_k (h - M w_{k-1}), \qquad \hat y = w_K^\top
   x_q,

so :math:`w_K = B_K h` with :math:`B_0 = 0`, :math:`B_k = B_{k-1} + \Gamma_k (I - M B_{k-1})` (:math:`B_1 = \Gamma_1`,
:math:`B_2 = \Gamma_1 + \Gamma_2 - \Gamma_2 M \Gamma_1`). For the task of
:mod:`~softmax_as_linear.theory.regression` (:math:`w \sim N(0, \tau^2 I)`, label noise :math:`s^2`, prompt inputs of
covariance :math:`P`, query inputs of covariance :math:`Q`), :math:`h = M w + \frac1L X^\top \varepsilon`, and given
the prompt inputs the risk :math:`R = \frac12 \mathbb{E}(\hat y - y_q)^2` is exact:

.. math::
    R(\Gamma \mid X) = \tfrac12\Big[&\tau^2 \operatorname{tr}\big((B_K M - I)^\top Q (B_K M - I)\big) \\
    &+ \tfrac{s^2}{L} \operatorname{tr}(B_K^\top Q B_K M) + s^2\Big].

It depends on the inputs through :math:`M` alone; :func:`pgd_risk` averages it over sampled :math:`M`.

Von Oswald et al. (2023) showed that one linear self-attention layer can implement one step of gradient descent and
that trained multi-layer linear attention behaves like steps of (preconditioned) descent; Ahn, Cheng, Daneshmand &
Sra (NeurIPS 2023) proved that the global minimum of one linear attention layer on this task implements one step of
preconditioned gradient descent and that, for :math:`K` layers, *certain* critical points (within the restricted
parametrisations they study) implement :math:`K` steps with preconditioners fitted to the task; that training reaches
such a point is not part of their theorems. One step with the best
:math:`\Gamma_1` is the best normalised linear attention of one layer, :math:`R^*_{\mathrm{lin}}(L)`
(:func:`~softmax_as_linear.theory.risks.optimal_linear_risk`: its predictor is
:math:`x_q^\top P\Gamma_L^{-1} h`). :func:`best_preconditioners` finds the best :math:`K`-step preconditioners
numerically (a sample-average minimisation over full matrices, scored on independent samples); it knows nothing of
any attention network, so trained networks can be placed against it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import checks, seeding
from .regression import RegressionTask


def pgd_matrix(preconditioners: Tensor, M: Tensor) -> Tensor:
    r""":math:`B_K` with :math:`w_K = B_K h` after the :math:`K` steps of ``preconditioners (K, d, d)`` (module
    docstring), for second moments ``M (..., d, d)``: ``(..., d, d)``."""
    eye = torch.eye(M.shape[-1], dtype=M.dtype, device=M.device)
    B = torch.zeros_like(M)
    for gamma in preconditioners:
        B = B + gamma @ (eye - M @ B)
    return B


def pgd_predict(preconditioners, tokens, query) -> Tensor:
    r"""The prediction :math:`w_K^\top x_q` of :math:`K` preconditioned steps on each prompt.

    ``preconditioners (K, d, d)``, regression tokens ``(..., L, d + 1)`` (inputs then label), query ``(..., d + 1)``
    (its last entry is ignored) -> ``(...)``.
    """
    tokens = checks.as_float_tensor("tokens", tokens)
    gammas = _preconditioners(preconditioners, tokens.shape[-1] - 1).to(tokens)
    x, y = tokens[..., :-1], tokens[..., -1]
    L = tokens.shape[-2]
    M = x.transpose(-1, -2) @ x / L
    h = (x * y.unsqueeze(-1)).sum(-2) / L
    w = (pgd_matrix(gammas, M) @ h.unsqueeze(-1)).squeeze(-1)
    return (w * query[..., :-1].to(tokens)).sum(-1)


def _preconditioners(preconditioners, d: int) -> Tensor:
    gammas = checks.as_float_tensor("preconditioners", preconditioners)
    if gammas.ndim != 3 or gammas.shape[-2:] != (d, d) or gammas.shape[0] < 1:
        raise ValueError(f"preconditioners must have shape (K, {d}, {d}) with K >= 1, got {tuple(gammas.shape)}")
    return checks.finite("preconditioners", gammas)


def sample_second_moments(task: RegressionTask, L: int, n_samples: int, seed: int = 0, stream: str = "pgd_fit",
                          dtype=torch.float64) -> Tensor:
    r"""``n_samples`` independent :math:`M = \frac1L \sum_{i \le L} x_i x_i^\top` of prompt inputs of ``task``, drawn by
    :meth:`~softmax_as_linear.theory.regression.RegressionTask.draw_inputs` from ``stream`` (``"pgd_fit"`` or
    ``"pgd_score"`` of :mod:`~softmax_as_linear.core.seeding`, streams no experiment measures on) of ``seed`` at length
    ``L``: ``(n_samples, d, d)``."""
    L = checks.positive_int("L", L)
    n_samples = checks.int_at_least("n_samples", n_samples, 2)
    generator = seeding.generator(seed, checks.one_of("stream", stream, ("pgd_fit", "pgd_score")), L)
    chunks = []
    for start in range(0, n_samples, 8192):
        X = task.draw_inputs(min(8192, n_samples - start), L, generator).to(dtype)
        chunks.append(X.transpose(-1, -2) @ X / L)
    return torch.cat(chunks)


def conditional_risk(preconditioners: Tensor, M: Tensor, L: int, task: RegressionTask) -> Tensor:
    r""":math:`R(\Gamma \mid X)` of the module docstring for every ``M (n, d, d)``: ``(n,)``, differentiable in the
    preconditioners ``(K, d, d)``."""
    d = task.d
    Q = task.query_covariance.to(M)
    B = pgd_matrix(preconditioners, M)
    E = B @ M - torch.eye(d, dtype=M.dtype, device=M.device)
    bias = (E * (Q @ E)).sum((-1, -2))                # tr(E^T Q E)
    variance = ((Q @ B) * (B @ M)).sum((-1, -2))      # tr(B^T Q B M) = <Q B, B M>
    return 0.5 * (task.task_var * bias + task.noise_var / L * variance + task.noise_var)


def pgd_risk(preconditioners, L: int, task: RegressionTask, n_samples: int = 100_000,
             seed: int = seeding.REFERENCE_SEED) -> tuple[float, float]:
    r"""Risk of :math:`K` preconditioned steps at prompt length ``L``, averaged exactly over :math:`w`, the noise and
    the query and by Monte Carlo over ``n_samples`` prompt inputs (the ``"pgd_score"`` stream of ``seed``):
    ``(estimate, standard_error)``."""
    gammas = _preconditioners(preconditioners, task.d).double()
    M = sample_second_moments(task, L, n_samples, seed, "pgd_score")
    values = conditional_risk(gammas, M, L, task)
    return float(values.mean()), float(values.std() / math.sqrt(values.numel()))


@dataclass(frozen=True)
class BestPreconditioners:
    """The best :math:`K`-step preconditioners found at one prompt length.

    ``preconditioners (K, d, d)``; ``risk`` and ``risk_se``: their risk on independent samples (not those of the fit)
    with its Monte Carlo standard error; ``fit_risk``: the minimised sample average; ``L``, ``steps``."""

    L: int
    steps: int
    preconditioners: Tensor
    risk: float
    risk_se: float
    fit_risk: float


def best_preconditioners(L: int, task: RegressionTask, steps: int = 2, n_samples: int = 100_000,
                         seed: int = seeding.REFERENCE_SEED, iterations: int = 200,
                         full: bool = True) -> BestPreconditioners:
    r"""The preconditioners :math:`\Gamma_1, \dots, \Gamma_K` (full ``(d, d)`` matrices, ``K = steps``) that minimise
    the risk of :math:`K` steps at prompt length ``L``.

    Minimises the average of :func:`conditional_risk` over ``n_samples`` sampled :math:`M` (the ``"pgd_fit"`` stream of
    ``seed``) by L-BFGS, starting from the best scalar steps :math:`\Gamma_k = c_k I`; scores the result on
    ``n_samples`` other samples (the ``"pgd_score"`` stream of ``seed``, :func:`pgd_risk`) so that the reported risk is
    not biased low by the fit. For :math:`K = 1` the minimum is
    :math:`R^*_{\mathrm{lin}}(L)` (tested). With ``full=False`` only the scalar steps are fitted (for isotropic inputs
    the best full matrices are scalar up to sampling error, which Ahn et al.'s analysis leads one to expect; tested).
    """
    L = checks.positive_int("L", L)
    steps = checks.positive_int("steps", steps)
    iterations = checks.positive_int("iterations", iterations)
    M = sample_second_moments(task, L, n_samples, seed, "pgd_fit")
    eye = torch.eye(task.d, dtype=torch.float64)

    def objective(gammas):
        return conditional_risk(gammas, M, L, task).mean()

    # scalar steps first (a few parameters: a good start), then full matrices
    scales = torch.full((steps,), 1.0 / (1 + (task.d + 1) / L), dtype=torch.float64)
    scales[1:] = 0.5 * scales[0]
    scales.requires_grad_(True)
    _minimise([scales], lambda: objective(scales[:, None, None] * eye), iterations)
    gammas = (scales.detach()[:, None, None] * eye).clone().requires_grad_(True)
    if full:
        fit = _minimise([gammas], lambda: objective(gammas), iterations)
    else:
        with torch.no_grad():
            fit = float(objective(gammas))
    gammas = gammas.detach()
    risk, se = pgd_risk(gammas, L, task, n_samples, seed)
    return BestPreconditioners(L, steps, gammas, risk, se, fit)


def _minimise(params, closure_value, iterations: int) -> float:
    optimiser = torch.optim.LBFGS(params, lr=1.0, max_iter=iterations, tolerance_grad=1e-12,
                                  tolerance_change=1e-14, history_size=50, line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        value = closure_value()
        value.backward()
        return value

    optimiser.step(closure)
    with torch.no_grad():
        return float(closure_value())
