"""The data of the paper's figures: the training figures (2-4 isotropic, 6-8 anisotropic) assembled from
one sweep, and Figures 1 and 5 (softmax against linear attention at the initialisation).

A sweep (:func:`softmax_as_linear.train.train`, :class:`~softmax_as_linear.sweep.TrainResult`) records every run along training; each figure is a
view of it plus the reference risks of :mod:`softmax_as_linear.icl`. The functions return small
JSON-ready dicts, used both by the chapters (lecture preset, computed live) and by the reproduction
command (paper preset, saved under ``results/``). All risks are the theory's R = MSE / 2.
"""
from __future__ import annotations

import numpy as np

from . import _checks, seeding
from .icl import SAMPLERS, bayes_risk, optimal_linear_risk
from .sweep import TrainResult

PAPER_FIGURES = {"fig2": ("isotropic", "final"), "fig3": ("isotropic", "gap"), "fig4": ("isotropic", "trajectory"),
                 "fig6": ("kms", "final"), "fig7": ("kms", "gap"), "fig8": ("kms", "trajectory")}


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
    (:mod:`~softmax_as_linear.seeding`), the same for every experiment."""
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

    With ``evaluation`` (:func:`~softmax_as_linear.evaluation.final_evaluation` of ``result``), the final
    risk of a run is that of its final parameters on a large fresh set of prompts (the same for softmax and
    linear at a given ``L`` and seed), with its standard error; linear attention also gets its exact risk
    ``linear_exact_per_seed``. Without it, the final risk is the held-out risk averaged over the last
    ``tail`` fraction of the records (SGD keeps fluctuating around its limit; the held-out set is small).
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
        label = f"R = MSE/2 on {cfg.eval_prompts} held-out prompts per seed, mean of the last {k} records"
    else:
        per_seed = np.asarray(evaluation["risk"], dtype=float)
        label = f"R = MSE/2 of the final parameters on {int(evaluation['n_prompts'])} fresh prompts per seed and L"
    per_seed = np.where(result.diverged, np.nan, per_seed)
    out = {"figure": "final risk", "risk": label, "lengths": list(cfg.lengths),
           "seeds": list(cfg.seeds), "steps": int(result.steps[-1]), "complete": result.complete,
           "covariance": cfg.covariance, "sampler": cfg.sampler}
    for a, name in enumerate(cfg.activations):
        out[name] = _seed_mean(per_seed[:, :, a]).tolist()
        out[f"{name}_per_seed"] = per_seed[:, :, a].tolist()
        out[f"{name}_diverged"] = result.diverged[:, :, a].sum(0).tolist()
        if evaluation is not None:
            out[f"{name}_se_per_seed"] = np.asarray(evaluation["risk_se"])[:, :, a].tolist()
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


def risk_trajectories(result: TrainResult, lengths=None, n_bayes_samples: int = 20_000) -> dict:
    """Figure 4 / 8: held-out risk along training for several ``L``, both activations."""
    chosen = _pick_lengths(result, lengths)
    cfg = result.config
    out = {"figure": "risk along training", "risk": f"R = MSE/2 on {cfg.eval_prompts} held-out prompts per seed",
           "lengths": chosen, "seeds": list(cfg.seeds), "steps": result.steps.tolist(), "complete": result.complete,
           "covariance": cfg.covariance, "sampler": cfg.sampler}
    index = [cfg.lengths.index(L) for L in chosen]
    for a, name in enumerate(cfg.activations):
        out[name] = [_seed_mean(result.eval_risk[:, i, a]).tolist() for i in index]
        out[f"{name}_per_seed"] = _compact(result.eval_risk[:, index, a])
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
    """Where a sweep's figures came from: :func:`provenance` (device, torch, commit, wall time, load) plus
    the device's name, the preset and every setting of the sweep (lr, batch, steps, eval sizes, sampler,
    seeds), its training time, the size of the final evaluation set and the date (UTC)."""
    import datetime
    import platform

    import torch

    device = torch.device(device)
    name = platform.processor() or platform.machine()
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        try:
            with open("/proc/cpuinfo") as info:
                name = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
        except (OSError, StopIteration):
            pass
    return {**provenance(device, wall_seconds), "device_name": name, "preset": preset,
            "settings": result.config.as_dict(), "training_seconds": round(float(result.seconds), 1),
            "final_prompts": None if evaluation is None else int(evaluation["n_prompts"]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def figure_data(name: str, result: TrainResult, n_bayes_samples: int = 20_000, evaluation: dict | None = None) -> dict:
    """The artifact of paper figure ``name`` (``"fig2"`` ... ``"fig8"``) from its sweep (and, for Figures
    2 and 6, its :func:`~softmax_as_linear.evaluation.final_evaluation`)."""
    _checks.one_of("figure", name, tuple(PAPER_FIGURES))
    covariance, kind = PAPER_FIGURES[name]
    if result.config.covariance != covariance:
        raise ValueError(f"{name} needs a {covariance!r} sweep, got {result.config.covariance!r}")
    if kind == "final":
        return final_risks(result, n_bayes_samples=n_bayes_samples, evaluation=evaluation)
    if kind == "gap":
        return parameter_gaps(result)
    return risk_trajectories(result, n_bayes_samples=n_bayes_samples)


def reproduce_command(name: str, preset: str = "paper", sampler: str = "paper", seeds: int | None = None) -> str:
    """The command line that writes the artifact of figure ``name`` at ``preset`` scale, with the
    other figures of its sweep (one training serves them all); Figures 1 and 5 need no training.
    ``sampler`` and ``seeds`` (a number of seeds) add ``--sampler`` / ``--seeds`` for the training figures."""
    _checks.one_of("figure", name, (*PAPER_FIGURES, *CONCENTRATION_FIGURES))
    _checks.one_of("sampler", sampler, SAMPLERS)
    if name in CONCENTRATION_FIGURES:
        return f"python -m softmax_as_linear reproduce {name} --preset {preset}"
    siblings = " ".join(f for f, (covariance, _) in PAPER_FIGURES.items() if covariance == PAPER_FIGURES[name][0])
    extra = ("" if sampler == "paper" else f" --sampler {sampler}") + ("" if seeds is None else f" --seeds {seeds}")
    return f"python -m softmax_as_linear reproduce {siblings} --preset {preset}{extra}"


def result_name(name: str, preset: str = "paper", sampler: str = "paper") -> str:
    """File name of a figure's artifact: ``<name>_<preset>.json``, or ``<name>_<preset>_published.json``
    for a training figure drawn with the published sampler."""
    _checks.one_of("sampler", sampler, SAMPLERS)
    return f"{name}_{preset}{'' if sampler == 'paper' else '_' + sampler}.json"


def saved_figure(name: str, preset: str = "paper", folder=None, required: bool = False,
                 sampler: str = "paper") -> dict | None:
    """The artifact ``<name>_<preset>.json`` written by the reproduction command, from ``folder`` or by
    default from the results folder, then the copy shipped with the package
    (:func:`~softmax_as_linear.artifacts.find_result`). When it has not been generated yet: ``None``,
    or with ``required`` a ``FileNotFoundError`` naming the file and the command that writes it."""
    from .artifacts import find_result, load_json, load_result

    _checks.one_of("figure", name, (*PAPER_FIGURES, *CONCENTRATION_FIGURES))
    filename = result_name(name, preset, sampler)
    if required:
        return load_result(filename, folder, command=reproduce_command(name, preset, sampler))
    path = find_result(filename, folder)
    return None if path is None else load_json(path)


def concentration_along_training(result: TrainResult, activation: str = "softmax", L: int | None = None,
                                 seed: int | None = None, lengths=(10, 40, 160, 640), every: int = 1,
                                 n_prompts: int = 512, data_seed: int = 0) -> dict:
    r"""Stability of concentration along training (paper, Section 4): the gaps between finite-``L``
    softmax attention and its infinite-prompt limit at the parameters one run visits.

    Takes the recorded trajectory :math:`(U(t), V(t))` of the run (``activation``, trained at ``L``,
    default the longest prompts of the sweep; ``seed``) every ``every`` records (and the last), and
    estimates there, for each evaluation length in ``lengths``, the mean squared output gap and
    gradient gap of :func:`~softmax_as_linear.concentration.trajectory_gaps` on ``n_prompts``
    prompts of the run's task (drawn with ``data_seed``).

    Returns a JSON-ready dict: ``times``, ``steps`` of the records used, ``norm_U``
    (:math:`\|U(t)\|_F`), ``lengths``, ``output`` and ``gradient`` (``mean``/``low``/``high`` as
    ``(nL, T)`` lists, and ``sup``: the largest mean along the trajectory for each ``L``), and the settings.
    """
    from .concentration import trajectory_gaps

    cfg = result.config
    L = cfg.lengths[-1] if L is None else L
    s, l, a = result.index(activation, L, seed)
    every = _checks.positive_int("every", every)
    if result.diverged[s, l, a]:
        raise ValueError(f"the {activation} run at L = {L} diverged; choose another run")
    picked = sorted(set(range(0, result.steps.size, every)) | {result.steps.size - 1})
    U, V = (np.asarray(m[s, l, a])[picked] for m in result.uv())
    gaps = trajectory_gaps(cfg.task(), U, V, lengths, n_prompts=n_prompts, seed=data_seed)
    return {"figure": "concentration along training", "activation": activation, "trained_length": L,
            "seed": cfg.seeds[s], "parametrisation": cfg.parametrisation, "init": cfg.init,
            "covariance": cfg.covariance, "steps": result.steps[picked].tolist(),
            "times": result.times[picked].tolist(), **gaps}


# ---------------------------------------------------------------------------------------------
# Figures 1 and 5: softmax against normalised linear attention at the initialisation
# ---------------------------------------------------------------------------------------------

CONCENTRATION_FIGURES = {"fig1": "isotropic", "fig5": "kms"}
"""Figure 1 (Section 6, isotropic inputs) and Figure 5, which this course takes to be its KMS counterpart.

The paper's text describes Figures 6-8 as the KMS versions of Figures 2-4 (Appendix A.2.2) but never
describes Figure 5; that Figure 5 repeats Figure 1 with KMS inputs is an inference, not the paper's word."""


def _git(*args: str) -> str | None:
    """The output of ``git args`` run in the package's folder, or None outside a checkout."""
    import pathlib
    import subprocess

    try:
        out = subprocess.run(["git", *args], cwd=pathlib.Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def provenance(device, seconds: float) -> dict:
    """Where and how a result was computed: device, machine, torch version, commit (and whether the source
    tree had uncommitted changes), wall time and the load average at the end (the machine may be shared).

    The environment variable ``SOFTMAX_AS_LINEAR_COMMIT``, when set, names the commit instead of git (a copy
    of the source tree on another machine may carry a stale ``.git``); ``uncommitted_changes`` is then
    unknown (None)."""
    import os
    import platform

    import torch

    device = str(device)
    commit, changes = os.environ.get("SOFTMAX_AS_LINEAR_COMMIT"), None
    if not commit:
        commit = _git("rev-parse", "HEAD") or None
        status = _git("status", "--porcelain", "--untracked-files=no")
        changes = None if status is None else bool(status)
    where = {"device": device, "torch": torch.__version__, "python": platform.python_version(),
             "commit": commit, "uncommitted_changes": changes, "wall_seconds": round(float(seconds), 1),
             "machine": platform.machine(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if device.startswith("cuda") and torch.cuda.is_available():
        where["gpu"] = torch.cuda.get_device_name()
    if hasattr(os, "getloadavg"):
        where["load_average_at_end"] = round(os.getloadavg()[0], 2)
    return where


def concentration_figure(name: str = "fig1", preset: str = "lecture", device="auto", progress: bool = False,
                         covariance: str | None = None) -> dict:
    r"""Figure 1 (isotropic inputs) or Figure 5 (KMS inputs, :math:`\rho = 0.5`): softmax against
    normalised linear attention at the random initialisation of the training experiments.

    Setting of Section 6 / Appendix A.2.2: the four-matrix model with PyTorch's default initialisation
    (stream ``"init"`` of seed 327, :mod:`~softmax_as_linear.seeding`; the same weights for both
    activations), regression task with :math:`d = 5`, :math:`\tau^2 = 1/d`, :math:`s^2 = 0.1`, and
    :math:`\Sigma = I` (``"isotropic"``) or the KMS matrix (``"kms"``; prompt and query inputs
    :math:`N(0, \Sigma)`). ``covariance`` defaults to the one of ``name``
    (:data:`CONCENTRATION_FIGURES`). For every prompt length, ``n_batches`` batches of ``batch``
    fresh prompts (stream ``"prompts"`` at (327, L)) give, through
    :func:`~softmax_as_linear.concentration.icl_batch_gaps`,

    - ``output``: mean over prompts of :math:`(\hat y_{\mathrm{soft}} - \hat y_{\mathrm{lin}})^2`;
    - ``grad_weights`` / ``grad_uv``: mean over batches of the squared norm of the difference of the
      batch-MSE gradients (torch's ``MSELoss`` = :math:`2\hat R`) with respect to the four matrices /
      to :math:`(U, V)`;
    - ``grad_norm_linear``: mean squared norm of the linear model's four-matrix gradient;
    - ``relative_grad``: ``grad_weights / grad_norm_linear``, the ratio of the two means over batches
      (the gradient gap relative to the size of the gradient), with a delta-method interval
      (:func:`~softmax_as_linear.stats.ratio_interval`);
    - ``ess``: mean effective sample size of the softmax weights;

    each as ``{"mean", "low", "high", "level"}`` lists (95% Student-t intervals over prompts or
    batches), with the settings and :func:`provenance` (device, torch, commit, wall time).
    Presets: :data:`~softmax_as_linear.presets.CONCENTRATION_PRESETS`.
    """
    import time

    import torch

    from .concentration import icl_batch_gaps
    from .devices import resolve_device
    from .icl import RegressionTask
    from .models import AttentionModel
    from .presets import CONCENTRATION_PRESETS, CONCENTRATION_SEED
    from .stats import estimate, ratio_interval

    _checks.one_of("name", name, tuple(CONCENTRATION_FIGURES))
    _checks.one_of("preset", preset, tuple(CONCENTRATION_PRESETS))
    covariance = CONCENTRATION_FIGURES[name] if covariance is None else covariance
    _checks.one_of("covariance", covariance, ("isotropic", "kms"))
    config = CONCENTRATION_PRESETS[preset]
    dev = resolve_device(device)
    started = time.perf_counter()
    task = RegressionTask.isotropic(5) if covariance == "isotropic" else RegressionTask.kms(5, 0.5)
    init_seed = seeding.stream_seed(CONCENTRATION_SEED, "init")
    model = AttentionModel(task.D, "softmax", seed=init_seed).to(device=dev, dtype=torch.float64)
    names = ("output", "grad_weights", "grad_uv", "grad_norm_linear", "ess")
    rows = {name_: [] for name_ in names}
    relative = []
    lengths = list(config["lengths"])
    loop = lengths
    if progress:
        from tqdm.auto import tqdm
        loop = tqdm(lengths, desc=f"{name} ({preset}, {covariance})")
    for L in loop:
        g = seeding.generator(CONCENTRATION_SEED, "prompts", L, device=dev)
        per_batch = [icl_batch_gaps(model, task, L, config["batch"], g) for _ in range(config["n_batches"])]
        for key in names:
            rows[key].append(torch.cat([b[key].reshape(-1) for b in per_batch]).cpu().numpy())
        relative.append(ratio_interval(rows["grad_weights"][-1], rows["grad_norm_linear"][-1], 0.95))
    U, _ = model.uv()
    result = {key: estimate(rows[key], 0.95).as_dict() for key in rows}
    mean, low, high = (list(v) for v in zip(*relative))
    result["relative_grad"] = {"mean": mean, "low": low, "high": high, "level": 0.95}
    result.update(
        figure=name, preset=preset, lengths=lengths,
        settings=dict(d=task.d, D=task.D, task_var=task.task_var, noise_var=task.noise_var, covariance=covariance,
                      rho=0.5 if covariance == "kms" else None, sampler=task.sampler,
                      model=f"AttentionModel(6, activation, seed={init_seed}), PyTorch default init",
                      seed=CONCENTRATION_SEED, init_seed=init_seed,
                      data_seed="stream 'prompts' of seeding at (327, L) for each length", batch=config["batch"],
                      n_batches=config["n_batches"], n_prompts=config["batch"] * config["n_batches"],
                      loss="batch MSE (torch MSELoss) = 2 x the theory's risk R",
                      gradients="four matrices (W_Q, W_K, W_V, W_O) and (U, V) with U = W_K^T W_Q / sqrt(D)",
                      norm_U=float(torch.linalg.matrix_norm(U.detach(), ord=2)), dtype="float64"),
        provenance=provenance(dev, time.perf_counter() - started))
    if name == "fig5":
        result["identification"] = ("inferred: the paper's text (Appendix A.2.2) describes Figures 6-8 as the KMS "
                                    "versions of Figures 2-4 and never describes Figure 5; this is Figure 1 with KMS inputs")
    return result


def figure1(preset: str = "lecture", device="auto", progress: bool = False) -> dict:
    """Figure 1: :func:`concentration_figure` with isotropic inputs."""
    return concentration_figure("fig1", preset, device, progress)


def figure5(preset: str = "lecture", device="auto", progress: bool = False) -> dict:
    """Figure 5 (inferred to be the KMS counterpart of Figure 1): :func:`concentration_figure` with KMS inputs."""
    return concentration_figure("fig5", preset, device, progress)
