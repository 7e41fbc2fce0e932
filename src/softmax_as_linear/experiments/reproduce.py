"""The reproduction of the paper's figures: train (or reuse) each sweep, measure its final risks, write one
result file per figure with its provenance (what ``python -m softmax_as_linear reproduce`` runs).

Figures 2-4 share one isotropic sweep and Figures 6-8 one anisotropic sweep: the sweep is trained
once (with a progress bar, checkpointed so that an interrupted run resumes where it stopped) and
saved as ``sweep_<covariance>_<preset>.npz``; each figure is then written as ``figN_<preset>.json``
(``sweep_kms_published_<preset>.npz`` and ``figN_<preset>_published.json`` for Figures 6-8 drawn with the
published code's sampler). Final risks are measured on fresh prompts (``_final.npz`` next to the sweep), and the trajectory
figures (4 and 8) store how much each run's risk fell over the last half and quarter of training, both records
scored on the same fresh prompts (:func:`~softmax_as_linear.experiments.uncertainty.trajectory_changes`).
With a deadline, training stops after about that long and the result files are written marked
``"complete": false`` with the steps reached; the same call later resumes from the checkpoint.
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np

from ..core.artifacts import load_npz, results_folder, save_json, save_npz
from ..core.devices import resolve_device
from ..engine.evaluation import final_evaluation
from ..engine.sweep import load_sweep, save_sweep
from ..engine.train import train
from ..registry import FIGURES, PRESETS, SAMPLERS, TRAINING_FIGURES
from .concentration_figures import concentration_figure
from .paper_figures import figure_data, result_name, sweep_provenance
from .presets import CHANGE_PROMPTS, FINAL_PROMPTS, sweep_config, sweep_seeds

# A checkpoint at the first multiple of CHECKPOINT_EVERY steps once CHECKPOINT_SECONDS of training have passed
# since the last one (and on Ctrl-C / SIGTERM, and at the deadline): a minute of work at most is lost, and a
# fast GPU sweep does not spend its time writing checkpoints.
CHECKPOINT_EVERY, CHECKPOINT_SECONDS = 1000, 60.0


def _sweep(covariance: str, preset: str, device, out: pathlib.Path, deadline: float | None = None,
           seeds: int | None = None, sampler: str = "paper"):
    overrides = {"sampler": sampler} if seeds is None else {"sampler": sampler, "seeds": sweep_seeds(seeds)}
    config = sweep_config(preset, covariance, **overrides)
    stem = f"sweep_{covariance}{'' if sampler == 'paper' else '_' + sampler}_{preset}"
    path = out / f"{stem}.npz"
    if path.exists():
        result = load_sweep(path)
        if result.config == config and result.complete:
            print(f"{path}: up to date")
            return result
    checkpoint = out / "checkpoints" / f"{stem}.pt"
    print(f"training the {covariance} sweep ({preset} preset) on {device}; checkpoint {checkpoint}", flush=True)
    stop = None if deadline is None else (lambda: time.monotonic() > deadline)
    result = train(config, device=device, progress=True, checkpoint=checkpoint, checkpoint_every=CHECKPOINT_EVERY,
                   checkpoint_seconds=CHECKPOINT_SECONDS, should_stop=stop)
    save_sweep(path, result)
    status = "complete" if result.complete else f"stopped at step {int(result.steps[-1])} of {config.steps} (partial)"
    print(f"{path}: {status}, {result.seconds:.0f} s of training, {int(result.diverged.sum())} diverged runs")
    return result


def figures_of(figure: str | list[str]) -> list[str]:
    requested = [figure] if isinstance(figure, str) else list(figure)
    for name in requested:
        if name not in (*FIGURES, "all"):
            raise ValueError(f"figure must be one of {', '.join(FIGURES)}, all; got {name!r}")
    if not requested:
        raise ValueError("figure must name at least one figure")
    return [f for f in FIGURES if "all" in requested or f in requested]


def _final(result, path: pathlib.Path, preset: str, device) -> dict:
    """The final evaluation of a sweep (cached next to it as ``<sweep>_final.npz``)."""
    final = path.with_name(path.stem + "_final.npz")
    key = json.dumps({"config": result.config.as_dict(), "steps": int(result.steps[-1]),
                      "n_prompts": FINAL_PROMPTS[preset]})
    if final.exists():
        cached = load_npz(final)
        if str(cached.pop("key")) == key:
            return cached
    start = time.monotonic()
    evaluation = final_evaluation(result, FINAL_PROMPTS[preset], device=device)
    save_npz(final, key=np.array(key), **evaluation)
    print(f"{final}: final risks on {FINAL_PROMPTS[preset]:,} fresh prompts per seed and L, "
          f"{time.monotonic() - start:.0f} s", flush=True)
    return evaluation


def check_options(preset: str, max_minutes: float | None, seeds: int | None = None, sampler: str = "paper") -> None:
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}; got {preset!r}")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= 1000):
        raise ValueError(f"seeds must be an integer from 1 to 1000, got {seeds!r}")
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got {sampler!r}")
    if max_minutes is not None and not max_minutes > 0:
        raise ValueError(f"max_minutes must be positive, got {max_minutes!r}")


def reproduce(figure: str | list[str], preset: str = "lecture", device: str = "auto", out=None,
              max_minutes: float | None = None, seeds: int | None = None, sampler: str = "paper") -> list[pathlib.Path]:
    """Compute and save the artifacts of ``figure`` (a name, ``"all"``, or a list of them); returns the files written.

    ``out`` defaults to the results folder, where the chapters read. ``max_minutes`` bounds the
    training time of this call (artifacts are then marked ``"complete": false``). ``seeds``: number of
    seeds of each sweep (default: the preset's, the paper's seed 327). ``sampler``: the inputs of the
    KMS sweep (Figures 6-8), ``"paper"`` or ``"published"``; the isotropic sweep is the same for both.
    """
    names = figures_of(figure)
    check_options(preset, max_minutes, seeds, sampler)
    deadline = None if max_minutes is None else time.monotonic() + 60 * max_minutes
    device = resolve_device(device)
    out = results_folder() if out is None else pathlib.Path(out)
    written, sweeps = [], {}
    for name in names:
        if name in ("fig1", "fig5"):  # no training: softmax against linear attention at the initialisation
            data = concentration_figure(name, preset, device=device, progress=True)
        else:
            covariance = TRAINING_FIGURES[name][0]
            used = sampler if covariance == "kms" else "paper"  # isotropic inputs: both samplers draw the same
            if covariance not in sweeps:
                start = time.monotonic()
                result = _sweep(covariance, preset, device, out, deadline, seeds, used)
                stem = f"sweep_{covariance}{'' if used == 'paper' else '_' + used}_{preset}"
                evaluation = _final(result, out / f"{stem}.npz", preset, device)
                origin = sweep_provenance(result, preset, device, time.monotonic() - start, evaluation)
                sweeps[covariance] = result, evaluation, origin
            result, evaluation, origin = sweeps[covariance]
            data = {**figure_data(name, result, evaluation=evaluation, change_prompts=CHANGE_PROMPTS[preset],
                                  device=device), "provenance": origin}
        filename = result_name(name, preset, used) if name in TRAINING_FIGURES else f"{name}_{preset}.json"
        written.append(save_json(out / filename, data))
        print(f"wrote {written[-1]}", flush=True)
    return written
