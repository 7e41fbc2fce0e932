r"""Trained runs and flows read against the theory and against each other: the quantities the training chapters
print and test, computed once.

- :func:`flow_gap`: the distance of trained runs to the infinite-prompt flow from the same start (Theorem 4.3);
- :func:`seed_outcomes`: how every seed ended (diverged, stalled, trained);
- :func:`first_time_below`: when a flow's risk comes within a given distance of the noise floor;
- :func:`squared_distance`: the distance of parameters to a reference point, along a flow or at its end;
- :func:`linear_excess`: the exact excess risk of trained linear attention over its optimum along training;
- :func:`per_seed`, :func:`at_optimum`, :func:`seed_difference`, :func:`excess_slope`, :func:`excess_difference`,
  :func:`variation_by_seed`: the seed-by-seed read-outs of the paper-scale result files;
- :func:`final_table`: a sweep's final risks against the references, in standard errors (one seed);
- :func:`sup_interval`: the largest mean gap along a trajectory with an interval that accounts for picking it.

Sweeps are :class:`~softmax_as_linear.engine.sweep.TrainResult`; result files are the dicts of
:mod:`~softmax_as_linear.experiments.paper_figures`. Risks are :math:`R = \tfrac12 \mathrm{MSE}`.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from ..core import checks, stats
from ..engine.sweep import TrainResult
from ..registry import ACTIVATIONS
from ..theory.flow import balance, infinite_prompt_flow
from ..theory.regression import RegressionTask
from ..theory.risks import infinite_prompt_risk, linear_attention_risk, optimal_linear_risk


def flow_gap(result: TrainResult, seed: int | None = None, horizon: float | None = None, max_dt: float = 0.1) -> dict:
    r"""Distance between the trained runs and the infinite-prompt gradient flow from the same start.

    SGD at learning rate ``lr`` on the MSE follows, for small ``lr``, the gradient flow of the
    finite-prompt risk :math:`R_L` at time :math:`t = 2\,\mathrm{lr}\,k`; Theorem 4.3 says that this
    flow approaches the flow :math:`(U_\infty(t), V_\infty(t))` of :math:`R_\infty` as ``L`` grows.
    This integrates the latter (:func:`~softmax_as_linear.theory.flow.infinite_prompt_flow`) from the
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
    out = {"lengths": list(cfg.lengths), "activations": list(cfg.models), "times": times.tolist(),
           "horizon": horizon, "flow_risk": flow["risk"].tolist(), "flow_balance": balance(U_inf, V_inf).tolist(),
           "risk": {}, "distance": {}, "balance": {}, "max_distance": {}}
    for a, activation in enumerate(cfg.models):
        out["risk"][activation] = risk[:, a].tolist()
        out["distance"][activation] = distance[:, a].tolist()
        out["balance"][activation] = balance(U[:, a], V[:, a]).tolist()
        out["max_distance"][activation] = distance[:, a][..., within].max(-1).values.tolist()
    return out


def seed_outcomes(result: TrainResult, tolerance: float = 0.1, tail: float = 0.1) -> dict:
    r"""How every seed ended: diverged, stalled, or trained.

    A run *diverged* when the trainer stopped it (:attr:`~softmax_as_linear.engine.sweep.TrainResult.diverged`). A run
    that did not diverge *stalled* when its final held-out risk (mean over the last ``tail`` of the records)
    exceeds the best final risk among the seeds at the same ``L`` and activation by more than a
    fraction ``tolerance``; otherwise it *trained*. For reference, the best risk of normalised
    linear attention at each ``L`` (:func:`~softmax_as_linear.theory.risks.optimal_linear_risk`) is returned too.

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
    for a, activation in enumerate(cfg.models):
        out["final"][activation] = final[:, :, a].tolist()
        out["diverged"][activation] = result.diverged[:, :, a].sum(0).tolist()
        out["stalled"][activation] = stalled[:, :, a].sum(0).tolist()
        out["trained"][activation] = (len(cfg.seeds) - result.diverged[:, :, a].sum(0)
                                      - stalled[:, :, a].sum(0)).tolist()
    return out


def first_time_below(flow: dict, task: RegressionTask, level: float) -> float:
    r"""First reported time at which a flow's risk is within ``level`` of the noise floor,
    :math:`R_\infty(\theta(t)) - s^2/2 < \text{level}` (``flow`` from
    :func:`~softmax_as_linear.theory.flow.infinite_prompt_flow`); NaN if it never is."""
    level = checks.positive_float("level", level)
    below = np.flatnonzero(np.asarray(flow["risk"]) - task.noise_floor() < level)
    return float(flow["times"][below[0]]) if below.size else float("nan")


def squared_distance(U, V, U_ref, V_ref) -> np.ndarray:
    r""":math:`\|U - U_{ref}\|_F^2 + \|V - V_{ref}\|_F^2`; ``U, V`` ``(..., D, D)`` (a flow's ``(T, D, D)``) ->
    ``(...)``."""
    U, V = np.asarray(U, dtype=float), np.asarray(V, dtype=float)
    U_ref, V_ref = np.asarray(U_ref, dtype=float), np.asarray(V_ref, dtype=float)
    return ((U - U_ref) ** 2).sum((-1, -2)) + ((V - V_ref) ** 2).sum((-1, -2))


def linear_excess(result: TrainResult) -> np.ndarray:
    r"""``(S, nL, T)`` exact excess risk :math:`R_L(U, V) - R^*_{\mathrm{lin}}(L) \ge 0` of every linear run at every
    record (:func:`~softmax_as_linear.theory.risks.linear_attention_risk`, a closed form: no sampling error);
    NaN after a divergence."""
    cfg = result.config
    if "linear" not in cfg.models:
        raise ValueError("result has no linear runs")
    a = cfg.models.index("linear")
    task = cfg.task()
    U, V = (torch.as_tensor(np.asarray(m)[:, :, a], dtype=torch.float64) for m in result.uv())  # (S, nL, T, D, D)
    out = np.full(U.shape[:3], np.nan)
    with torch.no_grad():
        for l, L in enumerate(cfg.lengths):
            finite = torch.isfinite(U[:, l]).all(-1).all(-1) & torch.isfinite(V[:, l]).all(-1).all(-1)
            risk = linear_attention_risk(U[:, l].nan_to_num(), V[:, l].nan_to_num(), L, task)
            out[:, l] = torch.where(finite, risk, torch.nan).numpy() - optimal_linear_risk(L, task)
    return out


def per_seed(data: dict, key: str, seeds) -> np.ndarray:
    """``data[key]`` ``(S, ...)`` for ``seeds``, in their order (a ``ValueError`` naming a seed the file lacks)."""
    missing = [s for s in seeds if s not in data["seeds"]]
    if missing:
        raise ValueError(f"seeds {missing} are not in the file (it has {data['seeds']})")
    return np.asarray(data[key], dtype=float)[[data["seeds"].index(s) for s in seeds]]


def at_optimum(final: dict, seeds=None) -> tuple[np.ndarray, np.ndarray]:
    r"""Per seed, whether trained linear attention ended within one standard error of :math:`R^*_{\mathrm{lin}}(L)` at
    every ``L``, and the excess ``(S, nL)``. Its exact risk has no sampling error; the yardstick is the standard
    error of its risk on the final evaluation's fresh prompts. ``final``: a final-risk file with a final evaluation."""
    seeds = final["seeds"] if seeds is None else list(seeds)
    excess = per_seed(final, "linear_exact_per_seed", seeds) - np.asarray(final["optimal_linear"])
    if np.any(excess < -1e-9):
        raise ValueError("final: an exact linear risk lies below R*_lin(L), which is its minimum")
    return (excess < per_seed(final, "linear_se_per_seed", seeds)).all(1), excess


def seed_difference(a: dict, b: dict, seeds, activation: str = "softmax", level: float = 0.95) -> np.ndarray:
    """``(nL, 3)`` mean over ``seeds`` of the final risk in ``a`` minus that in ``b`` (same seed, same ``L``), with its
    Student-t interval over the seeds: rows ``(mean, low, high)``."""
    checks.one_of("activation", activation, ACTIVATIONS)
    difference = per_seed(a, f"{activation}_per_seed", seeds) - per_seed(b, f"{activation}_per_seed", seeds)
    return np.array([stats.mean_interval(column, level) for column in difference.T])


def excess_slope(final: dict, seeds, activation: str = "softmax") -> tuple[np.ndarray, stats.Slope]:
    """The median over ``seeds`` of the final risk minus the Bayes risk, ``(nL,)``, and its log-log slope in ``L``."""
    checks.one_of("activation", activation, ACTIVATIONS)
    excess = np.median(per_seed(final, f"{activation}_per_seed", seeds), 0) - np.asarray(final["bayes"])
    return excess, stats.loglog_slope(final["lengths"], excess)


def excess_difference(a: dict, b: dict, seeds, activation: str = "softmax") -> tuple[np.ndarray, np.ndarray]:
    r"""``(S, nL)`` distance to the Bayes risk in sweep ``a`` minus that in sweep ``b``, same seed and ``L``
    (:math:`(R_a - R^{\mathrm{Bayes}}_a) - (R_b - R^{\mathrm{Bayes}}_b)`), and a bound on its standard error: the sum of
    the four standard errors (final risks and Bayes estimates), valid whatever their correlations. Positive when
    ``a`` ends further from its Bayes risk. ``a``, ``b``: final-risk files with a final evaluation."""
    checks.one_of("activation", activation, ACTIVATIONS)
    difference = ((per_seed(a, f"{activation}_per_seed", seeds) - np.asarray(a["bayes"]))
                  - (per_seed(b, f"{activation}_per_seed", seeds) - np.asarray(b["bayes"])))
    se = (per_seed(a, f"{activation}_se_per_seed", seeds) + per_seed(b, f"{activation}_se_per_seed", seeds)
          + np.asarray(a["bayes_se"]) + np.asarray(b["bayes_se"]))
    return difference, se


def variation_by_seed(trajectories: dict, key: str, seeds) -> np.ndarray:
    r"""``(S, nL)`` :func:`~softmax_as_linear.core.stats.variation_ratio` of each seed's curve along training (records
    after the first), for ``key`` ``"gap"`` (a parameter-gap file: :math:`\|\theta_{soft} - \theta_{lin}\|^2`),
    ``"softmax"`` or ``"linear"`` (a trajectory file: the risk minus the Bayes risk)."""
    if key == "gap":
        curves = per_seed(trajectories, "gap_per_seed", seeds)
    else:
        checks.one_of("key", key, ("gap", *ACTIVATIONS))
        curves = per_seed(trajectories, f"{key}_per_seed", seeds) - np.asarray(trajectories["bayes"])[:, None]
    return stats.variation_ratio(curves[:, :, 1:])


def final_table(final: dict, seed=None) -> dict:
    r"""One seed's final risks against the references, the read-out of a lecture sweep (Figures 2 and 6).

    Returns arrays over ``L``: ``softmax``, ``linear`` and their standard errors, ``optimal_linear``, ``bayes``,
    ``linear_minus_best`` (:math:`R_{lin} - R^*_{\mathrm{lin}}(L)` in standard errors of the linear risk) and
    ``softmax_minus_linear`` (in units of :math:`\mathrm{se}_{soft} + \mathrm{se}_{lin}`, which bounds the standard
    error of the difference whatever the correlation of the two risks measured on the same prompts).
    """
    seed = final["seeds"][0] if seed is None else seed
    pick = lambda key: per_seed(final, key, [seed])[0]  # noqa: E731
    soft, lin = pick("softmax_per_seed"), pick("linear_per_seed")
    soft_se, lin_se = pick("softmax_se_per_seed"), pick("linear_se_per_seed")
    best = np.asarray(final["optimal_linear"])
    return {"lengths": list(final["lengths"]), "softmax": soft, "linear": lin, "softmax_se": soft_se,
            "linear_se": lin_se, "optimal_linear": best, "bayes": np.asarray(final["bayes"]),
            "linear_minus_best": (lin - best) / lin_se, "softmax_minus_linear": (soft - lin) / (soft_se + lin_se)}


def sup_interval(gaps: dict, name: str = "output") -> dict:
    r"""The largest mean gap along a trajectory, :math:`\max_t \mu_t`, with a simultaneous interval at the level of
    ``gaps`` (from :func:`~softmax_as_linear.theory.stability.trajectory_gaps`, e.g. through
    :func:`~softmax_as_linear.experiments.concentration_figures.concentration_along_training`).

    The interval of the record where the largest sample mean falls ignores that this record was picked for being the
    largest. Here each of the ``T`` records gets its Student-t interval at level :math:`1 - (1 - \text{level})/T`
    (Bonferroni); if all of them cover, :math:`\max_t \mu_t` lies in :math:`[\max_t \text{low}_t, \max_t
    \text{high}_t]`, so that interval covers with probability at least ``level``.

    Returns ``{"mean", "low", "high"}``, each ``(nL,)``.
    """
    checks.one_of("name", name, ("output", "gradient"))
    mean, low, high = (np.asarray(gaps[name][key], dtype=float) for key in ("mean", "low", "high"))  # (nL, T)
    n, level, T = int(gaps["n_prompts"]), float(gaps["level"]), mean.shape[1]
    se = (high - low) / (2 * stats.scipy_stats().t.ppf(0.5 + level / 2, n - 1))
    half = stats.scipy_stats().t.ppf(1 - (1 - level) / (2 * T), n - 1) * se
    return {"mean": mean.max(1), "low": (mean - half).max(1), "high": (mean + half).max(1)}
