r"""The infinite-prompt gradient flow, the theory's reference dynamics (Theorem 4.3, Remark 5.3).

- :func:`infinite_prompt_flow`: the gradient flow of the closed-form infinite-prompt risk;
- :func:`balance`: the conserved quantity :math:`\|U\|_F^2 - \|v\|^2` of the linear-attention flows.

Trained runs are read against this flow in :mod:`~softmax_as_linear.experiments.analysis`.
"""
from __future__ import annotations

import numpy as np
import torch

from ..core import checks
from .regression import RegressionTask, infinite_prompt_risk_unchecked


def infinite_prompt_flow(U0, V0, task: RegressionTask, times, *, max_dt: float = 0.01) -> dict[str, np.ndarray]:
    r"""Gradient flow :math:`\dot\theta = -\nabla R_\infty(\theta)` from ``(U0, V0)`` (Theorem 4.3's reference dynamics).

    Integrated with the classical Runge-Kutta scheme (step at most ``max_dt``) on the closed form
    :func:`~softmax_as_linear.theory.regression.infinite_prompt_risk`, with autograd gradients, in float64.

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

    def grad(U, V):
        U = U.detach().requires_grad_(True)
        V = V.detach().requires_grad_(True)
        gU, gV = torch.autograd.grad(infinite_prompt_risk_unchecked(U, V, task).sum(), (U, V))
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
            out_risk.append(infinite_prompt_risk_unchecked(U, V, task))
    return {"times": times, "U": torch.stack(out_U).numpy(), "V": torch.stack(out_V).numpy(),
            "risk": torch.stack(out_risk).numpy()}


def balance(U, V) -> torch.Tensor:
    r"""The balance :math:`b = \|U\|_F^2 - \|v\|^2` with :math:`v` the last row of V; ``(..., D, D)`` -> ``(...)``.

    :math:`R_\infty` and the risk of linear attention are unchanged by :math:`(U, v) \mapsto (cU, v/c)`,
    so their gradient flows conserve :math:`b`.
    """
    U, V = torch.as_tensor(U), torch.as_tensor(V)
    return (U**2).sum((-1, -2)) - (V[..., -1, :] ** 2).sum(-1)
