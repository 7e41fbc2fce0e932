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
:class:`~softmax_as_linear.experiments.chapters.NonlinearOptima`), holds, per model, the
per-replicate windows, risks and convergence readings ``(nL, K)``; their means and standard errors over replicates;
the optimism of the in-sample minimum; the paired gaps (linear - softmax = intercept + locality); the infinite-prompt
references by quadrature (:mod:`~softmax_as_linear.theory.circle_quadrature`); the exponent of :math:`w^*` against
:math:`L`; the window's dependence on the label noise and the frequency scale (Collins et al.'s directions) with
z-scores; and the provenance.
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
from ..theory.attention_optimum import Prompts, fit, losses, start
from . import presets
from .nonlinear import exponent_heuristic, nonlinear_config, window_exponent
from .result_files import FIELDS_READ, nonlinear_optima_command, nonlinear_optima_file

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


def length_sweep(task, settings: dict, lengths, replicates: int, progress: bool = False) -> dict:
    """Every replicate at every length: per model, arrays ``(nL, K)`` of ``w``, ``in_sample``, ``held_out``,
    ``held_out_se``, ``gradient_norm``, ``newton``, ``newton_log_w``, ``curvature``, ``iterations``, ``optimism``,
    and ``theta`` ``(nL, K, p)``; ``gaps`` ``{name: (nL, K)}`` of per-replicate paired means; ``seconds`` per length."""
    keys = ("w", "in_sample", "held_out", "held_out_se", "gradient_norm", "newton", "newton_log_w", "curvature",
            "iterations")
    per_model = {m: {k: [] for k in (*keys, "theta", "optimism")} for m in MODELS}
    gaps, seconds, prompts = {}, [], []
    for L in lengths:
        begin, n = time.monotonic(), prompt_count(settings, L)
        records = [replicate(task, L, n, k) for k in range(replicates)]
        for m in MODELS:
            for key in keys:
                per_model[m][key].append([r[m][key] if r[m][key] is not None else float("nan") for r in records])
            per_model[m]["theta"].append([r[m]["theta"] for r in records])
            per_model[m]["optimism"].append(optimism(records, m).tolist() if replicates > 1 else [float("nan")])
        for name in records[0]["gaps"]:
            gaps.setdefault(name, []).append([r["gaps"][name][0] for r in records])
        seconds.append(time.monotonic() - begin)
        prompts.append(n)
        if progress:
            soft, nw = per_model["softmax"], per_model["nadaraya_watson"]
            print(f"L={L}: softmax w* = {mean_se(np.log(soft['w'][-1]))[0]:.3f} (log), "
                  f"risk {mean_se(soft['held_out'][-1])[0]:.4f}; Nadaraya-Watson w* = "
                  f"{math.exp(mean_se(np.log(nw['w'][-1]))[0]):.1f}; linear "
                  f"{mean_se(per_model['linear']['held_out'][-1])[0]:.4f};"
                  f" {seconds[-1]:.0f} s for {replicates} x {n} prompts", flush=True)
    return {"models": {m: {k: np.asarray(v, dtype=float) for k, v in d.items()} for m, d in per_model.items()},
            "gaps": {k: np.asarray(v) for k, v in gaps.items()}, "seconds": seconds, "prompts": prompts}


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
    sweep = length_sweep(task, settings, lengths, K, progress)
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
    data["provenance"] = {**provenance("cpu", time.monotonic() - begin), "preset": preset,
                          "command": nonlinear_optima_command(preset), **({"allow_dirty": True} if dirty else {}),
                          "seed_rule": f"replicate k: seed {OPTIMA_SEED} + k, streams 'prompts' (fit) and "
                                       f"'evaluation' (held out) at each L",
                          "replicate_seeds": [OPTIMA_SEED + k for k in range(K)]}
    path = save_json(path, data)
    if progress:
        print(f"wrote {path} in {time.monotonic() - begin:.0f} s", flush=True)
    return path

