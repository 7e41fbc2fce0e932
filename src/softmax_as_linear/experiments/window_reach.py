r"""How far trained softmax windows are from the layer's own optimal windows (Chapter 8): a trained sweep's
window trajectory read against :mod:`~softmax_as_linear.experiments.nonlinear_optima`'s :math:`w^*(L)`.

For every length both files hold and every seed, :func:`reach` gives the final window :math:`w_T`, its distance to
the optimum :math:`\log w_T - \log w^*` in units of the optimum's standard error (over replicates), whether the run
still moves (the change of :math:`\log w` over the last quarter of training) and, at that last-quarter rate, how many
more steps it would need to reach :math:`w^*` (infinite when it is not moving towards it).
"""
from __future__ import annotations

import math

import numpy as np


def reach(trained: dict, optima: dict, model: str = "softmax") -> dict:
    """``trained``: a ``nonlinear_<preset>.json`` dict (``trajectories`` with ``steps`` and ``w`` ``(S, nL, nA, T)``);
    ``optima``: a ``nonlinear_optima_<preset>.json`` dict. Returns, over the lengths both hold, ``lengths`` and arrays
    ``(S, n)``: ``final_w``, ``z`` (:math:`(\\log w_T - \\log w^*)/\\mathrm{se}`), ``ratio`` (:math:`w_T / w^*`),
    ``last_quarter_change`` (of :math:`\\log w`), ``steps_to_optimum`` (at the last-quarter rate; inf when moving
    away or not at all); and ``optimum_w``, ``optimum_log_w_se`` ``(n,)``."""
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
    out = {k: [] for k in ("final_w", "z", "ratio", "last_quarter_change", "steps_to_optimum")}
    opt_w, opt_se = [], []
    for L in common:
        i, j = lengths_t.index(L), lengths_o.index(L)
        log_star, se = summary["log_w"][j], summary["log_w_se"][j]
        final = w[:, i, -1]
        change = np.log(final) - np.log(w[:, i, quarter])
        rate = change / (steps[-1] - steps[quarter])
        gap = log_star - np.log(final)
        with np.errstate(divide="ignore", invalid="ignore"):
            needed = np.where(rate * gap > 0, gap / rate, math.inf)
        out["final_w"].append(final), out["z"].append((np.log(final) - log_star) / se)
        out["ratio"].append(final / math.exp(log_star)), out["last_quarter_change"].append(change)
        out["steps_to_optimum"].append(needed)
        opt_w.append(math.exp(log_star)), opt_se.append(se)
    return {"lengths": common, **{k: np.stack(v, 1) for k, v in out.items()}, "optimum_w": np.array(opt_w),
            "optimum_log_w_se": np.array(opt_se), "last_quarter_from_step": int(steps[quarter])}
