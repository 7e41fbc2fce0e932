r"""Chapter 8's experiment: softmax and linear attention trained on a nonlinear in-context task, with its references
and the learned window (what ``python -m softmax_as_linear reproduce nonlinear`` runs).

One sweep (:class:`~softmax_as_linear.engine.sweep.TrainConfig` with ``labels="cosine"``: random-cosine-feature
functions of inputs on the circle or sphere, :class:`~softmax_as_linear.theory.cosine_task.CosineTask`) trains both
activations at every prompt length, paired (same initialisation and batches per seed), checkpointed so that an
interrupted run resumes where it stopped (its stages are declared in
:mod:`~softmax_as_linear.experiments.reproductions.nonlinear`). The result file ``nonlinear_<preset>.json`` holds:

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
  (:func:`dependence_readings`, :func:`dependence_references`), with the best Nadaraya-Watson window of each task;
- ``provenance``: device, torch, commit, wall time, the preset and every setting, the seeds, the training path.
"""
from __future__ import annotations

import numpy as np
import torch

from ..core import checks, seeding, stats
from ..engine.sweep import TrainConfig
from ..registry import PRESETS
from ..theory.kernel_smoother import best_bandwidth
from ..theory.models import predict_unchecked
from . import presets


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


def sweep_readings(result, preset: str) -> dict:
    """What the file holds of the trained sweep ``result``: ``steps_reached``, ``trajectories``, ``final`` and
    ``windows`` (per seed, seed axis first; the exponent and the references, which need every seed or none, are
    :func:`finish`'s)."""
    print(f"trained: {result.seconds:.0f} s, {int(result.diverged.sum())} diverged runs; measuring", flush=True)
    U, V = result.uv()
    readings = window_readings(np.asarray(U), np.asarray(V), result.config.d)
    return {"steps_reached": int(result.steps[-1]),
            "trajectories": {"steps": result.steps, "eval_risk": result.eval_risk, "eval_sd": result.eval_sd,
                             "w": readings["w"]},
            "final": nonlinear_final_risks(result, presets.NONLINEAR_FINAL_PROMPTS[preset]),
            "windows": {**{k: v[..., -1] for k, v in readings.items()}, "kernel_anisotropy": KERNEL_ANISOTROPY,
                        "exponent": None},
            "references": None}


def dependence_readings(result) -> dict:
    """One setting of the window's dependence (softmax attention at one length): its final window :math:`w`,
    anisotropy and held-out risk per seed ``(S,)``."""
    U, V = result.uv()
    readings = window_readings(np.asarray(U), np.asarray(V), result.config.d)
    return {"w": readings["w"][:, 0, 0, -1], "anisotropy": readings["anisotropy"][:, 0, 0, -1],
            "risk": result.eval_risk[:, 0, 0, -1]}


def dependence_references(preset: str) -> dict:
    r"""The window's dependence (:data:`~softmax_as_linear.experiments.presets.NONLINEAR_DEPENDENCE` at
    :data:`~softmax_as_linear.experiments.presets.NONLINEAR_DEPENDENCE_LENGTH`) without its trained runs: its length,
    its (frequency scale :math:`\gamma`, noise :math:`s^2`) settings and the best Nadaraya-Watson window
    :math:`w^*` of each task."""
    L = presets.NONLINEAR_DEPENDENCE_LENGTH[preset]
    best = [best_bandwidth(nonlinear_config(preset, frequency=gamma, noise_var=s2).task(), L,
                           n_prompts=presets.NONLINEAR_REFERENCE_PROMPTS[preset],
                           seed=seeding.stream_seed(seeding.REFERENCE_SEED, "prompts", L))["w"]
            for gamma, s2 in presets.NONLINEAR_DEPENDENCE]
    return {"length": L, "settings": [list(x) for x in presets.NONLINEAR_DEPENDENCE], "best_w": best,
            "complete": True}


def finish(data: dict, preset: str, progress: bool = False) -> dict:
    """Complete ``data`` (every seed's rows of
    :data:`~softmax_as_linear.experiments.reproductions.nonlinear.PER_SEED`, arrays or lists) with what needs every
    seed or none: ``windows["exponent"]`` of the softmax runs that read as kernel smoothers (:func:`window_exponent`,
    None for a single length) and ``references`` (:func:`references`); returns ``data``."""
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
