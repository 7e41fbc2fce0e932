r"""Chapter 8's optima: the best window of the one-layer softmax layer itself (all its weights) against the prompt
length, with Monte Carlo uncertainty, and the gap to linear attention split into an intercept and locality.

At every length :math:`L` of a preset and for each of :math:`K` independent replicates, a fixed set of prompts of
Chapter 8's task (:data:`~softmax_as_linear.experiments.presets.NONLINEAR_TASK`) is drawn and four models are fitted
on it by sample-average optimisation (:func:`~softmax_as_linear.theory.attention_optimum.fit`): softmax attention over
all its weights, Nadaraya-Watson (:math:`v_y = 1`, the window only), normalised linear attention, and linear attention
plus a read of the prompt's mean token (the ``affine`` reference). Each fit is then scored on as many fresh prompts
(the in-sample minimum is biased low), on which every paired difference is taken.

Seeding rule: replicate :math:`k` uses experiment seed :data:`OPTIMA_SEED` :math:`+ k`; at length :math:`L` its fitting
prompts come from stream ``"prompts"`` and its held-out prompts from stream ``"evaluation"`` of that seed
(:func:`~softmax_as_linear.core.seeding.generator`). Replicates are therefore independent across :math:`k` and
:math:`L`, and a task setting changed for the dependence study reuses the same random numbers.

The result file ``nonlinear_optima_<preset>.json``, written by ``python -m softmax_as_linear reproduce nonlinear_optima
--preset <preset>`` (:func:`reproduce_nonlinear_optima`; the reproduction
:class:`~softmax_as_linear.experiments.reproductions.nonlinear_optima.NonlinearOptima`), holds, per model, the
per-replicate windows, risks and convergence readings ``(nL, K)``; their means and standard errors over replicates;
the optimism of the in-sample minimum; the paired gaps (linear - softmax = intercept + locality); the infinite-prompt
references by quadrature (:mod:`~softmax_as_linear.theory.circle_quadrature`); the exponent of :math:`w^*` against
:math:`L`; the window's dependence on the label noise and the frequency scale (Collins et al.'s directions) with
z-scores; ``precision``, the checks of the bias of :math:`w^*` common to every replicate at the long prompts
(:func:`precision`: refits on pooled sets four times larger, and the held-out risk profiled over :math:`\log w`,
scored with the conditional expectation of the loss over several queries per prompt); ``draws``, the optima at a few
lengths for other draws of the task's features (:func:`feature_draws`); and the provenance.
"""
from __future__ import annotations

import json
import math
import pathlib
import time

import numpy as np
import torch

from ..core import checks, seeding
from ..core.artifacts import DamagedFileError, load_json, results_folder, save_json
from ..core.provenance import provenance
from ..theory import circle_quadrature
from ..theory.attention_optimum import (
    CHUNK_TOKENS,
    Prompts,
    conditional_losses,
    fit,
    fit_at_window,
    losses,
    start,
    window_hessian,
)
from . import presets
from .file_names import FIELDS_READ, nonlinear_optima_command, nonlinear_optima_file
from .nonlinear import exponent_heuristic, nonlinear_config, window_exponent

#: Replicate k draws from experiment seed OPTIMA_SEED + k (apart from the training sweeps' seeds 0-9).
OPTIMA_SEED = 100
#: The models fitted, in this order.
MODELS = ("nadaraya_watson", "softmax", "linear", "affine")
#: Settings of each preset (:data:`~softmax_as_linear.experiments.presets.NONLINEAR_OPTIMA_SETTINGS`, with every
#: chapter's presets).
PRESETS = presets.NONLINEAR_OPTIMA_SETTINGS


def prompt_count(settings: dict, L: int) -> int:
    """Prompts per set at length ``L``: ``tokens // L`` (``large_tokens // L`` from ``large_from`` on), at most
    ``max_prompts`` and at least 16."""
    tokens = settings["large_tokens"] if L >= settings["large_from"] else settings["tokens"]
    return max(16, min(settings["max_prompts"], tokens // L))


def replicate(task, L: int, n_prompts: int, k: int) -> dict:
    """Replicate ``k`` at length ``L``: the four fits on prompts of stream ``"prompts"`` of seed
    ``OPTIMA_SEED + k``, scored on as many of stream ``"evaluation"``. Softmax starts from Nadaraya-Watson's optimum
    (its window, :math:`v = e_D`). Returns per model: ``theta``, ``w`` (softmax, Nadaraya-Watson), ``in_sample``,
    ``held_out`` and its per-prompt ``held_out_se``, ``gradient_norm``, ``newton`` (largest entry of the Newton step
    left), ``newton_log_w``, ``curvature``, ``iterations``; and ``gaps``: paired held-out differences (mean, se)."""
    seed = OPTIMA_SEED + k
    fitting = Prompts.draw(task, n_prompts, L, seeding.generator(seed, "prompts", L))
    fresh = Prompts.draw(task, n_prompts, L, seeding.generator(seed, "evaluation", L))
    out, per_prompt = {}, {}
    for model in MODELS:
        theta0 = start(model, task.d, out["nadaraya_watson"]["w"]) if model == "softmax" else None
        result = fit(model, fitting, theta0)
        held = losses(model, result.theta, fresh).numpy()
        per_prompt[model] = held
        out[model] = {"theta": result.theta.tolist(), "w": result.window, "in_sample": result.risk,
                      "held_out": float(held.mean()), "held_out_se": float(held.std(ddof=1) / math.sqrt(held.size)),
                      "gradient_norm": result.gradient_norm, "newton": float(np.abs(result.newton).max()),
                      "newton_log_w": float(abs(result.newton[0])) if result.window else None,
                      "curvature": result.curvature, "iterations": result.iterations, "_fitting": fitting}
    pairs = {"linear_minus_softmax": ("linear", "softmax"), "intercept": ("linear", "affine"),
             "locality": ("affine", "softmax"), "nadaraya_watson_minus_softmax": ("nadaraya_watson", "softmax")}
    out["gaps"] = {}
    for name, (a, b) in pairs.items():
        diff = per_prompt[a] - per_prompt[b]
        out["gaps"][name] = (float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(diff.size)))
    return out


def optimism(records: list[dict], model: str) -> np.ndarray:
    r"""How far below the population risk an in-sample minimum sits, per replicate: with :math:`\hat\theta_j` fitted
    on set :math:`j` and :math:`R_k` the mean loss on set :math:`k`, :math:`\tfrac12[\operatorname{mean}_{j \ne k}
    R_k(\hat\theta_j) - R_k(\hat\theta_k)]` (to first order the in-sample minimum is as far below :math:`R(\theta^*)`
    as a fitted point's risk is above it), ``(K,)``; paired on each set, so free of the prompts' own noise."""
    thetas = [r[model]["theta"] for r in records]
    out = []
    for k, record in enumerate(records):
        prompts = record[model]["_fitting"]
        own = float(losses(model, thetas[k], prompts).mean())
        others = [float(losses(model, t, prompts).mean()) for j, t in enumerate(thetas) if j != k]
        out.append(0.5 * (np.mean(others) - own))
    return np.array(out)


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error over replicates (NaN se for one)."""
    x = np.asarray(values, dtype=float)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")


def length_sweep(task, settings: dict, lengths, replicates: int, progress: bool = False, pool: int = 0,
                 profile: dict | None = None) -> dict:
    """Every replicate at every length: per model, arrays ``(nL, K)`` of ``w``, ``in_sample``, ``held_out``,
    ``held_out_se``, ``gradient_norm``, ``newton``, ``newton_log_w``, ``curvature``, ``iterations``, ``optimism``,
    and ``theta`` ``(nL, K, p)``; ``gaps`` ``{name: (nL, K)}`` of per-replicate paired means and ``gaps_se`` of their
    standard errors over each replicate's prompts; ``seconds`` per length. With ``pool`` > 1, at every length from
    ``settings["large_from"]`` on, ``pooled`` holds :func:`pooled_fits` of groups of ``pool`` replicates (``None`` at
    the other lengths); with ``profile`` (``{"replicates", "points", "queries", "min_step", "max_step"}``), at the same
    lengths, ``profiles`` holds :func:`held_out_profile` (``"gtol"`` its refits' tolerance) around the replicates'
    mean :math:`\\log w^*`."""
    keys = ("w", "in_sample", "held_out", "held_out_se", "gradient_norm", "newton", "newton_log_w", "curvature",
            "iterations")
    per_model = {m: {k: [] for k in (*keys, "theta", "optimism")} for m in MODELS}
    gaps, gaps_se, seconds, prompts, pooled, profiles = {}, {}, [], [], [], []
    for L in lengths:
        begin, n = time.monotonic(), prompt_count(settings, L)
        records = [replicate(task, L, n, k) for k in range(replicates)]
        large = L >= settings["large_from"]
        pooled.append(pooled_fits(records, pool) if pool > 1 and large else None)
        if profile and large:
            logs = np.log([r["softmax"]["w"] for r in records])
            profiles.append(held_out_profile(task, records, L, profile, float(logs.mean()),
                                             float(logs.std(ddof=1)) if logs.size > 1 else 0.0))
        else:
            profiles.append(None)
        for m in MODELS:
            for key in keys:
                per_model[m][key].append([r[m][key] if r[m][key] is not None else float("nan") for r in records])
            per_model[m]["theta"].append([r[m]["theta"] for r in records])
            per_model[m]["optimism"].append(optimism(records, m).tolist() if replicates > 1 else [float("nan")])
        for name in records[0]["gaps"]:
            gaps.setdefault(name, []).append([r["gaps"][name][0] for r in records])
            gaps_se.setdefault(name, []).append([r["gaps"][name][1] for r in records])
        seconds.append(time.monotonic() - begin)
        prompts.append(n)
        if progress:
            soft, nw = per_model["softmax"], per_model["nadaraya_watson"]
            print(f"L={L}: softmax w* = {mean_se(np.log(soft['w'][-1]))[0]:.3f} (log), "
                  f"risk {mean_se(soft['held_out'][-1])[0]:.4f}; Nadaraya-Watson w* = "
                  f"{math.exp(mean_se(np.log(nw['w'][-1]))[0]):.1f}; linear "
                  f"{mean_se(per_model['linear']['held_out'][-1])[0]:.4f};"
                  f" {seconds[-1]:.0f} s for {replicates} x {n} prompts", flush=True)
            if pooled[-1] is not None:
                print(f"  pooled x{pool}: softmax log w* {np.round(pooled[-1]['log_w'], 3).tolist()} against its "
                      f"replicates' {np.round(pooled[-1]['members_log_w'], 3).tolist()}, "
                      f"{pooled[-1]['seconds']:.0f} s", flush=True)
            if profiles[-1] is not None:
                pr = profiles[-1]
                print(f"  held-out profile: log w* {pr['log_w']:.3f} ± {pr['log_w_se']:.3f} (replicates' "
                      f"{logs.mean():.3f} ± {logs.std(ddof=1) / math.sqrt(logs.size):.3f}), {pr['seconds']:.0f} s",
                      flush=True)
    return {"models": {m: {k: np.asarray(v, dtype=float) for k, v in d.items()} for m, d in per_model.items()},
            "gaps": {k: np.asarray(v) for k, v in gaps.items()},
            "gaps_se": {k: np.asarray(v) for k, v in gaps_se.items()},
            "seconds": seconds, "prompts": prompts, "pooled": pooled, "profiles": profiles}


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


def summarise(sweep: dict) -> dict:
    """Means and standard errors over replicates, per length: per model ``risk`` (held out), ``in_sample``,
    ``optimism``, and for the windowed models ``w`` (the geometric mean :math:`e^{\\overline{\\log w}}`),
    ``log_w`` and their standard errors; per gap its mean and standard error."""
    out = {}
    for m, data in sweep["models"].items():
        entry = {}
        for key in ("held_out", "in_sample", "optimism"):
            rows = [mean_se(row) for row in data[key]]
            entry[key], entry[key + "_se"] = [r[0] for r in rows], [r[1] for r in rows]
        if not np.isnan(data["w"]).all():
            rows = [mean_se(np.log(row)) for row in data["w"]]
            entry["log_w"], entry["log_w_se"] = [r[0] for r in rows], [r[1] for r in rows]
            entry["w"] = [math.exp(r[0]) for r in rows]
            entry["w_se"] = [math.exp(r[0]) * r[1] for r in rows]  # delta method
            entry["w_median"] = [float(np.median(row)) for row in data["w"]]
        out[m] = entry
    out["gaps"] = {name: {"mean": [mean_se(r)[0] for r in rows], "se": [mean_se(r)[1] for r in rows]}
                   for name, rows in sweep["gaps"].items()}
    return out


def moves(lengths, log_w, log_w_se) -> list[dict]:
    """Adjacent lengths' optimal windows compared: the change of :math:`\\log w^*`, its standard error, z-score and the
    local exponent :math:`\\Delta\\log w^* / \\Delta\\log L` with its standard error."""
    out = []
    for i in range(len(lengths) - 1):
        change = log_w[i + 1] - log_w[i]
        se = math.hypot(log_w_se[i], log_w_se[i + 1])
        span = math.log(lengths[i + 1] / lengths[i])
        out.append({"from": lengths[i], "to": lengths[i + 1], "log_change": change, "se": se, "z": change / se,
                    "local_exponent": change / span, "local_exponent_se": se / span})
    return out


def exponents(lengths, w: np.ndarray, large_from: int) -> dict:
    """The exponent of :math:`w^* \\propto L^\\beta` with its Student-t interval over replicates
    (:func:`~softmax_as_linear.experiments.nonlinear.window_exponent`, rows = replicates ``(K, nL)``): over every
    length, and over the lengths from ``large_from`` on (where the bias-variance heuristic applies)."""
    lengths = np.asarray(lengths)
    rows = np.asarray(w, dtype=float).T  # (K, nL)
    large = lengths >= large_from
    return {"all": window_exponent(lengths, rows),
            "large": window_exponent(lengths[large], rows[:, large]) if large.sum() >= 2 else None,
            "large_from": int(large_from)}


def dependence(settings: dict, base_records: dict | None, progress: bool = False) -> dict:
    r"""Collins et al.'s directions on the optima at one length: :math:`w^*` of softmax and Nadaraya-Watson for each
    label noise :math:`s^2` (frequency 2) and each frequency scale :math:`\gamma` (noise 0.05), and z-scores of
    :math:`\log w^*` between the extremes and between neighbours (expected: smaller with more noise, larger with a
    larger :math:`\gamma`)."""
    L, K = settings["dependence_length"], settings["dependence_replicates"]
    base = nonlinear_config("lecture")
    cases = [("noise_var", s2) for s2 in settings["noise_levels"]] + [("frequency", g) for g in settings["frequencies"]]
    table = []
    for name, value in cases:
        if value == getattr(base, name) and base_records is not None:
            sweep = base_records
        else:
            sweep = length_sweep(nonlinear_config("lecture", **{name: value}).task(), settings, (L,), K)
        entry = {"setting": name, "value": value}
        for m in ("softmax", "nadaraya_watson"):
            logs = np.log(sweep["models"][m]["w"][0][:K])
            entry[m] = {"w": sweep["models"][m]["w"][0][:K].tolist(), "log_w": mean_se(logs)[0],
                        "log_w_se": mean_se(logs)[1], "risk": mean_se(sweep["models"][m]["held_out"][0][:K])}
        table.append(entry)
        if progress:
            print(f"dependence at L={L}, {name}={value:g}: softmax w* = {math.exp(entry['softmax']['log_w']):.1f}, "
                  f"Nadaraya-Watson w* = {math.exp(entry['nadaraya_watson']['log_w']):.1f}", flush=True)
    directions = []
    for name, sign in (("noise_var", -1), ("frequency", +1)):
        rows = [e for e in table if e["setting"] == name]
        for m in ("softmax", "nadaraya_watson"):
            for a, b in [(rows[i], rows[i + 1]) for i in range(len(rows) - 1)] + (
                    [(rows[0], rows[-1])] if len(rows) > 2 else []):
                change = b[m]["log_w"] - a[m]["log_w"]
                se = math.hypot(a[m]["log_w_se"], b[m]["log_w_se"])
                directions.append({"setting": name, "model": m, "from": a["value"], "to": b["value"],
                                   "expected_sign": sign, "log_change": change, "se": se, "z": sign * change / se})
    return {"length": L, "replicates": K, "table": table, "directions": directions}


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


def held_out_profile(task, records: list[dict], L: int, spec: dict, center: float, spread: float) -> dict:
    r"""The held-out risk of the softmax layer profiled over :math:`\log w`, the other weights refitted at each window:
    on a grid of ``spec["points"]`` values of :math:`\log w` around ``center`` (step ``spread``, the replicates'
    standard deviation of :math:`\log w^*`, clipped to ``[min_step, max_step]``), for each of the first
    ``spec["replicates"]`` replicates the other weights are fitted on its fitting prompts
    (:func:`~softmax_as_linear.theory.attention_optimum.fit_at_window` to ``spec["gtol"]``, Newton steps with the
    Hessian at the replicate's optimum, from that optimum at the middle point, outwards from each inner neighbour's
    weights) and scored on as many fresh
    prompts (stream ``"analysis"`` of its seed) with the conditional expectation of the loss over ``spec["queries"]``
    queries per prompt (:func:`~softmax_as_linear.theory.attention_optimum.conditional_losses`). To first order the
    fitting sets' noise moves the held-out profile's minimiser not at all (it enters the held-out risk at second
    order), so the minimiser of the replicates' mean profile (the least-squares parabola's) carries neither the
    fitting sets' first-order noise nor the in-sample minimum's bias. Returns the ``grid``; per replicate and grid
    point ``held_out`` ``(K, G)``, its ``held_out_se`` over the prompts, ``in_sample`` (the fitting set's mean loss,
    whose minimiser is the replicate's :math:`\log w^*`), ``gradient_norm`` and ``iterations``; ``log_w`` (the mean
    profile's minimiser), ``log_w_se`` (jackknife over replicates), ``inside`` (within the grid), the per-replicate
    minimisers of both profiles, and ``seconds``."""
    begin = time.monotonic()
    K, G, q = min(spec["replicates"], len(records)), spec["points"], spec["queries"]
    step = min(max(spread, spec["min_step"]), spec["max_step"])
    u = step * (np.arange(G) - (G - 1) / 2)
    grid = center + u
    out = {key: [] for key in ("held_out", "held_out_se", "in_sample", "gradient_norm", "iterations")}
    for k in range(K):
        fitting, theta = records[k]["softmax"]["_fitting"], np.asarray(records[k]["softmax"]["theta"])
        scoring, x, f = scoring_set(task, fitting.n, L, q, seeding.generator(OPTIMA_SEED + k, "analysis", L))
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
            shift = mean_se(p["shift"])
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


def feature_draws(settings: dict, sweep: dict, lengths, progress: bool = False) -> dict:
    r"""The optima for other draws of the task's features (the task family: the same :math:`d, m, \gamma, \tau^2,
    s^2`, features from ``settings["draws"]["feature_seeds"]``) at ``settings["draws"]["lengths"]`` with
    ``settings["draws"]["replicates"]`` replicates each, on the same random prompt numbers as the first replicates of
    draw 0 (common random numbers: the same seeds and streams; the lecture draw's are read from ``sweep``, the main
    sweep over ``lengths``). Returns ``feature_seeds`` (draw 0 first), ``lengths``, ``replicates``, ``prompts``;
    per draw and length ``(draws, nL, K)`` arrays: ``w`` per windowed model, ``held_out`` per model, ``gaps`` (paired
    means) and ``gaps_se``; ``limits`` per draw (:func:`~softmax_as_linear.theory.circle_quadrature.limit_constants`);
    and ``summary``: per length the softmax layer's ``log_w`` per draw (replicate mean), its mean, standard
    deviation over draws and range, the Monte Carlo standard deviation of one draw's value (draw 0's replicate
    spread over ``sweep``'s replicates divided by the square root of the replicates per draw) and the share of the
    variance over draws left to the draws themselves; each gap's mean, standard deviation and range over draws."""
    from ..theory.cosine_task import CosineTask

    spec = settings["draws"]
    seeds, draw_lengths, K = list(spec["feature_seeds"]), list(spec["lengths"]), spec["replicates"]
    base = nonlinear_config("lecture").task()
    at = [list(lengths).index(L) for L in draw_lengths]
    windowed = ("softmax", "nadaraya_watson")
    w = {m: [np.asarray(sweep["models"][m]["w"])[at, :K]] for m in windowed}
    held = {m: [np.asarray(sweep["models"][m]["held_out"])[at, :K]] for m in MODELS}
    gaps = {g: [np.asarray(v)[at, :K]] for g, v in sweep["gaps"].items()}
    gaps_se = {g: [np.asarray(v)[at, :K]] for g, v in sweep["gaps_se"].items()}
    limits = [circle_quadrature.limit_constants(base)]
    begin = time.monotonic()
    for seed in seeds:
        task = CosineTask(d=base.d, features=base.features, frequency=base.frequency, task_var=base.task_var,
                          noise_var=base.noise_var, inputs=base.inputs, feature_seed=seed)
        draw = length_sweep(task, settings, draw_lengths, K)
        for m in windowed:
            w[m].append(draw["models"][m]["w"])
        for m in MODELS:
            held[m].append(draw["models"][m]["held_out"])
        for g in gaps:
            gaps[g].append(draw["gaps"][g])
            gaps_se[g].append(draw["gaps_se"][g])
        limits.append(circle_quadrature.limit_constants(task))
        if progress:
            print(f"feature draw {seed}: softmax w* = {np.round(np.exp(np.log(w['softmax'][-1]).mean(1)), 1).tolist()}"
                  f" at L = {draw_lengths}; gap {np.round(gaps['linear_minus_softmax'][-1].mean(1), 4).tolist()}"
                  f" ({time.monotonic() - begin:.0f} s)", flush=True)
    log_w = np.log(np.asarray(w["softmax"])).mean(2)  # (draws, nL)
    spread = log_w.std(0, ddof=1)
    main = np.log(np.asarray(sweep["models"]["softmax"]["w"])[at])  # (nL, K main)
    monte_carlo = main.std(1, ddof=1) / math.sqrt(K)
    summary = {"log_w": log_w.T.tolist(), "log_w_mean": log_w.mean(0).tolist(), "log_w_sd": spread.tolist(),
               "w": np.exp(log_w).T.tolist(), "w_low": np.exp(log_w.min(0)).tolist(),
               "w_high": np.exp(log_w.max(0)).tolist(), "monte_carlo_sd": monte_carlo.tolist(),
               "draw_share": np.clip(1 - monte_carlo ** 2 / spread ** 2, 0, 1).tolist(), "gaps": {}}
    for g, values in gaps.items():
        per = np.asarray(values).mean(2)  # (draws, nL)
        summary["gaps"][g] = {"per_draw": per.T.tolist(), "mean": per.mean(0).tolist(),
                              "sd": per.std(0, ddof=1).tolist(), "low": per.min(0).tolist(),
                              "high": per.max(0).tolist()}
    return {"feature_seeds": [base.feature_seed] + seeds, "lengths": draw_lengths, "replicates": K,
            "prompts": [prompt_count(settings, L) for L in draw_lengths],
            "w": {m: np.asarray(v).tolist() for m, v in w.items()},
            "held_out": {m: np.asarray(v).tolist() for m, v in held.items()},
            "gaps": {g: np.asarray(v).tolist() for g, v in gaps.items()},
            "gaps_se": {g: np.asarray(v).tolist() for g, v in gaps_se.items()},
            "limits": {k: [row[k] for row in limits] for k in limits[0]}, "summary": summary,
            "seconds": time.monotonic() - begin}


#: The fields of Chapter 8's configuration that define the task the optima are fitted on (its training settings,
#: which the optima do not use, may change without making a file stale).
TASK_FIELDS = ("d", "covariance", "rho", "sampler", "covariates", "task_var", "noise_var", "labels", "features",
               "frequency")


def replicate_seeds(preset: str = "lecture") -> tuple[int, ...]:
    """The experiment seeds of the replicates of ``preset``: ``OPTIMA_SEED + k`` for ``k < K``."""
    return tuple(OPTIMA_SEED + k for k in range(PRESETS[checks.one_of("preset", preset, tuple(PRESETS))]["replicates"]))


def optima_settings(preset: str = "lecture") -> dict:
    """The settings a ``nonlinear_optima_<preset>.json`` records (and is compared on): the preset's, the seed rule's
    first seed and the fits' chunk size, as JSON reads them back."""
    from ..theory.attention_optimum import CHUNK_TOKENS

    settings = PRESETS[checks.one_of("preset", preset, tuple(PRESETS))]
    return json.loads(json.dumps({**settings, "optima_seed": OPTIMA_SEED, "chunk_tokens": CHUNK_TOKENS}))


def up_to_date(path: pathlib.Path, preset: str) -> bool:
    """Whether ``path`` holds a complete optima file of ``preset``'s settings: every field its chapter reads, the same
    :func:`optima_settings` and the same task (:data:`TASK_FIELDS`). A file that cannot be read is a
    :class:`~softmax_as_linear.core.artifacts.DamagedFileError` that says to delete it."""
    if not path.exists():
        return False
    try:
        data = load_json(path)
    except DamagedFileError as error:
        raise error.advise("delete it (the same command then computes the optima again), or run the same command "
                           "with --restart") from None
    task = json.loads(json.dumps(nonlinear_config("lecture").as_dict()))
    return (all(field in data for field in FIELDS_READ["nonlinear_optima_"])
            and data.get("settings") == optima_settings(preset)
            and all((data.get("task") or {}).get(field) == task[field] for field in TASK_FIELDS))


def reproduce_nonlinear_optima(preset: str = "lecture", out=None, progress: bool = True, restart: bool = False,
                               dirty: bool = False) -> pathlib.Path:
    """Compute the optima of ``preset`` (:data:`PRESETS`) on the CPU in float64 with one thread (the caller's thread
    count restored after), and write ``nonlinear_optima_<preset>.json`` atomically into ``out`` (default: the results
    folder); a file of the same settings that is already there is kept ("up to date", :func:`up_to_date`) unless
    ``restart``. ``dirty``: the library has uncommitted changes, and the file says so."""
    settings = PRESETS[checks.one_of("preset", preset, tuple(PRESETS))]
    out = results_folder() if out is None else pathlib.Path(out)
    path = out / nonlinear_optima_file(preset)
    if not restart and up_to_date(path, preset):
        print(f"{path}: up to date", flush=True)
        return path
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _compute(preset, settings, path, progress, dirty)
    finally:
        torch.set_num_threads(threads)


def _compute(preset: str, settings: dict, path: pathlib.Path, progress: bool, dirty: bool) -> pathlib.Path:
    begin = time.monotonic()
    task = nonlinear_config("lecture").task()
    lengths, K = settings["lengths"], settings["replicates"]
    sweep = length_sweep(task, settings, lengths, K, progress, pool=settings["pool"], profile=settings["profile"])
    summary = summarise(sweep)
    soft, nw = summary["softmax"], summary["nadaraya_watson"]
    base_records = None
    if settings["dependence_length"] in lengths:
        i = list(lengths).index(settings["dependence_length"])
        base_records = {"models": {m: {k: v[i:i + 1] for k, v in d.items()} for m, d in sweep["models"].items()}}
    models = {m: {k: v for k, v in d.items()} for m, d in sweep["models"].items()}
    data = {
        "preset": preset, "settings": {**settings, "optima_seed": OPTIMA_SEED, "chunk_tokens": None},
        "task": nonlinear_config("lecture").as_dict(), "lengths": list(lengths), "replicates": K,
        "prompts": sweep["prompts"], "models": list(MODELS),
        "limits": {"linear": circle_quadrature.linear_limit_risk(task),
                   "affine": circle_quadrature.affine_limit_risk(task),
                   "intercept_share": circle_quadrature.intercept_share(task),
                   "zero": circle_quadrature.zero_limit_risk(task), "noise_floor": task.noise_floor(),
                   "nodes": circle_quadrature.NODES},
        "replicate": models, "summary": summary,
        "moves": {"softmax": moves(lengths, soft["log_w"], soft["log_w_se"]),
                  "nadaraya_watson": moves(lengths, nw["log_w"], nw["log_w_se"])},
        "exponent": {"softmax": exponents(lengths, sweep["models"]["softmax"]["w"], settings["large_from"]),
                     "nadaraya_watson": exponents(lengths, sweep["models"]["nadaraya_watson"]["w"],
                                                  settings["large_from"]),
                     "heuristic": exponent_heuristic(task.d)},
        "seconds_per_length": sweep["seconds"],
    }
    from ..theory.attention_optimum import CHUNK_TOKENS

    data["settings"]["chunk_tokens"] = CHUNK_TOKENS
    data["dependence"] = dependence(settings, base_records, progress)
    data["precision"] = precision(sweep, summary, lengths)
    data["draws"] = feature_draws(settings, sweep, lengths, progress)
    data["provenance"] = {**provenance("cpu", time.monotonic() - begin), "preset": preset,
                          "command": nonlinear_optima_command(preset), **({"allow_dirty": True} if dirty else {}),
                          "seed_rule": f"replicate k: seed {OPTIMA_SEED} + k, streams 'prompts' (fit) and "
                                       f"'evaluation' (held out) at each L",
                          "replicate_seeds": [OPTIMA_SEED + k for k in range(K)]}
    path = save_json(path, data)
    if progress:
        print(f"wrote {path} in {time.monotonic() - begin:.0f} s", flush=True)
    return path

