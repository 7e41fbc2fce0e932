r"""Trained runs read against the theory: their distance to the infinite-prompt gradient flow and how every
seed ended.

- :func:`flow_gap`: the distance of trained runs to the infinite-prompt flow from the same start (Theorem 4.3);
- :func:`seed_outcomes`: how every seed ended (diverged, stalled, trained).

Both take a :class:`~softmax_as_linear.engine.sweep.TrainResult` and return small JSON-ready dicts.
Risks are :math:`R = \tfrac12 \mathrm{MSE}`.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from ..core import checks
from ..engine.sweep import TrainResult
from ..theory.flow import balance, infinite_prompt_flow
from ..theory.regression import infinite_prompt_risk, optimal_linear_risk


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
    horizon = float(times[-1]) if horizon is None else checks.positive_float("horizon", horizon)
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


def seed_outcomes(result: TrainResult, tolerance: float = 0.1, tail: float = 0.1) -> dict:
    r"""How every seed ended: diverged, stalled, or trained.

    A run *diverged* when the trainer stopped it (:attr:`TrainResult.diverged`). A run that did not
    diverge *stalled* when its final held-out risk (mean over the last ``tail`` of the records)
    exceeds the best final risk among the seeds at the same ``L`` and activation by more than a
    fraction ``tolerance``; otherwise it *trained*. For reference, the best risk of normalised
    linear attention at each ``L`` (:func:`~softmax_as_linear.theory.regression.optimal_linear_risk`) is returned too.

    Returns ``{"lengths", "seeds", "final": {activation: (S, nL)}, "diverged", "stalled", "trained":
    {activation: (nL,) counts}, "optimal_linear": (nL,)}`` as lists (``final`` is NaN for diverged runs).
    """
    tolerance = checks.positive_float("tolerance", tolerance)
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
