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
--preset <preset>`` (:func:`optima`; the reproduction
:class:`~softmax_as_linear.experiments.reproductions.nonlinear_optima.NonlinearOptima`), holds, per model, the
per-replicate windows, risks and convergence readings ``(nL, K)``; their means and standard errors over replicates;
the optimism of the in-sample minimum; the paired gaps (linear - softmax = intercept + locality); the infinite-prompt
references by quadrature (:mod:`~softmax_as_linear.theory.circle_quadrature`); the exponent of :math:`w^*` against
:math:`L`; the window's dependence on the label noise and the frequency scale (Collins et al.'s directions) with
z-scores; ``precision``, the checks of the bias of :math:`w^*` common to every replicate at the long prompts
(:func:`~softmax_as_linear.experiments.optima_precision.precision`: refits on pooled sets four times larger, and the
held-out risk profiled over :math:`\log w`, scored with the conditional expectation of the loss over several queries
per prompt); ``draws``, the optima at a few
lengths for other draws of the task's features (:func:`feature_draws`); and the provenance.
"""
from __future__ import annotations

import json
import math
import time

import numpy as np
import torch

from ..core import checks, seeding
from ..theory import circle_quadrature
from ..theory.attention_optimum import (
    CHUNK_TOKENS,
    Prompts,
    fit,
    losses,
    start,
)
from . import presets
from .nonlinear import exponent_heuristic, nonlinear_config, window_exponent
from .optima_precision import held_out_profile, pooled_fits, precision, replicate_mean_se

#: Replicate k draws from experiment seed OPTIMA_SEED + k (apart from the training sweeps' seeds 0-9).
OPTIMA_SEED = 100
#: The models fitted, in this order.
FITTED_MODELS = ("nadaraya_watson", "softmax", "linear", "affine")
#: Settings of each preset (:data:`~softmax_as_linear.experiments.presets.NONLINEAR_OPTIMA_SETTINGS`, with every
#: chapter's presets).
SETTINGS = presets.NONLINEAR_OPTIMA_SETTINGS


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
    for model in FITTED_MODELS:
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


def length_sweep(task, settings: dict, lengths, replicates: int, progress: bool = False, pool: int = 0,
                 profile: dict | None = None) -> dict:
    """Every replicate at every length: per model, arrays ``(nL, K)`` of ``w``, ``in_sample``, ``held_out``,
    ``held_out_se``, ``gradient_norm``, ``newton``, ``newton_log_w``, ``curvature``, ``iterations``, ``optimism``, and
    ``theta`` ``(nL, K, p)``; ``gaps`` ``{name: (nL, K)}`` of per-replicate paired means and ``gaps_se`` of their
    standard errors over each replicate's prompts; ``seconds`` per length. With ``pool`` > 1, at every length from
    ``settings["large_from"]`` on, ``pooled`` holds :func:`~softmax_as_linear.experiments.optima_precision.pooled_fits`
    of groups of ``pool`` replicates (``None`` at the other lengths); with ``profile`` (``{"replicates", "points",
    "queries", "min_step", "max_step"}``), at the same lengths, ``profiles`` holds
    :func:`~softmax_as_linear.experiments.optima_precision.held_out_profile` (``"gtol"`` its refits' tolerance) around
    the replicates' mean :math:`\\log w^*`."""
    keys = ("w", "in_sample", "held_out", "held_out_se", "gradient_norm", "newton", "newton_log_w", "curvature",
            "iterations")
    per_model = {m: {k: [] for k in (*keys, "theta", "optimism")} for m in FITTED_MODELS}
    gaps, gaps_se, seconds, prompts, pooled, profiles = {}, {}, [], [], [], []
    for L in lengths:
        begin, n = time.monotonic(), prompt_count(settings, L)
        records = [replicate(task, L, n, k) for k in range(replicates)]
        large = L >= settings["large_from"]
        pooled.append(pooled_fits(records, pool) if pool > 1 and large else None)
        if profile and large:
            logs = np.log([r["softmax"]["w"] for r in records])
            profiles.append(held_out_profile(task, records, L, profile, float(logs.mean()),
                                             float(logs.std(ddof=1)) if logs.size > 1 else 0.0, OPTIMA_SEED))
        else:
            profiles.append(None)
        for m in FITTED_MODELS:
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
            print(f"L={L}: softmax w* = {replicate_mean_se(np.log(soft['w'][-1]))[0]:.3f} (log), "
                  f"risk {replicate_mean_se(soft['held_out'][-1])[0]:.4f}; Nadaraya-Watson w* = "
                  f"{math.exp(replicate_mean_se(np.log(nw['w'][-1]))[0]):.1f}; linear "
                  f"{replicate_mean_se(per_model['linear']['held_out'][-1])[0]:.4f};"
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


def summarise(sweep: dict) -> dict:
    """Means and standard errors over replicates, per length: per model ``risk`` (held out), ``in_sample``,
    ``optimism``, and for the windowed models ``w`` (the geometric mean :math:`e^{\\overline{\\log w}}`),
    ``log_w`` and their standard errors; per gap its mean and standard error."""
    out = {}
    for m, data in sweep["models"].items():
        entry = {}
        for key in ("held_out", "in_sample", "optimism"):
            rows = [replicate_mean_se(row) for row in data[key]]
            entry[key], entry[key + "_se"] = [r[0] for r in rows], [r[1] for r in rows]
        if not np.isnan(data["w"]).all():
            rows = [replicate_mean_se(np.log(row)) for row in data["w"]]
            entry["log_w"], entry["log_w_se"] = [r[0] for r in rows], [r[1] for r in rows]
            entry["w"] = [math.exp(r[0]) for r in rows]
            entry["w_se"] = [math.exp(r[0]) * r[1] for r in rows]  # delta method
            entry["w_median"] = [float(np.median(row)) for row in data["w"]]
        out[m] = entry
    out["gaps"] = {name: {"mean": [replicate_mean_se(r)[0] for r in rows],
                          "se": [replicate_mean_se(r)[1] for r in rows]}
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
            entry[m] = {"w": sweep["models"][m]["w"][0][:K].tolist(), "log_w": replicate_mean_se(logs)[0],
                        "log_w_se": replicate_mean_se(logs)[1],
                        "risk": replicate_mean_se(sweep["models"][m]["held_out"][0][:K])}
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
    held = {m: [np.asarray(sweep["models"][m]["held_out"])[at, :K]] for m in FITTED_MODELS}
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
        for m in FITTED_MODELS:
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
    replicates = SETTINGS[checks.one_of("preset", preset, tuple(SETTINGS))]["replicates"]
    return tuple(OPTIMA_SEED + k for k in range(replicates))


def optima_settings(preset: str = "lecture") -> dict:
    """The settings a ``nonlinear_optima_<preset>.json`` records (and is compared on): the preset's, the seed rule's
    first seed and the fits' chunk size, as JSON reads them back."""

    settings = SETTINGS[checks.one_of("preset", preset, tuple(SETTINGS))]
    return json.loads(json.dumps({**settings, "optima_seed": OPTIMA_SEED, "chunk_tokens": CHUNK_TOKENS}))


def optima(preset: str = "lecture", progress: bool = True) -> dict:
    """The content of ``nonlinear_optima_<preset>.json`` without its provenance: the optima of ``preset``
    (:data:`SETTINGS`) computed on the CPU in float64 with one thread (the caller's thread count restored after); what
    :class:`~softmax_as_linear.experiments.reproductions.nonlinear_optima.NonlinearOptima` writes."""
    settings = SETTINGS[checks.one_of("preset", preset, tuple(SETTINGS))]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _compute(preset, settings, progress)
    finally:
        torch.set_num_threads(threads)


def _compute(preset: str, settings: dict, progress: bool) -> dict:
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
        "prompts": sweep["prompts"], "models": list(FITTED_MODELS),
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

    data["settings"]["chunk_tokens"] = CHUNK_TOKENS
    data["dependence"] = dependence(settings, base_records, progress)
    data["precision"] = precision(sweep, summary, lengths)
    data["draws"] = feature_draws(settings, sweep, lengths, progress)
    data["seconds"] = round(time.monotonic() - begin, 1)
    return data
