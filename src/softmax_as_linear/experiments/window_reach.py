r"""How far trained softmax windows are from the layer's own optimal windows (Chapter 8): a trained sweep's
window trajectory read against :mod:`~softmax_as_linear.experiments.nonlinear_optima`'s :math:`w^*(L)`.

For every length both files hold and every seed, :func:`reach` gives the final window :math:`w_T`, its distance to
the optimum :math:`\log w_T - \log w^*` in units of the optimum's standard error (over replicates), whether the run
still moves (the change of :math:`\log w` over the last quarter of training) and, at that last-quarter rate, how many
more steps it would need to reach :math:`w^*` (infinite when it is not moving towards it). :func:`last_phase_trend`
tests, per run, whether the window still has a trend in the last phase of training (the slope of :math:`\log w`
over the last quarter against the run's own residual noise): a window is said to settle only where it has none.
"""
from __future__ import annotations

import math

import numpy as np


def reach(trained: dict, optima: dict, model: str = "softmax") -> dict:
    """``trained``: a ``nonlinear_<preset>.json`` dict (``trajectories`` with ``steps`` and ``w`` ``(S, nL, nA, T)``);
    ``optima``: a ``nonlinear_optima_<preset>.json`` dict. Returns, over the lengths both hold, ``lengths`` and arrays
    ``(S, n)``: ``final_w``, ``z`` (:math:`(\\log w_T - \\log w^*)/\\mathrm{se}`), ``ratio`` (:math:`w_T / w^*`),
    ``last_quarter_change`` (of :math:`\\log w`), ``steps_to_optimum`` (at the last-quarter rate of
    :math:`\\log w`, as if the window grew geometrically; inf when moving away or not at all),
    ``steps_to_optimum_additive`` (at the last-quarter rate of :math:`w` itself, as if it grew by a fixed amount per
    step, as the four-matrix windows do); and ``optimum_w``, ``optimum_log_w_se`` ``(n,)``."""
    lengths_t = list(trained["config"]["lengths"])
    lengths_o = list(optima["lengths"])
    common = [L for L in lengths_t if L in lengths_o]
    if not common:
        raise ValueError("trained and optima share no prompt length")
    a = list(trained["models"]).index(model)
    steps = np.asarray(trained["trajectories"]["steps"], dtype=float)
    w = np.asarray(trained["trajectories"]["w"], dtype=float)[:, :, a, :]  # (S, nL, T)
    quarter = int(np.searchsorted(steps, 0.75 * steps[-1]))
    summary = optima["summary"]["softmax"]
    out = {k: [] for k in ("final_w", "z", "ratio", "last_quarter_change", "steps_to_optimum",
                           "steps_to_optimum_additive")}
    opt_w, opt_se = [], []
    for L in common:
        i, j = lengths_t.index(L), lengths_o.index(L)
        log_star, se = summary["log_w"][j], summary["log_w_se"][j]
        final = w[:, i, -1]
        with np.errstate(divide="ignore", invalid="ignore"):  # every division: a flat last quarter, a rate of 0
            change = np.log(final) - np.log(w[:, i, quarter])
            rate = change / (steps[-1] - steps[quarter])
            gap = log_star - np.log(final)
            rate_w = (final - w[:, i, quarter]) / (steps[-1] - steps[quarter])
            gap_w = math.exp(log_star) - final
            needed = np.where(rate * gap > 0, gap / rate, math.inf)
            needed_w = np.where(rate_w * gap_w > 0, gap_w / rate_w, math.inf)
            z = (np.log(final) - log_star) / se
        out["final_w"].append(final), out["z"].append(z)
        out["ratio"].append(final / math.exp(log_star)), out["last_quarter_change"].append(change)
        out["steps_to_optimum"].append(needed), out["steps_to_optimum_additive"].append(needed_w)
        opt_w.append(math.exp(log_star)), opt_se.append(se)
    return {"lengths": common, **{k: np.stack(v, 1) for k, v in out.items()}, "optimum_w": np.array(opt_w),
            "optimum_log_w_se": np.array(opt_se), "last_quarter_from_step": int(steps[quarter])}


def last_phase_trend(w, steps, start: float = 0.75, level: float = 0.95) -> dict:
    r"""Whether each run's window still moves in the last phase of training: the least-squares slope of
    :math:`\log w` against the step over the records after ``start`` of training (by default the last quarter, after
    the decay), per run, against its own residual noise.

    ``w``: ``(..., T)`` positive windows recorded at ``steps`` ``(T,)``. Returns arrays ``(...)``: ``slope`` (change of
    :math:`\log w` per 1,000 steps), ``slope_se`` (from the residuals, :math:`n - 2` degrees of freedom, as if they
    were independent: successive records of one run are correlated, so this standard error is if anything too small
    and the test too ready to find a trend), ``t`` (their ratio), ``residual_sd``, ``flat`` (:math:`|t|` below the
    two-sided ``level`` quantile of Student's t with :math:`n - 2` degrees of freedom: no trend found), ``rising`` and
    ``falling`` (a trend found, of that sign); and ``records`` (:math:`n`), ``threshold`` (the quantile), ``from_step``.

    The same test corrected for the records' correlation, as an AR(1) process: ``lag1`` (the residuals' lag-one
    autocorrelation :math:`\rho`, floored at 0 so that the correction never shrinks the standard error),
    ``slope_se_ar1`` (``slope_se`` times :math:`\sqrt{(1+\rho)/(1-\rho)}`, the variance inflation of a mean of an
    AR(1) series), ``dof_ar1`` (the effective number of records :math:`n(1-\rho)/(1+\rho)` less 2, at least 1),
    ``t_ar1``, ``threshold_ar1`` (Student's t quantile at ``dof_ar1``), ``flat_ar1``, ``rising_ar1`` and
    ``falling_ar1``. The correction is approximate (:math:`\rho` is itself estimated from :math:`n` residuals).
    """
    steps, w = np.asarray(steps, dtype=float), np.asarray(w, dtype=float)
    if steps.ndim != 1 or w.shape[-1:] != steps.shape:
        raise ValueError(f"w must end in the records' axis of length {steps.size}, got shape {w.shape}")
    if not 0 <= start < 1:
        raise ValueError(f"start must be in [0, 1), got {start}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if (w <= 0).any():
        raise ValueError("w must be positive")
    keep = steps > steps[0] + start * (steps[-1] - steps[0])
    n = int(keep.sum())
    if n < 3:
        raise ValueError(f"the last phase holds {n} records; a slope and its noise need at least 3")
    x = steps[keep] / 1000.0
    y = np.log(w[..., keep])
    xc = x - x.mean()
    slope = (y * xc).sum(-1) / (xc**2).sum()
    residual = y - y.mean(-1, keepdims=True) - slope[..., None] * xc
    residual_sd = np.sqrt((residual**2).sum(-1) / (n - 2))
    slope_se = residual_sd / math.sqrt((xc**2).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(slope_se > 0, slope / slope_se, np.sign(slope) * math.inf)
    from ..core.stats import scipy_stats

    threshold = float(scipy_stats().t.ppf(0.5 + level / 2, n - 2))
    flat = np.abs(t) < threshold
    denominator = (residual**2).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lag1 = np.where(denominator > 0, (residual[..., 1:] * residual[..., :-1]).sum(-1) / denominator, 0.0)
    lag1 = np.clip(lag1, 0.0, 0.99)
    slope_se_ar1 = slope_se * np.sqrt((1 + lag1) / (1 - lag1))
    dof_ar1 = np.maximum(n * (1 - lag1) / (1 + lag1) - 2, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_ar1 = np.where(slope_se_ar1 > 0, slope / slope_se_ar1, np.sign(slope) * math.inf)
    threshold_ar1 = scipy_stats().t.ppf(0.5 + level / 2, dof_ar1)
    flat_ar1 = np.abs(t_ar1) < threshold_ar1
    ar1 = {"lag1": lag1, "slope_se_ar1": slope_se_ar1, "dof_ar1": dof_ar1, "t_ar1": t_ar1,
           "threshold_ar1": threshold_ar1, "flat_ar1": flat_ar1, "rising_ar1": ~flat_ar1 & (slope > 0),
           "falling_ar1": ~flat_ar1 & (slope < 0)}
    return {**ar1, "slope": slope, "slope_se": slope_se, "t": t, "residual_sd": residual_sd, "flat": flat,
            "rising": ~flat & (slope > 0), "falling": ~flat & (slope < 0), "records": n, "threshold": threshold,
            "from_step": int(steps[keep][0])}
