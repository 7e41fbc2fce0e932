"""The data of the paper's training figures (2-4 isotropic, 6-8 anisotropic), assembled from one sweep.

A sweep (:func:`~softmax_as_linear.engine.train.train`, :class:`~softmax_as_linear.engine.sweep.TrainResult`)
records every run along training; each figure is a view of it plus the reference risks of
:mod:`~softmax_as_linear.theory.regression`. The functions return small JSON-ready dicts, used both by the
chapters (lecture preset, computed live) and by the reproduction command (paper preset, saved under
``results/``). All risks are the theory's R = MSE / 2. The files' names, loaders and commands are those of
:mod:`~softmax_as_linear.experiments.result_files` (``saved_figure``, ``result_name`` and ``reproduce_command`` are
its names here too).
"""
from __future__ import annotations

import numpy as np

from ..core import checks, seeding
from ..core.provenance import device_name, provenance, utc_now
from ..engine.sweep import TrainResult
from ..registry import TRAINING_FIGURES
from ..theory.risks import bayes_risk, optimal_linear_risk
from .file_names import figure_command as reproduce_command  # noqa: F401  (the chapters' names)
from .file_names import figure_file as result_name  # noqa: F401
from .file_names import saved_figure  # noqa: F401
from .uncertainty import trajectory_changes


def _seed_mean(values: np.ndarray) -> np.ndarray:
    """Mean over seeds (axis 0) ignoring diverged runs (NaN); NaN where every seed diverged."""
    with np.errstate(invalid="ignore"):
        count = np.sum(~np.isnan(values), axis=0)
        total = np.nansum(values, axis=0)
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _pick_lengths(result: TrainResult, lengths) -> list[int]:
    available = result.config.lengths
    if lengths is None:
        wanted = [L for L in (10, 50, 100, 200, 500, 1000) if L in available]
        return wanted or list(available)
    missing = [L for L in lengths if L not in available]
    if missing:
        raise ValueError(f"lengths {missing} are not in the sweep (it has {available})")
    return list(lengths)


def bayes_seed(L: int) -> int:
    """Seed of the Monte Carlo estimate of the Bayes risk at ``L``: stream ``"bayes"`` of the reference seed
    (:mod:`~softmax_as_linear.core.seeding`), the same for every experiment."""
    return seeding.stream_seed(seeding.REFERENCE_SEED, "bayes", L)


def baselines(lengths, task, n_bayes_samples: int = 20_000) -> dict:
    """Reference risks for each ``L``: label-noise floor, best normalised linear attention, Bayes (ridge)."""
    bayes = [bayes_risk(L, task, n_samples=n_bayes_samples, seed=bayes_seed(L)) for L in lengths]
    return {"noise_floor": task.noise_var / 2,
            "optimal_linear": [optimal_linear_risk(L, task) for L in lengths],
            "bayes": [b[0] for b in bayes], "bayes_se": [b[1] for b in bayes]}


def final_risks(result: TrainResult, tail: float = 0.1, n_bayes_samples: int = 20_000,
                evaluation: dict | None = None) -> dict:
    """Figure 2 / 6: risk at the end of training against ``L``, with the three baselines.

    With ``evaluation`` (:func:`~softmax_as_linear.engine.evaluation.final_evaluation` of ``result``), the final
    risk of a run is that of its final parameters on a large fresh set of prompts (the same for softmax and
    linear at a given ``L`` and seed), with its standard error; linear attention also gets its exact risk
    ``linear_exact_per_seed``. Without it, the final risk is the held-out risk averaged over the last
    ``tail`` fraction of the records (SGD keeps fluctuating around its limit; the held-out set is small), and
    ``*_se_per_seed`` is the mean of those records' measured standard errors, an upper bound on the standard
    error of their average (they share their prompts).
    Runs that diverged are NaN and counted separately. ``softmax`` / ``linear`` are seed means;
    ``*_per_seed`` are ``(S, nL)``.
    """
    if not 0 < tail <= 1:
        raise ValueError(f"tail must lie in (0, 1], got {tail!r}")
    cfg = result.config
    if evaluation is None:
        k = max(1, int(round(tail * result.steps.size)))
        with np.errstate(invalid="ignore"):
            per_seed = np.nanmean(result.eval_risk[..., -k:], axis=-1) if k > 1 else result.eval_risk[..., -1]
            # a mean of k records on the same prompts: its standard error is at most the mean of theirs
            per_seed_se = np.nanmean(result.eval_se[..., -k:], axis=-1)
        label = f"R = MSE/2 on {cfg.eval_prompts} held-out prompts per seed, mean of the last {k} records"
    else:
        per_seed = np.asarray(evaluation["risk"], dtype=float)
        label = f"R = MSE/2 of the final parameters on {int(evaluation['n_prompts'])} fresh prompts per seed and L"
    per_seed = np.where(result.diverged, np.nan, per_seed)
    out = {"figure": "final risk", "risk": label, "lengths": list(cfg.lengths),
           "seeds": list(cfg.seeds), "steps": int(result.steps[-1]), "complete": result.complete,
           "covariance": cfg.covariance, "sampler": cfg.sampler}
    for a, name in enumerate(cfg.models):
        out[name] = _seed_mean(per_seed[:, :, a]).tolist()
        out[f"{name}_per_seed"] = per_seed[:, :, a].tolist()
        out[f"{name}_diverged"] = result.diverged[:, :, a].sum(0).tolist()
        if evaluation is not None:
            out[f"{name}_se_per_seed"] = np.asarray(evaluation["risk_se"])[:, :, a].tolist()
        else:
            out[f"{name}_se_per_seed"] = np.where(result.diverged[:, :, a], np.nan, per_seed_se[:, :, a]).tolist()
    if evaluation is not None:
        out["final_prompts"] = int(evaluation["n_prompts"])
        out["linear_exact_per_seed"] = np.asarray(evaluation["linear_exact"]).tolist()
        out["paired_difference_per_seed"] = np.asarray(evaluation["paired_difference"]).tolist()
        out["paired_difference_se_per_seed"] = np.asarray(evaluation["paired_difference_se"]).tolist()
    out.update(baselines(cfg.lengths, cfg.task(), n_bayes_samples))
    return out


def parameter_gaps(result: TrainResult, lengths=None) -> dict:
    """Figure 3 / 7: :math:`\\|\\theta_{soft} - \\theta_{lin}\\|^2` along training for several ``L``."""
    chosen = _pick_lengths(result, lengths)
    gap = result.parameter_gap()
    index = [result.config.lengths.index(L) for L in chosen]
    rows = [_seed_mean(gap[:, i]).tolist() for i in index]
    return {"figure": "parameter gap", "lengths": chosen, "steps": result.steps.tolist(),
            "gap": rows, "gap_per_seed": _compact(gap[:, index]), "seeds": list(result.config.seeds),
            "complete": result.complete, "covariance": result.config.covariance, "sampler": result.config.sampler}


def risk_trajectories(result: TrainResult, lengths=None, n_bayes_samples: int = 20_000,
                      change_prompts: int | None = None, device="cpu") -> dict:
    """Figure 4 / 8: held-out risk along training for several ``L``, both activations, with the measured standard
    error of every record (``<activation>_se_per_seed``).

    With ``change_prompts``, also ``"changes"``: how much each run's risk fell over the last half, quarter and
    tenth of training, both records scored on that many fresh prompts, paired
    (:func:`~softmax_as_linear.experiments.uncertainty.trajectory_changes`).
    """
    chosen = _pick_lengths(result, lengths)
    cfg = result.config
    out = {"figure": "risk along training", "risk": f"R = MSE/2 on {cfg.eval_prompts} held-out prompts per seed",
           "lengths": chosen, "seeds": list(cfg.seeds), "steps": result.steps.tolist(), "complete": result.complete,
           "covariance": cfg.covariance, "sampler": cfg.sampler, "eval_prompts": cfg.eval_prompts}
    index = [cfg.lengths.index(L) for L in chosen]
    for a, name in enumerate(cfg.models):
        out[name] = [_seed_mean(result.eval_risk[:, i, a]).tolist() for i in index]
        out[f"{name}_per_seed"] = _compact(result.eval_risk[:, index, a])
        out[f"{name}_se_per_seed"] = _compact(result.eval_se[:, index, a])
    if change_prompts is not None:
        out["changes"] = trajectory_changes(result, chosen, change_prompts, device)
    out.update(baselines(chosen, cfg.task(), n_bayes_samples))
    return out


def _compact(values: np.ndarray) -> list:
    """Per-seed curves for a JSON file: 5 significant digits (NaN stays NaN)."""
    values = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = 10.0 ** (4 - np.floor(np.log10(np.abs(np.where(values == 0, 1, values)))))
        return np.where(np.isfinite(values), np.round(values * scale) / scale, values).tolist()


def sweep_provenance(result: TrainResult, preset: str | None = None, device="cpu", wall_seconds: float = 0.0,
                     evaluation: dict | None = None) -> dict:
    """Where a sweep's figures came from: :func:`~softmax_as_linear.core.provenance.provenance` (device, torch, commit,
    wall time, load) plus the device's name, the preset and every setting of the sweep (lr, batch, steps, eval sizes,
    sampler, seeds), the training path that ran (``engine_path``), its training time, the size of the final evaluation
    set and the date (UTC)."""
    return {**provenance(device, wall_seconds), "device_name": device_name(device), "preset": preset,
            "settings": result.config.as_dict(), "engine_path": result.engine_path,
            "training_seconds": round(float(result.seconds), 1),
            "final_prompts": None if evaluation is None else int(evaluation["n_prompts"]), "date": utc_now()}


def figure_data(name: str, result: TrainResult, n_bayes_samples: int = 20_000, evaluation: dict | None = None,
                change_prompts: int | None = None, device="cpu") -> dict:
    """The artifact of paper figure ``name`` (``"fig2"`` ... ``"fig8"``) from its sweep (and, for Figures
    2 and 6, its :func:`~softmax_as_linear.engine.evaluation.final_evaluation`; for Figures 4 and 8, with
    ``change_prompts``, the paired changes of :func:`risk_trajectories`)."""
    checks.one_of("figure", name, tuple(TRAINING_FIGURES))
    covariance, kind = TRAINING_FIGURES[name]
    if result.config.covariance != covariance:
        raise ValueError(f"{name} needs a {covariance!r} sweep, got {result.config.covariance!r}")
    if kind == "final":
        return final_risks(result, n_bayes_samples=n_bayes_samples, evaluation=evaluation)
    if kind == "gap":
        return parameter_gaps(result)
    return risk_trajectories(result, n_bayes_samples=n_bayes_samples, change_prompts=change_prompts, device=device)
