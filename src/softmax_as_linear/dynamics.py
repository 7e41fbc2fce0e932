r"""The theory's training dynamics, and trained runs read against them.

- :func:`infinite_prompt_flow`: the gradient flow of the infinite-prompt risk (Theorem 4.3's reference);
- :func:`flow_gap`: the distance of trained runs to that flow;
- :func:`balance`: the conserved quantity :math:`\|U\|_F^2 - \|v\|^2` of the linear-attention flows;
- :func:`seed_outcomes`: how every seed ended (is training stable?).

The last two take a :class:`~softmax_as_linear.sweep.TrainResult` and return small JSON-ready
dicts, like :mod:`~softmax_as_linear.experiments`. Risks are :math:`R = \tfrac12 \mathrm{MSE}`.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from . import _checks
from .icl import RegressionTask, infinite_prompt_risk, infinite_prompt_risk_unchecked, optimal_linear_risk
from .sweep import TrainResult


def infinite_prompt_flow(U0, V0, task: RegressionTask, times, *, max_dt: float = 0.01) -> dict[str, np.ndarray]:
    r"""Gradient flow :math:`\dot\theta = -\nabla R_\infty(\theta)` from ``(U0, V0)`` (Theorem 4.3's reference dynamics).

    Integrated with the classical Runge-Kutta scheme (step at most ``max_dt``) on the closed form
    :func:`~softmax_as_linear.icl.infinite_prompt_risk`, with autograd gradients, in float64.

    Args:
        U0, V0: ``(D, D)`` initial parameters (or batched ``(..., D, D)``).
        times: increasing non-negative times at which to report the state.
    Returns:
        ``{"times": (T,), "U": (T, ..., D, D), "V": (T, ..., D, D), "risk": (T, ...)}``.
    """
    U = _checks.square("U0", _checks.as_float_tensor("U0", U0).double(), task.D).clone()
    V = _checks.square("V0", _checks.as_float_tensor("V0", V0).double(), task.D).clone()
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size == 0 or np.any(np.diff(times) < 0) or times[0] < 0:
        raise ValueError("times must be a non-empty increasing sequence of non-negative numbers")
    max_dt = _checks.positive_float("max_dt", max_dt)

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


def flow_gap(result: TrainResult, seed: int | None = None, horizon: float | None = None, max_dt: float = 0.1) -> dict:
    r"""Distance between the trained runs and the infinite-prompt gradient flow from the same start.

    SGD at learning rate ``lr`` on the MSE follows, for small ``lr``, the gradient flow of the
    finite-prompt risk :math:`R_L` at time :math:`t = 2\,\mathrm{lr}\,k`; Theorem 4.3 says that this
    flow approaches the flow :math:`(U_\infty(t), V_\infty(t))` of :math:`R_\infty` as ``L`` grows.
    This integrates the latter (:func:`infinite_prompt_flow`) from the
    sweep's common initialisation and compares, at every record,

    .. math:: \delta_L(t) = \|U_L(t) - U_\infty(t)\|_F^2 + \|V_L(t) - V_\infty(t)\|_F^2 .

    ``max_distance`` is :math:`\sup_{t \le T} \delta_L(t)` over the horizon :math:`T` = ``horizon``
    (default: the whole run); Theorem 4.3 controls it on every finite horizon, not as :math:`t \to \infty`.
    Also returned is the *balance* :math:`b = \|U\|_F^2 - \|v\|^2` (:math:`v` the last row of
    :math:`V`): :math:`R_\infty` and the risk of linear attention are unchanged by
    :math:`(U, v) \mapsto (cU, v/c)`, so their gradient flows conserve :math:`b`; softmax attention at
    finite ``L`` is not invariant, and its :math:`b` drifts.

    The sweep must use the ``"uv"`` parametrisation (the flow lives in :math:`(U, V)`).

    Returns ``{"lengths", "activations", "times" (T,), "horizon", "flow_risk" (T,), "flow_balance" (T,),
    "risk", "distance", "balance": {activation: (nL, T)}, "max_distance": {activation: (nL,)}}`` as
    lists; ``risk`` is :math:`R_\infty` along each run. Records after a divergence are NaN.
    """
    cfg = result.config
    if cfg.parametrisation != "uv":
        raise ValueError("result must come from a sweep with parametrisation 'uv' (the flow lives in (U, V))")
    seed = cfg.seeds[0] if seed is None else seed
    if seed not in cfg.seeds:
        raise ValueError(f"seed={seed} is not among the sweep's seeds {cfg.seeds}")
    s = cfg.seeds.index(seed)
    task = cfg.task()
    U, V = (torch.from_numpy(np.asarray(m[s])) for m in result.uv())  # (nL, nA, T, D, D)
    flow = infinite_prompt_flow(U[0, 0, 0], V[0, 0, 0], task, result.times, max_dt=max_dt)
    U_inf, V_inf = torch.from_numpy(flow["U"]), torch.from_numpy(flow["V"])  # (T, D, D)
    distance = ((U - U_inf) ** 2).sum((-1, -2)) + ((V - V_inf) ** 2).sum((-1, -2))  # (nL, nA, T)
    with torch.no_grad():
        risk = infinite_prompt_risk(U.nan_to_num(), V.nan_to_num(), task)
    risk = torch.where(torch.isnan(distance), torch.nan, risk)
    times = result.times
    horizon = float(times[-1]) if horizon is None else _checks.positive_float("horizon", horizon)
    within = torch.from_numpy(times <= horizon + 1e-12)
    out = {"lengths": list(cfg.lengths), "activations": list(cfg.activations), "times": times.tolist(),
           "horizon": horizon, "flow_risk": flow["risk"].tolist(), "flow_balance": balance(U_inf, V_inf).tolist(),
           "risk": {}, "distance": {}, "balance": {}, "max_distance": {}}
    for a, activation in enumerate(cfg.activations):
        out["risk"][activation] = risk[:, a].tolist()
        out["distance"][activation] = distance[:, a].tolist()
        out["balance"][activation] = balance(U[:, a], V[:, a]).tolist()
        out["max_distance"][activation] = distance[:, a][..., within].max(-1).values.tolist()
    return out


def balance(U, V) -> torch.Tensor:
    r"""The balance :math:`b = \|U\|_F^2 - \|v\|^2` with :math:`v` the last row of V; ``(..., D, D)`` -> ``(...)``.

    :math:`R_\infty` and the risk of linear attention are unchanged by :math:`(U, v) \mapsto (cU, v/c)`,
    so their gradient flows conserve :math:`b`.
    """
    U, V = torch.as_tensor(U), torch.as_tensor(V)
    return (U**2).sum((-1, -2)) - (V[..., -1, :] ** 2).sum(-1)


def seed_outcomes(result: TrainResult, tolerance: float = 0.1, tail: float = 0.1) -> dict:
    r"""How every seed ended: diverged, stalled, or trained.

    A run *diverged* when the trainer stopped it (:attr:`TrainResult.diverged`). A run that did not
    diverge *stalled* when its final held-out risk (mean over the last ``tail`` of the records)
    exceeds the best final risk among the seeds at the same ``L`` and activation by more than a
    fraction ``tolerance``; otherwise it *trained*. For reference, the best risk of normalised
    linear attention at each ``L`` (:func:`~softmax_as_linear.icl.optimal_linear_risk`) is returned too.

    Returns ``{"lengths", "seeds", "final": {activation: (S, nL)}, "diverged", "stalled", "trained":
    {activation: (nL,) counts}, "optimal_linear": (nL,)}`` as lists (``final`` is NaN for diverged runs).
    """
    tolerance = _checks.positive_float("tolerance", tolerance)
    if not 0 < tail <= 1:
        raise ValueError(f"tail must lie in (0, 1], got {tail!r}")
    cfg = result.config
    k = max(1, int(round(tail * result.steps.size)))
    with warnings.catch_warnings():  # all-NaN slices (diverged runs) are expected here
        warnings.simplefilter("ignore", RuntimeWarning)
        final = np.where(result.diverged, np.nan, np.nanmean(result.eval_risk[..., -k:], axis=-1))  # (S, nL, nA)
        best = np.nanmin(final, axis=0, keepdims=True)  # (1, nL, nA)
    stalled = ~result.diverged & (final > (1 + tolerance) * best)
    task = cfg.task()
    out = {"lengths": list(cfg.lengths), "seeds": list(cfg.seeds), "tolerance": tolerance,
           "optimal_linear": [optimal_linear_risk(L, task) for L in cfg.lengths],
           "final": {}, "diverged": {}, "stalled": {}, "trained": {}}
    for a, activation in enumerate(cfg.activations):
        out["final"][activation] = final[:, :, a].tolist()
        out["diverged"][activation] = result.diverged[:, :, a].sum(0).tolist()
        out["stalled"][activation] = stalled[:, :, a].sum(0).tolist()
        out["trained"][activation] = (len(cfg.seeds) - result.diverged[:, :, a].sum(0) - stalled[:, :, a].sum(0)).tolist()
    return out
