r"""Chapter 8's experiment: softmax and linear attention trained on a nonlinear in-context task, with its references
and the learned window (what ``python -m softmax_as_linear reproduce nonlinear`` runs).

One sweep (:class:`~softmax_as_linear.engine.sweep.TrainConfig` with ``labels="cosine"``: random-cosine-feature
functions of inputs on the circle or sphere, :class:`~softmax_as_linear.theory.cosine_task.CosineTask`) trains both
activations at every prompt length, paired (same initialisation and batches per seed), checkpointed so that an
interrupted run resumes where it stopped. The result file ``nonlinear_<preset>.json`` holds:

- ``trajectories``: steps, held-out risk and its per-prompt standard deviation ``(S, nL, nA, T)``, and the window
  :math:`w = \operatorname{tr}(U_{xx})/d` of every run at every record;
- ``final``: each run's risk on fresh prompts (stream ``"evaluation"``) with its standard error, and the paired
  difference softmax minus linear on the same prompts;
- ``windows``: the final parameters read as a kernel smoother: :math:`w`, the anisotropy
  :math:`\|U_{xx} - wI\|_F / \|U_{xx}\|_F`, the label-reading score row :math:`\|U_{y,x}\|`, the value weights
  :math:`v_y` and :math:`\|v_x\|`; the exponent of :math:`w` against :math:`L` fitted per seed (least squares of
  :math:`\log w` on :math:`\log L`, over the runs that read as kernel smoothers, :data:`KERNEL_ANISOTROPY`) with the
  Student-t interval of its mean over seeds;
- ``references`` at every :math:`L`: the :math:`L`-Bayes risk (the exact Gaussian-process posterior,
  :meth:`~softmax_as_linear.theory.cosine_task.CosineTask.bayes_risk`), Nadaraya-Watson with its best :math:`w`
  (:func:`~softmax_as_linear.theory.kernel_smoother.best_bandwidth`), the best predictor affine in the query that knows
  :math:`f` (:meth:`~softmax_as_linear.theory.cosine_task.CosineTask.best_affine_risk`), the noise floor and the risk
  of predicting zero;
- ``dependence``: the window of softmax attention trained at one length for other frequency scales and noise levels
  (:func:`window_dependence`), with the best Nadaraya-Watson window of each task;
- ``provenance``: device, torch, commit, wall time, the preset and every setting, the seeds, the training path.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np
import torch

from ..core import checks, seeding, stats
from ..core.artifacts import results_folder, save_json
from ..core.devices import resolve_device
from ..core.provenance import provenance
from ..engine.sweep import TrainConfig
from ..engine.train import resolved, train
from ..registry import PRESETS
from ..theory.kernel_smoother import best_bandwidth
from ..theory.models import predict_unchecked
from . import presets
from .result_files import nonlinear_command, nonlinear_file
from .stages import discard, train_stage, up_to_date


def nonlinear_config(preset: str = "lecture", **overrides) -> TrainConfig:
    """The training sweep of ``preset`` (:data:`~softmax_as_linear.experiments.presets.NONLINEAR_SETTINGS`,
    :data:`~softmax_as_linear.experiments.presets.NONLINEAR_TASK`), fields overridden by
    ``overrides``."""
    checks.one_of("preset", preset, PRESETS)
    return TrainConfig(**{**presets.NONLINEAR_TASK, **presets.NONLINEAR_SETTINGS[preset], **overrides})


def window_readings(U: np.ndarray, V: np.ndarray, d: int) -> dict:
    r"""Parameters read as a kernel smoother: U, V ``(..., D, D)`` -> arrays ``(...)``: ``w`` :math:`=
    \operatorname{tr}(U_{xx})/d`, ``anisotropy`` :math:`\|U_{xx} - wI\|_F / \|U_{xx}\|_F`, ``label_score``
    :math:`\|U_{y,x}\|` (how much the score reads the prompt's labels), ``v_y`` and ``v_x_norm``."""
    U_xx = U[..., :d, :d]
    w = np.trace(U_xx, axis1=-2, axis2=-1) / d
    rest = U_xx - w[..., None, None] * np.eye(d)
    return {"w": w, "anisotropy": np.linalg.norm(rest, axis=(-2, -1)) / np.linalg.norm(U_xx, axis=(-2, -1)),
            "label_score": np.linalg.norm(U[..., d, :d], axis=-1), "v_y": V[..., d, d],
            "v_x_norm": np.linalg.norm(V[..., d, :d], axis=-1)}


def window_exponent(lengths, w: np.ndarray, keep: np.ndarray | None = None, level: float = 0.95) -> dict:
    r"""The exponent :math:`\beta` of :math:`w \propto L^\beta`: the least-squares slope of :math:`\log w` on
    :math:`\log L` for every seed (rows of ``w (S, nL)``), over the lengths where ``keep (S, nL)`` is True (default:
    all; a seed with fewer than 2 kept lengths gets NaN), and the Student-t interval of the mean over the fitted seeds
    (independent replicates; at least 2 needed). Returns
    ``{"per_seed", "mean", "low", "high", "level", "seeds_fitted"}``."""
    w = np.asarray(w, dtype=float)
    keep = np.ones(w.shape, dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    lx = np.log(np.asarray(lengths, dtype=float))
    if lx.size < 2 or w.shape[-1] != lx.size or keep.shape != w.shape:
        raise ValueError(f"w and keep must have shape (seeds, {lx.size}) for {lx.size} lengths (at least 2)")
    if np.any(~(w[keep] > 0)):
        raise ValueError("w must be positive where it is fitted (a power law)")
    slopes = [float(np.polyfit(lx[k], np.log(row[k]), 1)[0]) if k.sum() >= 2 else float("nan")
              for row, k in zip(w, keep)]
    fitted = [b for b in slopes if np.isfinite(b)]
    if len(fitted) < 2:
        return {"per_seed": slopes, "mean": None, "low": None, "high": None, "level": level,
                "seeds_fitted": len(fitted)}
    mean, low, high = stats.mean_interval(fitted, level)
    return {"per_seed": slopes, "mean": mean, "low": low, "high": high, "level": level, "seeds_fitted": len(fitted)}


#: A trained softmax run reads as a kernel smoother when the isotropic part dominates its input score,
#: :math:`\|U_{xx} - wI\|_F / \|U_{xx}\|_F` below this (0 for :math:`U_{xx} = wI`, 1 for a traceless one), and its
#: window is positive (:func:`kernel_smoothers`).
KERNEL_ANISOTROPY = 0.5


def kernel_smoothers(windows: dict, model: int) -> np.ndarray:
    """Which runs of column ``model`` read as kernel smoothers, ``(S, nL)`` booleans: anisotropy below
    :data:`KERNEL_ANISOTROPY` and a positive window :math:`w` (a diverged run's NaN readings are neither). ``windows``:
    the ``"windows"`` of a ``nonlinear_<preset>.json`` result, or :func:`window_readings` with a seed and a length
    axis first. The one rule of the window's fit (:func:`finish`) and of the chapter's figures."""
    anisotropy = np.asarray(windows["anisotropy"], dtype=float)[:, :, model]
    return (anisotropy < KERNEL_ANISOTROPY) & (np.asarray(windows["w"], dtype=float)[:, :, model] > 0)


def nonlinear_final_risks(result, n_prompts: int) -> dict:
    """Each run's final risk on ``n_prompts`` fresh prompts of its length (stream ``"evaluation"`` of its seed, the
    same prompts for both activations) with its standard error, and the paired difference softmax minus linear;
    computed on the CPU in float64, whatever device trained (the same numbers from every device's weights)."""
    cfg = result.config
    task = cfg.task()
    U_all, V_all = (torch.as_tensor(np.asarray(m)[:, :, :, -1], dtype=torch.float64) for m in result.uv())
    S, nL, nA = len(cfg.seeds), len(cfg.lengths), len(cfg.models)
    risk, se = np.full((S, nL, nA), np.nan), np.full((S, nL, nA), np.nan)
    diff, diff_se = np.full((S, nL), np.nan), np.full((S, nL), np.nan)
    for s, seed in enumerate(cfg.seeds):
        for l, L in enumerate(cfg.lengths):
            generator = seeding.generator(seed, "evaluation", L)
            chunk = max(1, min(n_prompts, 2_000_000 // (L * cfg.D)))
            losses, done = [[] for _ in range(nA)], 0
            while done < n_prompts:
                n = min(chunk, n_prompts - done)
                batch = task.sample(n, L, generator, dtype=torch.float64)
                for a, model in enumerate(cfg.models):
                    pred = predict_unchecked(batch.tokens, batch.query, U_all[s, l, a], V_all[s, l, a], model)
                    losses[a].append(0.5 * (pred - batch.target) ** 2)
                done += n
            per_prompt = [torch.cat(x).numpy() for x in losses]
            for a in range(nA):
                if not result.diverged[s, l, a]:
                    risk[s, l, a], se[s, l, a] = stats.mean_se(per_prompt[a])
            if nA == 2 and not result.diverged[s, l].any():
                diff[s, l], diff_se[s, l] = stats.mean_se(per_prompt[0] - per_prompt[1])
    return {"risk": risk, "risk_se": se, "difference": diff, "difference_se": diff_se, "n_prompts": n_prompts}


def references(task, lengths, n_prompts: int, progress: bool = False) -> dict:
    """The references at every length: ``bayes`` and ``nadaraya_watson`` (risks, standard errors, best ``w``), and the
    length-free ``best_affine``, ``noise_floor``, ``zero``."""
    bayes, bayes_se, nw, nw_se, nw_w = [], [], [], [], []
    for L in lengths:
        value, se = task.bayes_risk(L, n_prompts, seed=seeding.stream_seed(seeding.REFERENCE_SEED, "bayes", L))
        bayes.append(value), bayes_se.append(se)
        best = best_bandwidth(task, L, n_prompts=n_prompts,
                              seed=seeding.stream_seed(seeding.REFERENCE_SEED, "prompts", L))
        nw.append(best["risk"]), nw_se.append(best["se"]), nw_w.append(best["w"])
        if progress:
            print(f"references at L={L}: Bayes {value:.4f}, Nadaraya-Watson {best['risk']:.4f} at w={best['w']:.3g}",
                  flush=True)
    affine, affine_se = task.best_affine_risk()
    return {"lengths": list(lengths), "bayes": bayes, "bayes_se": bayes_se, "nadaraya_watson": nw,
            "nadaraya_watson_se": nw_se, "nadaraya_watson_w": nw_w, "best_affine": affine, "best_affine_se": affine_se,
            "noise_floor": task.noise_floor(), "zero": task.zero_risk(), "n_prompts": n_prompts}


def window_dependence(preset: str, device, out: pathlib.Path, deadline: float | None = None,
                      restart: bool = False, seeds: tuple[int, ...] | None = None) -> dict | None:
    r"""Softmax attention trained at one length
    (:data:`~softmax_as_linear.experiments.presets.NONLINEAR_DEPENDENCE_LENGTH`) for each (frequency scale
    :math:`\gamma`, noise :math:`s^2`) of :data:`~softmax_as_linear.experiments.presets.NONLINEAR_DEPENDENCE`, from
    the preset's seeds (or ``seeds``), each a stage of its own
    (:func:`~softmax_as_linear.experiments.stages.train_stage`): its final window :math:`w` and anisotropy per seed,
    its final held-out risk, and the best Nadaraya-Watson window :math:`w^*` of that task. Returns ``{"length",
    "settings": [[gamma, s2], ...], "w", "anisotropy", "risk" (each (settings, S)), "best_w", "complete"}``, or None
    when ``deadline`` stopped a stage (nothing is measured then)."""
    L = presets.NONLINEAR_DEPENDENCE_LENGTH[preset]
    out_w, out_a, out_r, best = [], [], [], []
    for k, (frequency, noise_var) in enumerate(presets.NONLINEAR_DEPENDENCE):
        config = nonlinear_config(preset, frequency=frequency, noise_var=noise_var, lengths=(L,), models=("softmax",),
                                  **({} if seeds is None else {"seeds": tuple(seeds)}))
        what = (f"the window's dependence at L={L}, gamma={frequency:g}, s^2={noise_var:g} ({preset} preset, seeds "
                f"{', '.join(map(str, config.seeds))})")
        result = train_stage(what, out / "checkpoints" / f"nonlinear_{preset}_dependence{k}.pt",
                             resolved(config, device), config.steps,
                             lambda **kw: train(config, device=device, progress=True, **kw), device, deadline, restart)
        if not result.complete:
            return None
        U, V = result.uv()
        readings = window_readings(np.asarray(U), np.asarray(V), config.d)
        out_w.append(readings["w"][:, 0, 0, -1]), out_a.append(readings["anisotropy"][:, 0, 0, -1])
        out_r.append(result.eval_risk[:, 0, 0, -1])
    for frequency, noise_var in presets.NONLINEAR_DEPENDENCE:
        task = nonlinear_config(preset, frequency=frequency, noise_var=noise_var).task()
        best.append(best_bandwidth(task, L, n_prompts=presets.NONLINEAR_REFERENCE_PROMPTS[preset],
                                   seed=seeding.stream_seed(seeding.REFERENCE_SEED, "prompts", L))["w"])
    for (frequency, noise_var), w, w_star in zip(presets.NONLINEAR_DEPENDENCE, out_w, best):
        print(f"window at L={L}, gamma={frequency:g}, s^2={noise_var:g}: trained w = {np.round(w, 1).tolist()},"
              f" best Nadaraya-Watson w* = {w_star:.3g}", flush=True)
    return {"length": L, "settings": [list(x) for x in presets.NONLINEAR_DEPENDENCE], "w": out_w, "anisotropy": out_a,
            "risk": out_r,
            "best_w": best, "complete": True}


#: The arrays of the result file with a seed axis first, by section: a shard holds its seeds' rows, and
#: :func:`~softmax_as_linear.experiments.shards.merge` joins them in seed order.
PER_SEED = {"trajectories": ("eval_risk", "eval_sd", "w"), "final": ("risk", "risk_se", "difference", "difference_se"),
            "windows": ("w", "anisotropy", "label_score", "v_y", "v_x_norm")}
#: The arrays of ``dependence`` with a seed axis second (settings, seeds).
DEPENDENCE_PER_SEED = ("w", "anisotropy", "risk")


def reproduce_nonlinear(preset: str = "lecture", device="auto", out=None, deadline: float | None = None,
                        restart: bool = False, dirty: bool = False,
                        shard: tuple[int, int] | None = None, seeds: tuple[int, ...] | None = None) -> pathlib.Path:
    """Train (or resume) the sweep of ``preset`` and the window's dependence, measure them and the references, and
    write ``nonlinear_<preset>.json`` atomically into ``out`` (default: the results folder). ``deadline`` (a
    ``time.monotonic()`` reading) stops training: the file then says ``"complete": false`` with the steps reached, and
    nothing is measured (the same call resumes). A complete file of the same settings is left as it is ("up to
    date"). ``restart`` trains afresh. ``dirty``: the library had uncommitted changes (recorded).

    ``shard=(k, n)`` with its ``seeds`` (:func:`~softmax_as_linear.experiments.presets.shard_seeds` of the
    preset's): train those seeds only, main sweep and dependence, into ``out`` (the caller's shard folder); the file
    then holds those seeds' rows of :data:`PER_SEED` and
    :data:`DEPENDENCE_PER_SEED`, and leaves what needs every seed or none (the window exponent, the references) to
    the merge (:func:`~softmax_as_linear.experiments.shards.merge`), which writes the file one process writes. Every
    run draws from its own seed's streams, so on a CPU the numbers are the same either way."""
    if (shard is None) != (seeds is None):
        raise ValueError("shard and seeds go together: a shard names its seeds")
    start = time.monotonic()
    device = resolve_device(device)
    out = results_folder() if out is None else pathlib.Path(out)
    seeds = nonlinear_config(preset).seeds if seeds is None else tuple(seeds)
    config = nonlinear_config(preset, seeds=seeds)
    path = out / nonlinear_file(preset)
    if not restart and up_to_date(path, _same_run(config, shard)):
        print(f"{path}: up to date")
        return path
    if restart:  # every stage's checkpoint, so that a restart stopped early leaves none of a later stage
        discard(out / "checkpoints" / f"nonlinear_{preset}{part}.pt"
                for part in ["", *(f"_dependence{k}" for k in range(len(presets.NONLINEAR_DEPENDENCE)))])
    what = f"Chapter 8's sweep ({preset} preset, seeds {', '.join(map(str, config.seeds))})"
    result = train_stage(what, out / "checkpoints" / f"nonlinear_{preset}.pt", resolved(config, device), config.steps,
                         lambda **kw: train(config, device=device, progress=True, **kw), device, deadline, restart)
    dependence = window_dependence(preset, device, out, deadline, restart, seeds) if result.complete else None
    origin = {"preset": preset, "seeds": list(config.seeds), "training_seconds": result.seconds,
              "engine_path": result.engine_path, "command": nonlinear_command(preset), "allow_dirty": bool(dirty),
              "final_prompts": presets.NONLINEAR_FINAL_PROMPTS[preset],
              "reference_prompts": presets.NONLINEAR_REFERENCE_PROMPTS[preset],
              **({} if shard is None else {"shard": f"{shard[0]}/{shard[1]}"})}
    if dependence is None:  # stopped at the deadline: nothing measured, nothing printed as final
        stopped = "the sweep" if not result.complete else "the window's dependence"
        data = {"preset": preset, "complete": False, "steps_reached": int(result.steps[-1]),
                "steps": [int(s) for s in result.steps], "stopped_in": stopped, "config": config.as_dict(),
                "models": list(config.models)}
        print(f"{what}: stopped at the time limit in {stopped} (step {int(result.steps[-1]):,} of the sweep's "
              f"{config.steps:,}); the file is partial, and the same command"
              f"{' without --restart' if restart else ''} resumes it", flush=True)
    else:
        print(f"trained: {result.seconds:.0f} s, {int(result.diverged.sum())} diverged runs; measuring", flush=True)
        U, V = result.uv()
        readings = window_readings(np.asarray(U), np.asarray(V), config.d)
        data = {
            "preset": preset, "complete": True, "steps_reached": int(result.steps[-1]),
            "config": config.as_dict(), "models": list(config.models),
            "trajectories": {"steps": result.steps, "eval_risk": result.eval_risk, "eval_sd": result.eval_sd,
                             "w": readings["w"]},
            "final": nonlinear_final_risks(result, presets.NONLINEAR_FINAL_PROMPTS[preset]),
            "windows": {**{k: v[..., -1] for k, v in readings.items()}, "kernel_anisotropy": KERNEL_ANISOTROPY},
            "dependence": dependence,
        }
        if shard is None:
            finish(data, preset, progress=True)
        else:
            data["windows"]["exponent"], data["references"], data["shard"] = None, None, f"{shard[0]}/{shard[1]}"
    data["provenance"] = {**provenance(device, time.monotonic() - start), **origin}
    save_json(path, data)
    print(f"wrote {path}", flush=True)
    return path


def _same_run(config: TrainConfig, shard):
    """``same`` for :func:`~softmax_as_linear.experiments.stages.up_to_date`: a file of ``config`` and of the same
    shard."""
    from ..core.artifacts import jsonable

    expected, part = jsonable(config.as_dict()), None if shard is None else f"{shard[0]}/{shard[1]}"
    dependence = [list(x) for x in presets.NONLINEAR_DEPENDENCE]  # the later stages' settings too
    return lambda data: data.get("shard") == part and data.get("config") == expected and \
        (data.get("dependence") or {}).get("settings") == dependence


def finish(data: dict, preset: str, progress: bool = False) -> dict:
    """Complete ``data`` (every seed's rows of :data:`PER_SEED`, arrays or lists) with what needs every seed or none:
    ``windows["exponent"]`` of the softmax runs that read as kernel smoothers (:func:`window_exponent`, None for a
    single length) and ``references`` (:func:`references`); returns ``data``."""
    config = data["config"]
    soft = list(data["models"]).index("softmax")
    final_w = np.asarray(data["windows"]["w"], dtype=float)[:, :, soft]
    kernel_like = kernel_smoothers(data["windows"], soft)
    lengths = tuple(config["lengths"])
    data["windows"]["exponent"] = window_exponent(lengths, final_w, kernel_like) if len(lengths) > 1 else None
    data["references"] = references(nonlinear_config(preset).task(), lengths,
                                    presets.NONLINEAR_REFERENCE_PROMPTS[preset], progress)
    return data


def exponent_heuristic(d: int) -> float:
    r"""The course's heuristic exponent of the best Nadaraya-Watson :math:`w` against :math:`L` for a smooth
    (twice-differentiable) :math:`f` on :math:`S^{d-1}`: squared bias :math:`\propto w^{-2}` against variance
    :math:`\propto w^{(d-1)/2}/L` gives :math:`w^* \propto L^{2/(d+3)}`."""
    return 2.0 / (checks.int_at_least("d", d, 2) + 3)
