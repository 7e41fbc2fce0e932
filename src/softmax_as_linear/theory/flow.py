r"""The infinite-prompt gradient flow, the theory's reference dynamics (Theorem 4.3, Remark 5.3).

- :func:`infinite_prompt_flow`: the gradient flow of the infinite-prompt risk (closed form for Gaussian
  covariates; in the block structure, by quadrature, for the other covariate laws);
- :func:`isotropic_block_flow`: the same flow for :math:`\Sigma = I` from Assumption 5.1, reduced to two numbers
  and integrated by an adaptive solver over long times;
- :func:`drift_asymptotics`: where that flow goes when the risk has no minimiser (uniform covariates);
- :func:`balance`: the conserved quantity :math:`\|U\|_F^2 - \|v\|^2` of the linear-attention flows.

Trained runs are read against this flow in :mod:`~softmax_as_linear.experiments.analysis`.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core import checks
from ..registry import ACTIVATIONS
from . import covariates
from .limit_model import block_infinite_prompt_risk, is_block
from .regression import RegressionTask, infinite_prompt_risk_unchecked


def infinite_prompt_flow(U0, V0, task: RegressionTask, times, *, max_dt: float = 0.01,
                         activation: str = "softmax") -> dict[str, np.ndarray]:
    r"""Gradient flow :math:`\dot\theta = -\nabla R_\infty(\theta)` from ``(U0, V0)`` (Theorem 4.3's reference dynamics).

    Integrated with the classical Runge-Kutta scheme (step at most ``max_dt``), with autograd gradients, in
    float64, on the closed form :func:`~softmax_as_linear.theory.regression.infinite_prompt_risk` (Gaussian
    covariates, or normalised linear attention, ``activation="linear"``, for every law). For softmax attention
    with a non-Gaussian covariate law the risk is
    :func:`~softmax_as_linear.theory.limit_model.block_infinite_prompt_risk`, exact in the block structure of
    Assumption 5.1 (:math:`a_y = 0`, :math:`v_x = 0`), which the flow keeps: ``(U0, V0)`` must have it.

    Args:
        U0, V0: ``(D, D)`` initial parameters (or batched ``(..., D, D)``).
        times: increasing non-negative times at which to report the state.
    Returns:
        ``{"times": (T,), "U": (T, ..., D, D), "V": (T, ..., D, D), "risk": (T, ...)}``.
    """
    U = checks.square("U0", checks.as_float_tensor("U0", U0).double(), task.D).clone()
    V = checks.square("V0", checks.as_float_tensor("V0", V0).double(), task.D).clone()
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size == 0 or np.any(np.diff(times) < 0) or times[0] < 0:
        raise ValueError("times must be a non-empty increasing sequence of non-negative numbers")
    max_dt = checks.positive_float("max_dt", max_dt)
    checks.one_of("activation", activation, ACTIVATIONS)
    d = task.d
    if activation == "linear" or task.law == "gaussian":
        def risk(U, V):
            return infinite_prompt_risk_unchecked(U, V, task)
    else:
        if not is_block(U, V, d):
            raise ValueError(f"U0: the infinite-prompt flow of softmax attention with {task.law} covariates is computed "
                             "in the block structure of Assumption 5.1 (a_y = U0[d, :d] = 0 and v_x = V0[d, :d] = 0)")

        def risk(U, V):
            return block_infinite_prompt_risk(U[..., :d, :d], V[..., d, d], task)

    def grad(U, V):
        U = U.detach().requires_grad_(True)
        V = V.detach().requires_grad_(True)
        gU, gV = torch.autograd.grad(risk(U, V).sum(), (U, V))
        return gU, gV

    out_U, out_V, out_risk = [], [], []
    t = 0.0
    for target in times:
        while t < target - 1e-12:
            h = min(max_dt, target - t)
            k1 = grad(U, V)
            k2 = grad(U - h / 2 * k1[0], V - h / 2 * k1[1])
            k3 = grad(U - h / 2 * k2[0], V - h / 2 * k2[1])
            k4 = grad(U - h * k3[0], V - h * k3[1])
            U = U - h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            V = V - h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
            t += h
        out_U.append(U.clone())
        out_V.append(V.clone())
        with torch.no_grad():
            out_risk.append(risk(U, V))
    return {"times": times, "U": torch.stack(out_U).numpy(), "V": torch.stack(out_V).numpy(),
            "risk": torch.stack(out_risk).numpy()}


def isotropic_block_flow(task: RegressionTask, alpha: float, times, *, rtol: float = 1e-10) -> dict[str, np.ndarray]:
    r"""The infinite-prompt flow for :math:`\Sigma = I` from Assumption 5.1 with :math:`\Theta\Theta^\top = I_d/\sqrt d`,
    reduced to :math:`A_x = a(t) I` and :math:`v_y(t)` (the flow keeps :math:`A_x` a multiple of :math:`I`, by the symmetry
    of the coordinates), and integrated by an adaptive stiff solver (LSODA) so that long times are cheap:

    .. math:: \dot a = -\tfrac1d\,\partial_a R_\infty(aI, v_y), \qquad \dot v_y = -\partial_{v_y} R_\infty(aI, v_y),

    with :math:`R_\infty` of :func:`~softmax_as_linear.theory.limit_model.block_infinite_prompt_risk` (any covariate
    law). The same trajectory as :func:`infinite_prompt_flow` from :func:`~softmax_as_linear.theory.regression.block_init`.
    Returns ``{"times", "a", "v", "risk"}`` arrays.
    """
    from scipy.integrate import solve_ivp

    if not task._isotropic:
        raise ValueError("task: the reduced flow needs Sigma = I")
    alpha = checks.positive_float("alpha", alpha)
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size == 0 or np.any(np.diff(times) <= 0) or times[0] < 0:
        raise ValueError("times must be an increasing sequence of non-negative numbers")
    d = task.d
    eye = torch.eye(d, dtype=torch.float64)

    def risk(a, v):
        return block_infinite_prompt_risk(a * eye, v, task)

    def rhs(_, y):
        a = torch.tensor(y[0], dtype=torch.float64, requires_grad=True)
        v = torch.tensor(y[1], dtype=torch.float64, requires_grad=True)
        grad_a, grad_v = torch.autograd.grad(risk(a, v), (a, v))
        return [-float(grad_a) / d, -float(grad_v)]

    solution = solve_ivp(rhs, (0.0, float(times[-1])), [alpha / math.sqrt(d), alpha], method="LSODA",
                         t_eval=times, rtol=rtol, atol=1e-14)
    if not solution.success:
        raise RuntimeError(f"the reduced flow failed: {solution.message}")
    a, v = solution.y
    with torch.no_grad():
        values = [float(risk(torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)))
                  for x, y in zip(a, v)]
    return {"times": times, "a": a, "v": v, "risk": np.array(values)}


def drift_constant(task: RegressionTask) -> float:
    r"""The constant :math:`K` of the excess risk :math:`K a^4` along the valley of :math:`R_\infty` (course's derivation).

    In the block structure with :math:`\Sigma = I` and :math:`A_x = aI`, :math:`R_\infty - s^2/2 =
    \tfrac{\tau^2 d}{2}\mathbb{E}[(v_y k'_\lambda(a\xi) - \xi)^2]`. With :math:`k'_\lambda(b) = b + \tfrac{\kappa_4 - 3}{6} b^3 + O(b^5)`,
    the best :math:`v_y \approx 1/a` leaves the part of :math:`\xi^3` orthogonal to :math:`\xi`:

    .. math:: \min_{v_y} R_\infty - \tfrac{s^2}{2} = K a^4 + O(a^6), \qquad
        K = \tfrac{\tau^2 d}{2} \Big(\tfrac{\kappa_4 - 3}{6}\Big)^2 \big(\mathbb{E}\xi^6 - (\mathbb{E}\xi^4)^2\big).

    :math:`K = 0` for the Gaussian law (Lemma 2.1) and for the Rademacher law (:math:`\xi^3 = \xi`, and
    :math:`v_y \tanh a = 1` is an exact minimiser); :math:`K = 0.0123` for uniform covariates at the paper's task.
    """
    kappa4, kappa6 = covariates.moment(task.law, 4), covariates.moment(task.law, 6)
    return 0.5 * task.task_var * task.d * ((kappa4 - 3) / 6) ** 2 * (kappa6 - kappa4**2)


def drift_asymptotics(task: RegressionTask, times) -> dict[str, np.ndarray]:
    r"""Where the infinite-prompt softmax flow goes when :math:`R_\infty` has no minimiser (course's derivation).

    For :math:`\Sigma = I` and the block start of Assumption 5.1, :math:`A_x = a(t) I`. Once the flow has
    reached the valley :math:`v_y \approx 1/a` of :math:`R_\infty`, it slides along it: the valley, a curve
    :math:`a \mapsto (a, v^*(a))` in the metric :math:`d\,da^2 + dv^2` of the flow, has length element
    :math:`\sqrt{d + v^{*\prime}(a)^2} \approx a^{-2}` and height :math:`K a^4` (:func:`drift_constant`), so
    :math:`\dot a \approx -4K a^3 \cdot a^4`, and

    .. math:: a(t) \approx (24 K t)^{-1/6}, \qquad v_y(t) \approx (24 K t)^{1/6}, \qquad
        R_\infty - \tfrac{s^2}{2} \approx K (24 K t)^{-2/3}.

    The parameters leave every ball: the flow has no limit, while its risk tends to :math:`s^2/2`.
    Asymptotic in :math:`t` (a heuristic slow-manifold argument, checked against the integrated flow in the
    tests and in Chapter 6). Returns ``{"times", "a", "v", "excess"}`` arrays; ``ValueError`` unless
    :math:`\Sigma = I` and :math:`K > 0`.
    """
    if not task._isotropic:
        raise ValueError("task: the drift asymptotics are derived for Sigma = I")
    K = drift_constant(task)
    if K <= 0:
        raise ValueError(f"task: {task.law} covariates give K = 0: R_inf has a minimiser and the flow converges")
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or np.any(times <= 0):
        raise ValueError("times must be a sequence of positive numbers")
    a = (24 * K * times) ** (-1 / 6)
    return {"times": times, "a": a, "v": 1 / a, "excess": K * a**4, "K": K, "norm_A": a * math.sqrt(task.d)}


def balance(U, V) -> torch.Tensor:
    r"""The balance :math:`b = \|U\|_F^2 - \|v\|^2` with :math:`v` the last row of V; ``(..., D, D)`` -> ``(...)``.

    :math:`R_\infty` and the risk of linear attention are unchanged by :math:`(U, v) \mapsto (cU, v/c)`,
    so their gradient flows conserve :math:`b`.
    """
    U, V = torch.as_tensor(U), torch.as_tensor(V)
    return (U**2).sum((-1, -2)) - (V[..., -1, :] ** 2).sum(-1)
