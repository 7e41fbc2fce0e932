r"""Chapter 6's experiment: Theorem 4.3 where the infinite-prompt limit of softmax attention is not linear.

One sweep per covariate law (:func:`~softmax_as_linear.experiments.presets.beyond_config`) trains the paper's
model at several prompt lengths :math:`L`, softmax and linear attention, and beside them the two
infinite-prompt models, from the same initialisation and on the same batches. Read from it:

- :func:`limit_tracking`: how far each finite-:math:`L` run stays from the infinite-prompt run of its
  activation over the horizon (parameters and risk), against :math:`L`, with log-log slopes per seed;
  and how far the two infinite-prompt runs are from each other (softmax's limit is not linear attention's);
- :func:`limit_comparison`: the two trained infinite-prompt models side by side (parameters, :math:`R_\infty`
  on common samples);
- :func:`concentration_check`: Chapter 3's rate for the law at the trained parameters (the delta-method
  constant against measured output gaps);
- :func:`final_comparison`: the final risks on fresh prompts against the :math:`L`-Bayes risk and the best
  linear attention under the same law;
- :func:`beyond_experiment`: all of it, with provenance, as the JSON-ready content of
  ``beyond_<covariates>_<preset>.json``.

Distances are squared Euclidean norms over the four trained matrices (as in the paper's Figure 3);
risks are :math:`R = \tfrac12\mathrm{MSE}`.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from ..core import checks, seeding
from ..core.devices import resolve_device
from ..core.provenance import device_name, provenance, utc_now
from ..core.stats import loglog_slope, mean_se
from ..engine.evaluation import final_evaluation
from ..engine.sweep import TrainResult
from ..engine.train import train
from ..registry import COVARIATES, PRESETS
from ..theory.limit_model import gap_constant, infinite_prompt_prediction
from ..theory.regression import RegressionTask
from ..theory.risks import bayes_risk, optimal_linear_risk
from ..theory.stability import regression_gaps
from .file_names import beyond_command, beyond_file, saved_beyond
from .presets import BEYOND_FINAL_PROMPTS, BEYOND_LIMIT_SAMPLES, beyond_config


def _index(result: TrainResult, model: str) -> int:
    if model not in result.config.models:
        raise ValueError(f"result: the sweep has no {model!r} run (models {result.config.models})")
    return result.config.models.index(model)


def _distance(result: TrainResult, a: int, b: int, b_length: int | None = 0) -> np.ndarray:
    """``(S, nL, T)`` squared distance between the runs of model ``a`` and of model ``b`` (at length index
    ``b_length``, or at the same length when None), summed over every trained matrix."""
    total = 0.0
    for value in result.params.values():
        other = value[:, :, b] if b_length is None else value[:, b_length, b][:, None]
        diff = value[:, :, a] - other
        total = total + (diff**2).reshape(*diff.shape[:3], -1).sum(-1)
    return total


def _slopes(lengths, curves: np.ndarray, level: float = 0.95) -> dict | None:
    """Log-log slope of each row of ``curves (S, nL)`` and of their mean over rows, with intervals (None with
    fewer than three lengths)."""
    if len(lengths) < 3:
        return None
    per = [loglog_slope(lengths, row) for row in curves]
    mean = loglog_slope(lengths, curves.mean(0))
    return {"per_seed": [s.slope for s in per], "per_seed_interval": [list(s.interval(level)) for s in per],
            "mean": mean.slope, "mean_interval": list(mean.interval(level))}


def limit_tracking(result: TrainResult, horizon: float | None = None, fit_from: int = 30) -> dict:
    r"""Theorem 4.3 on a sweep: each finite-:math:`L` run against the infinite-prompt run of its activation.

    With :math:`\theta_L(t)` a run at length :math:`L` and :math:`\theta_\infty(t)` the infinite-prompt run of the
    same activation, seed and batches (step :math:`k` is flow time :math:`t = 2\,\mathrm{lr}\,k`),

    - ``distance``: :math:`\delta_L(t) = \|\theta_L(t) - \theta_\infty(t)\|^2` ``(S, nL, T)`` per activation, and
      ``sup``: :math:`\sup_{t \le T}\delta_L(t)` ``(S, nL)`` over the horizon (default: the whole run);
    - ``risk_gap``: :math:`\sup_{t \le T} |R_L(\theta_L(t)) - R_\infty(\theta_\infty(t))|` ``(S, nL)``, both risks on
      the same held-out prompts (the limit run reads their tasks, queries and targets);
    - ``slopes``: log-log slopes in :math:`L` of ``sup`` and ``risk_gap`` over the lengths from ``fit_from`` on,
      per seed and for the mean over seeds, with 95% intervals (None with fewer than three such lengths);
    - ``limits``: :math:`\|\theta^{\mathrm{soft}}_\infty(t) - \theta^{\mathrm{lin}}_\infty(t)\|^2` ``(S, T)``, the
      distance between the two infinite-prompt runs, and ``paired``:
      :math:`\|\theta^{\mathrm{soft}}_L - \theta^{\mathrm{lin}}_L\|^2` ``(S, nL, T)`` (the paper's Figure 3).

    Arrays are returned as lists; runs that diverged give NaN.
    """
    cfg = result.config
    times = result.times
    horizon = float(times[-1]) if horizon is None else checks.positive_float("horizon", horizon)
    within = times <= horizon + 1e-12
    lengths = np.array(cfg.lengths)
    fit = lengths >= fit_from  # the slopes need three lengths or more (None otherwise)
    out = {"lengths": lengths.tolist(), "times": times.tolist(), "horizon": horizon, "seeds": list(cfg.seeds),
           "fit_lengths": lengths[fit].tolist(), "covariates": cfg.covariates, "distance": {}, "sup": {},
           "risk_gap": {}, "slopes": {}, "risk_gap_slopes": {}}
    for activation in ("softmax", "linear"):
        a, limit = _index(result, activation), _index(result, f"{activation}_limit")
        distance = _distance(result, a, limit)
        sup = distance[..., within].max(-1)
        gap = np.abs(result.eval_risk[:, :, a] - result.eval_risk[:, :1, limit])[..., within].max(-1)
        out["distance"][activation] = distance.tolist()
        out["sup"][activation] = sup.tolist()
        out["risk_gap"][activation] = gap.tolist()
        out["slopes"][activation] = _slopes(lengths[fit], sup[:, fit])
        out["risk_gap_slopes"][activation] = _slopes(lengths[fit], gap[:, fit])
    limits = _distance(result, _index(result, "softmax_limit"), _index(result, "linear_limit"))[:, 0]
    out["limits"] = limits.tolist()
    out["limits_sup"] = limits[:, within].max(-1).tolist()
    out["paired"] = _distance(result, _index(result, "softmax"), _index(result, "linear"), None).tolist()
    out["limit_risk"] = {a: result.eval_risk[:, 0, _index(result, f"{a}_limit")].tolist()
                         for a in ("softmax", "linear")}
    return out


def _uv_final(result: TrainResult, model: str) -> tuple[torch.Tensor, torch.Tensor]:
    U, V = result.uv()
    a = _index(result, model)
    return torch.as_tensor(np.asarray(U)[:, 0, a, -1]), torch.as_tensor(np.asarray(V)[:, 0, a, -1])  # (S, D, D)


def limit_comparison(result: TrainResult, n_samples: int = 1 << 18, seed: int = seeding.REFERENCE_SEED) -> dict:
    r"""The two trained infinite-prompt models at the end of the sweep, seed by seed.

    In the :math:`(U, V)` view, :math:`A = U_{:, :d} = [A_x; a_y^\top]` and :math:`v = (v_x, v_y)` the last row of
    :math:`V`: ``norm_A_x``, ``v_y``, ``norm_a_y``, ``norm_v_x`` ``{model: (S,)}``. Risks on ``n_samples`` common
    :math:`(w, x_q)` (:func:`~softmax_as_linear.theory.limit_model.infinite_prompt_risk_estimate`'s estimator, the
    same samples for every model, so differences are paired): ``risk`` (each model read by its own limit),
    ``cross`` (linear attention's trained limit read by the softmax limit), and the paired differences
    ``softmax minus linear`` with standard errors.
    """
    cfg = result.config
    task = cfg.task()
    n = checks.int_at_least("n_samples", n_samples, 2)
    stream = task.stream(n, torch.Generator().manual_seed(seeding.stream_seed(seed, "prompts", 1)))
    w, query = stream.w, stream.query
    truth = (query[:, :-1] * w).sum(-1)
    d = task.d
    out = {"seeds": list(cfg.seeds), "n_samples": n, "covariates": cfg.covariates}
    losses = {}
    for model, limit in (("softmax_limit", "softmax"), ("linear_limit", "linear")):
        U, V = _uv_final(result, model)
        out.setdefault("norm_A_x", {})[model] = torch.linalg.matrix_norm(U[:, :d, :d]).tolist()
        out.setdefault("v_y", {})[model] = V[:, d, d].tolist()
        out.setdefault("norm_a_y", {})[model] = U[:, d, :d].norm(dim=-1).tolist()
        out.setdefault("norm_v_x", {})[model] = V[:, d, :d].norm(dim=-1).tolist()
        pred = torch.stack([infinite_prompt_prediction(U[s], V[s], task, w, query, limit)
                            for s in range(len(cfg.seeds))])
        losses[model] = 0.5 * (pred - truth) ** 2 + 0.5 * task.noise_var
    U, V = _uv_final(result, "linear_limit")
    pred = torch.stack([infinite_prompt_prediction(U[s], V[s], task, w, query, "softmax")
                        for s in range(len(cfg.seeds))])
    cross = 0.5 * (pred - truth) ** 2 + 0.5 * task.noise_var
    summary = lambda values: [mean_se(row) for row in values]  # noqa: E731
    out["risk"] = {model: [m for m, _ in summary(v)] for model, v in losses.items()}
    out["risk_se"] = {model: [e for _, e in summary(v)] for model, v in losses.items()}
    difference = summary(losses["softmax_limit"] - losses["linear_limit"])
    out["difference"], out["difference_se"] = [m for m, _ in difference], [e for _, e in difference]
    crossed = summary(cross - losses["linear_limit"])
    out["cross"] = [m for m, _ in summary(cross)]
    out["cross_excess"], out["cross_excess_se"] = [m for m, _ in crossed], [e for _, e in crossed]
    return out


def concentration_check(result: TrainResult, lengths=None, n_prompts: int = 1024, seed: int = seeding.REFERENCE_SEED,
                        max_seeds: int = 3) -> dict:
    r"""Chapter 3's rate for the covariate law at the trained softmax parameters (longest :math:`L`; the first
    ``max_seeds`` seeds of the sweep).

    Measures the squared output gap :math:`\mathbb{E}(\hat y_L - \hat y_\infty)^2` on ``n_prompts`` prompts of
    each length (:func:`~softmax_as_linear.theory.stability.regression_gaps`, same prompts for every seed) and
    compares it with the delta-method prediction :math:`\mathbb{E}[C]/L`
    (:func:`~softmax_as_linear.theory.limit_model.gap_constant`, averaged over the same tasks and queries):
    ``gap``, ``gap_se`` ``(S, nL)``, ``constant``, ``constant_se`` ``(S,)`` and ``slopes`` of the gaps in :math:`L`.
    """
    cfg = result.config
    task = cfg.task()
    lengths = list(cfg.lengths) if lengths is None else [checks.positive_int("lengths", L) for L in lengths]
    U, V = result.uv()
    a = _index(result, "softmax")
    seeds = list(cfg.seeds)[: checks.positive_int("max_seeds", max_seeds)]
    out = {"lengths": lengths, "seeds": seeds, "n_prompts": int(n_prompts), "trained_length": cfg.lengths[-1],
           "gap": [], "gap_se": [], "constant": [], "constant_se": []}
    for s in range(len(seeds)):
        U_s, V_s = (torch.as_tensor(np.asarray(m)[s, -1, a, -1]) for m in (U, V))
        rows = []
        for L in lengths:
            g = torch.Generator().manual_seed(seeding.stream_seed(seed, "prompts", L))
            rows.append(mean_se(regression_gaps(task, U_s, V_s, L, n_prompts, g)["output"]))
        stream = task.stream(n_prompts, torch.Generator().manual_seed(seeding.stream_seed(seed, "prompts", lengths[0])))
        constant = mean_se(gap_constant(U_s, V_s, task, stream.w, stream.query))
        out["gap"].append([m for m, _ in rows])
        out["gap_se"].append([e for _, e in rows])
        out["constant"].append(constant[0])
        out["constant_se"].append(constant[1])
    out["slopes"] = _slopes(lengths, np.array(out["gap"]))
    return out


def final_comparison(result: TrainResult, evaluation: dict, n_bayes_samples: int = 20_000) -> dict:
    r"""Final risks on fresh prompts (:func:`~softmax_as_linear.engine.evaluation.final_evaluation`) against the
    references under the sweep's covariate law: the :math:`L`-Bayes (ridge) risk with its Monte Carlo standard
    error, the best linear attention :math:`R^*_{\mathrm{lin}}(L)` (fourth moments included) and, for contrast, its
    Gaussian value, and the floor :math:`s^2/2`. ``risk``/``risk_se`` ``{model: (S, nL)}``, ``linear_exact``,
    ``paired_difference`` (softmax minus linear, same prompts) and its standard error ``(S, nL)``."""
    cfg = result.config
    task = cfg.task()
    gaussian = RegressionTask(task.d, task.covariance, task.task_var, task.noise_var, task.sampler)
    bayes = [bayes_risk(L, task, n_samples=n_bayes_samples,
                        seed=seeding.stream_seed(seeding.REFERENCE_SEED, "bayes", L))
             for L in cfg.lengths]
    out = {"lengths": list(cfg.lengths), "seeds": list(cfg.seeds), "covariates": cfg.covariates,
           "final_prompts": int(evaluation["n_prompts"]),
           "noise_floor": task.noise_var / 2, "bayes": [b[0] for b in bayes], "bayes_se": [b[1] for b in bayes],
           "optimal_linear": [optimal_linear_risk(L, task) for L in cfg.lengths],
           "optimal_linear_gaussian": [optimal_linear_risk(L, gaussian) for L in cfg.lengths],
           "risk": {}, "risk_se": {}}
    risk, se = np.asarray(evaluation["risk"]), np.asarray(evaluation["risk_se"])
    for a, model in enumerate(cfg.models):
        out["risk"][model] = np.where(result.diverged[:, :, a], np.nan, risk[:, :, a]).tolist()
        out["risk_se"][model] = se[:, :, a].tolist()
    out["linear_exact"] = np.asarray(evaluation["linear_exact"]).tolist()
    out["paired_difference"] = np.asarray(evaluation["paired_difference"]).tolist()
    out["paired_difference_se"] = np.asarray(evaluation["paired_difference_se"]).tolist()
    out["diverged"] = {model: result.diverged[:, :, a].sum(0).tolist() for a, model in enumerate(cfg.models)}
    return out


def beyond_readings(result: TrainResult, evaluation: dict, preset: str, n_bayes_samples: int = 20_000) -> dict:
    """What Chapter 6 reads from a trained sweep and its final evaluation
    (:func:`~softmax_as_linear.engine.evaluation.final_evaluation` on ``BEYOND_FINAL_PROMPTS[preset]`` prompts):
    :func:`limit_tracking`, :func:`limit_comparison`, :func:`concentration_check`, :func:`final_comparison` and the
    risks along training, as a JSON-ready dict without provenance; ``"complete"`` is False for a stopped run."""
    checks.one_of("preset", preset, PRESETS)
    config = result.config
    return {"experiment": "beyond_gaussian", "covariates": config.covariates, "preset": preset,
            "complete": result.complete,
            "steps": result.steps.tolist(), "times": result.times.tolist(),
            "eval_risk": {model: result.eval_risk[:, :, a].tolist() for a, model in enumerate(config.models)},
            "tracking": limit_tracking(result), "limits": limit_comparison(result, BEYOND_LIMIT_SAMPLES[preset]),
            "concentration": concentration_check(result),
            "final": final_comparison(result, evaluation, n_bayes_samples)}


def beyond_provenance(result: TrainResult, preset: str, device, wall_seconds: float, train_wall_seconds: float) -> dict:
    """Where a Chapter 6 result came from: :func:`~softmax_as_linear.core.provenance.provenance` (device, torch, commit,
    uncommitted changes, wall time), the device's name, the preset, every setting, the training path, training time,
    the final evaluation's and the limit estimates' sample sizes and the date."""
    return {**provenance(device, wall_seconds), "device_name": device_name(device), "preset": preset,
            "settings": result.config.as_dict(), "engine_path": result.engine_path,
            "training_seconds": round(float(result.seconds), 1), "train_wall_seconds": round(train_wall_seconds, 1),
            "final_prompts": BEYOND_FINAL_PROMPTS[preset], "limit_samples": BEYOND_LIMIT_SAMPLES[preset],
            "date": utc_now()}


def beyond_experiment(covariates: str = "uniform", preset: str = "lecture", device="auto", progress: bool = False,
                      checkpoint=None, should_stop=None, n_bayes_samples: int = 20_000, threads: int | None = 1,
                      **overrides) -> dict:
    """Train the Chapter 6 sweep of the covariate law ``covariates`` at ``preset`` scale and read it
    (:func:`beyond_readings`), with its provenance (:func:`beyond_provenance`). ``overrides`` replace fields of the
    preset's configuration (e.g. ``seeds``, ``steps``) and are listed in the provenance; ``checkpoint``/``should_stop``
    as in :func:`~softmax_as_linear.engine.train.train`. On a CPU the sweep trains on ``threads`` compute threads
    (default one, the next batch being drawn on another core: the fastest setting on a 2-core CPU, see
    ``benchmarks/README.md``; None keeps torch's setting). A JSON-ready dict; ``"complete"`` is False for a
    stopped run. The command line's ``reproduce beyond`` writes these files, with resume and shards."""
    checks.one_of("covariates", covariates, COVARIATES)
    checks.one_of("preset", preset, PRESETS)
    config = beyond_config(preset, covariates, **overrides)
    device = resolve_device(device)
    start = time.monotonic()
    before = torch.get_num_threads()
    if device.type == "cpu" and threads is not None:
        torch.set_num_threads(checks.positive_int("threads", threads))
    try:
        result = train(config, device=device, progress=progress, checkpoint=checkpoint, should_stop=should_stop)
    finally:
        torch.set_num_threads(before)
    trained = time.monotonic() - start
    evaluation = final_evaluation(result, BEYOND_FINAL_PROMPTS[preset], device=device)
    data = beyond_readings(result, evaluation, preset, n_bayes_samples)
    data["provenance"] = {**beyond_provenance(result, preset, device, time.monotonic() - start, trained),
                          "overrides": _jsonable_overrides(overrides)}
    return data


def _jsonable_overrides(overrides: dict) -> dict:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in overrides.items()}


def result_name(covariates: str, preset: str = "paper") -> str:
    """File name of a Chapter 6 result (:func:`~softmax_as_linear.experiments.file_names.beyond_file`)."""
    return beyond_file(covariates, preset)


def reproduce_command(covariates: str, preset: str = "paper") -> str:
    """The command that writes a Chapter 6 result
    (:func:`~softmax_as_linear.experiments.file_names.beyond_command`)."""
    return beyond_command(covariates, preset)


def saved_result(covariates: str, preset: str = "paper", folder=None) -> dict | None:
    """The saved Chapter 6 result of the covariate law ``covariates`` at ``preset`` scale, or the largest reduced run of
    that preset, or ``None`` (:func:`~softmax_as_linear.experiments.file_names.saved_beyond`)."""
    return saved_beyond(covariates, preset, folder)


__all__ = ["beyond_experiment", "beyond_provenance", "beyond_readings", "concentration_check", "final_comparison",
           "limit_comparison", "limit_tracking", "reproduce_command", "result_name", "saved_result"]

