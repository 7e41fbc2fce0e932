r"""The precision of Chapter 8's optima: the bias of a sample-average optimum's window checked on fitting sets several
times larger, and the held-out risk profiled over the window, for
:mod:`~softmax_as_linear.experiments.nonlinear_optima`.

The minimiser of a finite set's mean loss is a biased estimate of the population minimiser, by :math:`O(1/n)` and the
same for every replicate, which the replicates' standard error does not contain: :func:`pooled_fits` refits on the
union of several replicates' sets, and :func:`held_out_profile` minimises the held-out risk over a grid of windows,
whose minimiser carries neither the fitting sets' first-order noise nor that bias; :func:`precision` reads both
against the replicates' :math:`\log w^*`.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..core import seeding
from ..theory.attention_optimum import CHUNK_TOKENS, Prompts, conditional_losses, fit, fit_at_window, window_hessian


def replicate_mean_se(values) -> tuple[float, float]:
    """Mean and standard error over replicates (NaN standard error for one replicate)."""
    x = np.asarray(values, dtype=float)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")


def bias_bounds(optima: dict, level: float = 0.95) -> dict[int, float]:
    r"""The largest small-set bias of the replicates' :math:`\log w^*` that the pooled refits allow, per length of the
    precision table of ``optima`` (a ``nonlinear_optima_<preset>.json`` result): refits on sets :math:`g` times larger
    shift :math:`\log w^*` by :math:`(1/g - 1)` times the bias (an :math:`O(1/n)` bias), so the bias is
    :math:`g/(g-1)` times the shift, bounded over the shift's ``level`` interval (Student's :math:`t` with one degree
    of freedom fewer than the groups). A length whose bound exceeds its replicates' standard error of
    :math:`\log w^*` is one where the replicates' band does not contain what the check allows."""
    from ..core.stats import scipy_stats

    bounds = {}
    for row in (optima.get("precision") or {}).get("table", []):
        pooled = row["pooled"]
        g, groups = len(pooled["members"][0]), len(pooled["shifts"])
        t = float(scipy_stats().t.ppf(0.5 + level / 2, groups - 1))
        widest = max(abs(pooled["shift"] + k * t * pooled["shift_se"]) for k in (-1, 1))
        bounds[int(row["length"])] = g / (g - 1) * widest
    return bounds


def pooled_fits(records: list[dict], group: int) -> dict:
    r"""The small-set bias of :math:`\log w^*`, checked on sets ``group`` times larger: the softmax layer refitted on
    the union of the fitting prompts of each ``group`` consecutive replicates (the last incomplete group left out),
    from the mean of their weights, without the Newton step. The minimiser of a finite set's mean loss is biased by
    :math:`b/n + O(n^{-2})`, the same for every replicate, which the replicates' standard error does not contain; on
    the pooled set it is :math:`b/(gn)`, so ``shift`` (pooled minus the mean of its members' :math:`\log w^*`) is
    :math:`-b(g-1)/(gn)` up to the second-order noise left (paired: the same prompts). Returns ``group``, ``members``,
    per group ``log_w``, ``members_log_w``, ``shift``, ``gradient_norm``, ``iterations``, and ``seconds``."""
    begin = time.monotonic()
    out = {"group": group, "members": [], "log_w": [], "members_log_w": [], "shift": [], "gradient_norm": [],
           "iterations": []}
    for first in range(0, len(records) - group + 1, group):
        members = list(range(first, first + group))
        sets = [records[k]["softmax"]["_fitting"] for k in members]
        union = Prompts(torch.cat([p.tokens for p in sets]), torch.cat([p.query for p in sets]),
                        torch.cat([p.target for p in sets]))
        theta0 = np.mean([records[k]["softmax"]["theta"] for k in members], axis=0)
        result = fit("softmax", union, theta0, newton=False)
        del union
        own = float(np.mean([math.log(records[k]["softmax"]["w"]) for k in members]))
        out["members"].append(members)
        out["log_w"].append(math.log(result.window))
        out["members_log_w"].append(own)
        out["shift"].append(math.log(result.window) - own)
        out["gradient_norm"].append(result.gradient_norm)
        out["iterations"].append(result.iterations)
    out["seconds"] = time.monotonic() - begin
    return out


def scoring_set(task, n: int, L: int, queries: int,
                generator: torch.Generator) -> tuple[Prompts, torch.Tensor, torch.Tensor]:
    """``n`` prompts of length ``L`` with ``queries`` query inputs each and their noise-free targets, for
    :func:`~softmax_as_linear.theory.attention_optimum.conditional_losses`: the prompts (drawn as
    :meth:`~softmax_as_linear.theory.attention_optimum.Prompts.draw` does, keeping each prompt's coefficients), then
    the query inputs ``(n, q, d)`` from the same generator, and :math:`f_a` at them ``(n, q)``."""
    chunk, parts = max(1, CHUNK_TOKENS // L), []
    for first in range(0, n, chunk):
        parts.append(task.sample(min(chunk, n - first), L, generator, dtype=torch.float64))
    prompts = Prompts(torch.cat([b.tokens for b in parts]), torch.cat([b.query for b in parts]),
                      torch.cat([b.target for b in parts]))
    a = torch.cat([b.w for b in parts])
    x = task.draw_inputs((n, queries), generator, torch.float64)
    return prompts, x, task.function(a, x)


def _quadratic_minimum(u: np.ndarray, values: np.ndarray) -> float:
    """The minimiser of the least-squares parabola through ``(u, values)``; NaN where it opens downwards."""
    b2, b1, _ = np.polyfit(u, values, 2)
    return float(-b1 / (2 * b2)) if b2 > 0 else float("nan")


def held_out_profile(task, records: list[dict], L: int, spec: dict, center: float, spread: float,
                     first_seed: int) -> dict:
    r"""The held-out risk of the softmax layer profiled over :math:`\log w`, the other weights refitted at each window:
    on a grid of ``spec["points"]`` values of :math:`\log w` around ``center`` (step ``spread``, the replicates'
    standard deviation of :math:`\log w^*`, clipped to ``[min_step, max_step]``), for each of the first
    ``spec["replicates"]`` replicates the other weights are fitted on its fitting prompts
    (:func:`~softmax_as_linear.theory.attention_optimum.fit_at_window` to ``spec["gtol"]``, Newton steps with the
    Hessian at the replicate's optimum, from that optimum at the middle point, outwards from each inner neighbour's
    weights) and scored on as many fresh prompts (stream ``"analysis"`` of its seed, ``first_seed + k`` for replicate
    ``k``) with the conditional expectation of the loss over ``spec["queries"]`` queries per prompt
    (:func:`~softmax_as_linear.theory.attention_optimum.conditional_losses`). To first order the fitting sets' noise
    moves the held-out profile's minimiser not at all (it enters the held-out risk at second order), so the minimiser
    of the replicates' mean profile (the least-squares parabola's) carries neither the fitting sets' first-order noise
    nor the in-sample minimum's bias. Returns the ``grid``; per replicate and grid point ``held_out`` ``(K, G)``, its
    ``held_out_se`` over the prompts, ``in_sample`` (the fitting set's mean loss, whose minimiser is the replicate's
    :math:`\log w^*`), ``gradient_norm`` and ``iterations``; ``log_w`` (the mean profile's minimiser), ``log_w_se``
    (jackknife over replicates), ``inside`` (within the grid), the per-replicate minimisers of both profiles, and
    ``seconds``."""
    begin = time.monotonic()
    K, G, q = min(spec["replicates"], len(records)), spec["points"], spec["queries"]
    step = min(max(spread, spec["min_step"]), spec["max_step"])
    u = step * (np.arange(G) - (G - 1) / 2)
    grid = center + u
    out = {key: [] for key in ("held_out", "held_out_se", "in_sample", "gradient_norm", "iterations")}
    for k in range(K):
        fitting, theta = records[k]["softmax"]["_fitting"], np.asarray(records[k]["softmax"]["theta"])
        scoring, x, f = scoring_set(task, fitting.n, L, q, seeding.generator(first_seed + k, "analysis", L))
        rows = {key: [None] * G for key in out}
        middle = (G - 1) // 2
        starts = {middle: theta}
        hessian = window_hessian(fitting, theta)
        for j in sorted(range(G), key=lambda j: abs(j - middle)):  # outwards, each from its inner neighbour's weights
            result = fit_at_window(fitting, float(grid[j]), starts[j], gtol=spec["gtol"], hessian=hessian)
            starts[j - 1 if j <= middle else j + 1] = result.theta
            if j == middle:
                starts[j + 1] = result.theta
            held = conditional_losses("softmax", result.theta, scoring, x, f, task.noise_var).numpy()
            rows["held_out"][j] = float(held.mean())
            rows["held_out_se"][j] = float(held.std(ddof=1) / math.sqrt(held.size))
            rows["in_sample"][j] = result.risk
            rows["gradient_norm"][j] = result.gradient_norm
            rows["iterations"][j] = result.iterations
        for key in out:
            out[key].append(rows[key])
    held = np.asarray(out["held_out"])
    log_w = center + _quadratic_minimum(u, held.mean(0))
    leave_one_out = np.array([_quadratic_minimum(u, np.delete(held, k, 0).mean(0)) for k in range(K)]) if K > 1 \
        else np.array([np.nan])
    jackknife = float(math.sqrt((K - 1) / K * ((leave_one_out - leave_one_out.mean()) ** 2).sum())) if K > 1 \
        else float("nan")
    return {"grid": grid.tolist(), "replicates": K, "queries": q, **out, "log_w": log_w, "log_w_se": jackknife,
            "w": math.exp(log_w) if math.isfinite(log_w) else float("nan"),
            "inside": bool(grid[0] <= log_w <= grid[-1]),
            "per_replicate_held_out": [center + _quadratic_minimum(u, row) for row in held],
            "per_replicate_in_sample": [center + _quadratic_minimum(u, np.asarray(row)) for row in out["in_sample"]],
            "seconds": time.monotonic() - begin}


def precision(sweep: dict, summary: dict, lengths) -> dict | None:
    r"""The checks of the softmax layer's :math:`\log w^*` at the lengths that have them (from ``large_from`` on). Per
    length: the replicates' ``log_w``, its standard error ``log_w_se`` (the file's) and ``w``; ``pooled``: the group
    size ``group``, the pooled fits' ``log_w_pooled`` and ``shifts`` per group (:func:`pooled_fits`), ``shift`` (mean
    over groups) and ``shift_se`` (over groups, NaN for one), ``z`` (``shift / log_w_se``: the move in units of the
    file's standard error), ``w_pooled``, and the first-order extrapolation to infinite sets ``log_w_extrapolated``
    = pooled :math:`\log w^*` + ``shift / (group - 1)``; ``profile``: :func:`held_out_profile`, with ``difference`` (its
    minimiser minus the replicates' ``log_w``), ``z`` (that over ``log_w_se``) and ``se_ratio`` (``log_w_se`` over the
    profile's). ``None`` if no length has either."""
    rows = []
    for i, L in enumerate(lengths):
        p, prof = sweep["pooled"][i], sweep["profiles"][i]
        if p is None and prof is None:
            continue
        se = summary["softmax"]["log_w_se"][i]
        row = {"length": int(L), "log_w": summary["softmax"]["log_w"][i], "log_w_se": se,
               "w": summary["softmax"]["w"][i], "pooled": None, "profile": None}
        if p is not None and p["log_w"]:
            shift = replicate_mean_se(p["shift"])
            pooled_log_w = float(np.mean(p["log_w"]))
            extrapolated = pooled_log_w + shift[0] / (p["group"] - 1)
            row["pooled"] = {"group": p["group"], "members": p["members"], "log_w_pooled": p["log_w"],
                             "members_log_w": p["members_log_w"], "shifts": p["shift"], "shift": shift[0],
                             "shift_se": shift[1], "z": shift[0] / se, "w_pooled": math.exp(pooled_log_w),
                             "log_w_extrapolated": extrapolated, "w_extrapolated": math.exp(extrapolated),
                             "gradient_norm": p["gradient_norm"], "iterations": p["iterations"],
                             "seconds": p["seconds"]}
        if prof is not None:
            difference = prof["log_w"] - row["log_w"]
            row["profile"] = {**prof, "difference": difference, "z": difference / se,
                              "se_ratio": se / prof["log_w_se"]}
        rows.append(row)
    return {"lengths": [r["length"] for r in rows], "table": rows} if rows else None


__all__ = ["bias_bounds", "held_out_profile", "pooled_fits", "precision", "replicate_mean_se", "scoring_set"]
