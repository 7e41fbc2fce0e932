"""The sweeps of the paper's figures and of Chapter 6, trained or reused, read and written: what the reproductions
:class:`~softmax_as_linear.experiments.reproductions.figures.Figure` and
:class:`~softmax_as_linear.experiments.reproductions.beyond.Beyond` run.

Figures 2-4 share one isotropic sweep and Figures 6-8 one anisotropic sweep: the sweep is trained
once (with a progress bar, checkpointed so that an interrupted run resumes where it stopped) and
saved as ``sweep_<covariance>_<preset>.npz``; each figure is then written as ``figN_<preset>.json``
(``sweep_kms_published_<preset>.npz`` and ``figN_<preset>_published.json`` for Figures 6-8 drawn with the
published code's sampler). Chapter 6 (``"beyond"``) trains one sweep per covariate law and writes
``beyond_<covariates>_<run>.json``, where ``<run>`` is the preset, followed by what changed when seeds or lengths were
overridden (:func:`~softmax_as_linear.experiments.file_names.run_name`). Every name is
:mod:`~softmax_as_linear.experiments.result_files`'s. Final risks are measured on fresh prompts
(``_final.npz`` next to the sweep), and the trajectory figures (4 and 8) store how much each run's risk fell over the
last half, quarter and tenth of training, both records scored on the same fresh prompts
(:func:`~softmax_as_linear.experiments.uncertainty.trajectory_changes`).
With a deadline, training stops after about that long and the result files are written marked
``"complete": false`` with the steps reached; the same call later resumes from the checkpoint. A sweep's file that is
there, complete and of the same settings is reused ("up to date").

A file that is there but cannot be read (truncated, say) stops the call with a
:class:`~softmax_as_linear.core.artifacts.DamagedFileError` that names it and says what to do; a checkpoint
written for other settings, with a :class:`~softmax_as_linear.core.artifacts.SettingsMismatchError`
(:func:`~softmax_as_linear.experiments.pipeline.train_stage`).
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np

from ..core.artifacts import DamagedFileError, SettingsMismatchError, load_npz, save_json, save_npz
from ..engine.evaluation import final_evaluation
from ..engine.sweep import TrainConfig, TrainResult, config_fields, load_sweep, save_sweep
from ..engine.train import resolved, train
from ..registry import CONCENTRATION_FIGURES, TRAINING_FIGURES
from .concentration_figures import concentration_figure
from .file_names import beyond_stem, figure_file, overrides_of, run_name, sweep_stem
from .paper_figures import figure_data, sweep_provenance
from .pipeline import damaged, read_result, train_stage
from .presets import (
    BEYOND_FINAL_PROMPTS,
    CHANGE_PROMPTS,
    FINAL_PROMPTS,
    beyond_config,
    shard_seeds,
    sweep_config,
    sweep_seeds,
)

#: The covariate laws of Chapter 6's reproduction when none is named.
BEYOND_COVARIATES = ("uniform", "rademacher")


def sweep_of(name: str, sampler: str = "paper") -> tuple[str, str]:
    """(covariance, sampler) of the sweep behind training figure ``name`` (isotropic inputs: both samplers
    draw the same prompts, so its sweep is the paper sampler's)."""
    covariance = TRAINING_FIGURES[name][0]
    return covariance, sampler if covariance == "kms" else "paper"


def all_seeds(preset: str, seeds: int | None = None, beyond: bool = False) -> tuple[int, ...]:
    """The seeds of a reproduction: the preset's (figures: 327; Chapter 6: its preset's), or the first ``seeds`` of
    :func:`~softmax_as_linear.experiments.presets.sweep_seeds`."""
    if seeds is not None:
        return sweep_seeds(seeds)
    return beyond_config(preset).seeds if beyond else sweep_config(preset).seeds


def _sweep(config: TrainConfig, stem: str, preset: str, device, out: pathlib.Path, deadline: float | None = None,
           restart: bool = False) -> TrainResult:
    """A figure's (or Chapter 6's) sweep: read from ``<stem>.npz`` when it is there, complete, of ``config``
    ("up to date"); else trained or resumed (:func:`~softmax_as_linear.experiments.pipeline.train_stage`) and saved."""
    path = out / f"{stem}.npz"
    if not restart and path.exists():
        try:
            result = load_sweep(path)
        except DamagedFileError as error:
            raise damaged(error, "delete it (the same command then rebuilds it from its checkpoint, or trains "
                                 "the sweep again if there is none)") from None
        if result.config == config and result.complete:
            print(f"{path}: up to date")
            return result
    kind = f"Chapter 6 {config.covariates}" if config.covariates != "gaussian" else config.covariance
    what = f"the {kind} sweep ({preset} preset, seeds {', '.join(map(str, config.seeds))})"
    result = train_stage(what, out / "checkpoints" / f"{stem}.pt", config, config.steps,
                         lambda **kw: train(config, device=device, progress=True, **kw), device, deadline, restart)
    save_sweep(path, result)
    status = "complete" if result.complete else f"stopped at step {int(result.steps[-1])} of {config.steps} (partial)"
    print(f"{path}: {status}, {result.seconds:.0f} s of training, {int(result.diverged.sum())} diverged runs")
    return result


def final_key(result: TrainResult, n_prompts: int) -> str:
    """What a cached final evaluation was computed for: the sweep's settings, its last step and the prompt count."""
    return json.dumps({"config": result.config.as_dict(), "steps": int(result.steps[-1]), "n_prompts": int(n_prompts)})


def same_final_key(stored: str, key: str) -> bool:
    """Whether a cached evaluation's ``stored`` key is :func:`final_key` ``key``, written by any version (a
    configuration's renamed and added fields read as today's, :func:`~softmax_as_linear.engine.sweep.config_fields`)."""
    def read(text: str):
        try:
            value = json.loads(text)
            return {**value, "config": config_fields(value["config"])}
        except (ValueError, TypeError, KeyError):
            return None
    stored_value = read(stored)
    return stored_value is not None and stored_value == read(key)


def _final(result, path: pathlib.Path, n_prompts: int, device, restart: bool = False) -> dict:
    """The final evaluation of a sweep on ``n_prompts`` fresh prompts (cached next to it as ``<sweep>_final.npz``)."""
    final = path.with_name(path.stem + "_final.npz")
    key = final_key(result, n_prompts)
    if final.exists() and not restart:
        try:
            cached = load_npz(final)
        except DamagedFileError as error:
            raise damaged(error, "delete it (the same command then measures the final risks again, "
                                 "without training)") from None
        if same_final_key(str(cached.pop("key", "")), key):
            return cached
    start = time.monotonic()
    evaluation = final_evaluation(result, n_prompts, device=device)
    save_npz(final, key=np.array(key), **evaluation)
    print(f"{final}: final risks on {n_prompts:,} fresh prompts per seed and L, "
          f"{time.monotonic() - start:.0f} s", flush=True)
    return evaluation


def figure_seeds(preset: str, seeds: int | None = None, shard: tuple[int, int] | None = None) -> tuple[int, ...]:
    """The seeds a figure's sweep trains: the preset's, the first ``seeds`` of
    :func:`~softmax_as_linear.experiments.presets.sweep_seeds`, or shard ``shard``'s part of them."""
    return all_seeds(preset, seeds) if shard is None else shard_seeds(all_seeds(preset, seeds), *shard)


def reproduce_figure(name: str, preset: str, device, out: pathlib.Path, deadline: float | None, seeds: int | None,
                     restart: bool, shard: tuple[int, int] | None, dirty: bool, sampler: str = "paper",
                     rng: str = "auto", shared: dict | None = None) -> pathlib.Path:
    """Figure ``name`` written as ``<name>_<preset>.json``
    (:func:`~softmax_as_linear.experiments.file_names.figure_file`): Figures 1 and 5 computed at the initialisation, a
    training figure read from its sweep (trained, resumed or reused by ``_sweep``, its final risks measured or read by
    ``_final``), which ``shared`` keeps for the other figures
    of the same call."""
    shared = {} if shared is None else shared
    if name in CONCENTRATION_FIGURES:  # no training: softmax against linear attention at the initialisation
        data = concentration_figure(name, preset, device=device, progress=True)
        data["provenance"] = {**data.get("provenance", {}), **({"allow_dirty": True} if dirty else {})}
        used = "paper"
    else:
        covariance, used = sweep_of(name, sampler)
        key = f"sweep {covariance}"
        if key not in shared:
            start = time.monotonic()
            stem = sweep_stem(covariance, preset, used)
            overrides = {} if seeds is None and shard is None else {"seeds": figure_seeds(preset, seeds, shard)}
            config = resolved(sweep_config(preset, covariance, sampler=used, rng=rng, **overrides), device)
            result = _sweep(config, stem, preset, device, out, deadline, restart)
            evaluation = _final(result, out / f"{stem}.npz", FINAL_PROMPTS[preset], device, restart)
            origin = sweep_provenance(result, preset, device, time.monotonic() - start, evaluation)
            origin.update(overrides=overrides_of(seeds, sampler, rng, shard=shard),
                          **({"allow_dirty": True} if dirty else {}))
            if shard is not None:
                origin["shard"] = f"{shard[0]}/{shard[1]}"
            shared[key] = result, evaluation, origin
        result, evaluation, origin = shared[key]
        data = {**figure_data(name, result, evaluation=evaluation, change_prompts=CHANGE_PROMPTS[preset],
                              device=device), "provenance": origin}
    path = save_json(out / figure_file(name, preset, used), data)
    print(f"wrote {path}", flush=True)
    return path


def keep_other_seeds(path: pathlib.Path, seeds) -> None:
    """Refuse, before anything trains, to replace the figure file at ``path`` when it holds other seeds than the
    run's ``seeds``: a figure file is named by its preset alone, so a three-seed run would otherwise overwrite the
    ten-seed file the chapters read. The :class:`~softmax_as_linear.core.artifacts.SettingsMismatchError` says how
    to keep both or replace it; a damaged file is written again from its sweep
    (:func:`~softmax_as_linear.experiments.pipeline.read_result`)."""
    data = read_result(path, "its sweep")
    stored = None if data is None else data.get("seeds")
    if stored is not None and [int(s) for s in stored] != [int(s) for s in seeds]:
        raise SettingsMismatchError(
            path, f"{path} holds the seeds {', '.join(map(str, stored))}, and this command would replace it with the "
                  f"seeds {', '.join(map(str, seeds))}: write elsewhere with --out, or pass --restart to replace it")


def beyond_run(preset: str, seeds: int | None = None, lengths=None) -> str:
    """The run name of a Chapter 6 reproduction (:func:`~softmax_as_linear.experiments.file_names.run_name`)."""
    return run_name(preset, None if seeds is None else sweep_seeds(seeds), None if lengths is None else tuple(lengths))


def beyond_overrides(preset: str, seeds: int | None = None, lengths=None, shard=None) -> dict:
    """The fields of :func:`~softmax_as_linear.experiments.presets.beyond_config` a Chapter 6 reproduction replaces."""
    overrides = {} if lengths is None else {"lengths": tuple(int(L) for L in lengths)}
    if seeds is not None or shard is not None:
        overrides["seeds"] = all_seeds(preset, seeds, beyond=True)
    if shard is not None:
        overrides["seeds"] = shard_seeds(overrides["seeds"], *shard)
    return overrides


def reproduce_beyond(preset, device, out, deadline, seeds, rng, restart, shard, covariates, lengths,
                      dirty) -> list[pathlib.Path]:
    """Chapter 6's sweeps, one per law (``covariates``, default :data:`BEYOND_COVARIATES`), each trained, resumed or
    reused by ``_sweep``, read and written as ``beyond_<covariates>_<run>.json``."""
    from .beyond_gaussian import beyond_provenance, beyond_readings

    run = beyond_run(preset, seeds, lengths)
    recorded = overrides_of(seeds, rng=rng, lengths=lengths, shard=shard)
    written = []
    for covariate in covariates or BEYOND_COVARIATES:
        start = time.monotonic()
        stem = beyond_stem(covariate, run)
        config = resolved(beyond_config(preset, covariate, rng=rng, **beyond_overrides(preset, seeds, lengths, shard)),
                          device)
        print(f"== Chapter 6, {covariate} covariates, {preset} preset" + ("" if run == preset else f" ({run})"),
              flush=True)
        result = _sweep(config, f"sweep_{stem}", preset, device, out, deadline, restart)
        trained = time.monotonic() - start
        evaluation = _final(result, out / f"sweep_{stem}.npz", BEYOND_FINAL_PROMPTS[preset], device, restart)
        data = {**beyond_readings(result, evaluation, preset), "run": run}
        data["provenance"] = {**beyond_provenance(result, preset, device, time.monotonic() - start, trained),
                              "run": run, "overrides": recorded, **({"allow_dirty": True} if dirty else {})}
        written.append(save_json(out / f"{stem}.json", data))
        print(f"wrote {written[-1]}", flush=True)
    return written
