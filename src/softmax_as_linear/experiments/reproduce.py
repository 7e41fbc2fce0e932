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

A file that is there but cannot be read (truncated, say) stops the call with a
:class:`~softmax_as_linear.core.artifacts.DamagedFileError` that names it and says what to do; nothing
else is touched. ``restart`` trains the requested sweeps afresh, ignoring their files. A reproduction
split into shards (``shard=(k, n)``, :mod:`~softmax_as_linear.experiments.shards`) trains the seeds of
shard ``k`` only, in a folder of its own.
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np

from ..core.artifacts import DamagedFileError, load_npz, results_folder, save_json, save_npz
from ..core.devices import resolve_device
from ..engine.evaluation import final_evaluation
from ..engine.sweep import TrainConfig, TrainResult, load_sweep, save_sweep
from ..engine.train import resolved, train
from ..registry import CONCENTRATION_FIGURES, FIGURES, PRESETS, RNGS, SAMPLERS, TRAINING_FIGURES
from .concentration_figures import concentration_figure
from .paper_figures import figure_data, sweep_provenance
from .presets import CHANGE_PROMPTS, FINAL_PROMPTS, sweep_config, sweep_seeds
from .result_files import figure_file, sweep_stem

# A checkpoint at the first multiple of CHECKPOINT_EVERY steps once CHECKPOINT_SECONDS of training have passed
# since the last one (and on Ctrl-C / SIGTERM, and at the deadline): a minute of work at most is lost, and a
# fast GPU sweep does not spend its time writing checkpoints.
CHECKPOINT_EVERY, CHECKPOINT_SECONDS = 1000, 60.0

RESTART_ADVICE = "or run the same command again with --restart (restart=True) to train this sweep afresh"


def sweep_of(name: str, sampler: str = "paper") -> tuple[str, str]:
    """(covariance, sampler) of the sweep behind training figure ``name`` (isotropic inputs: both samplers
    draw the same prompts, so its sweep is the paper sampler's)."""
    covariance = TRAINING_FIGURES[name][0]
    return covariance, sampler if covariance == "kms" else "paper"


def all_seeds(preset: str, seeds: int | None = None) -> tuple[int, ...]:
    """The seeds of a reproduction: the preset's (327), or the first ``seeds`` of :func:`sweep_seeds`."""
    return sweep_config(preset).seeds if seeds is None else sweep_seeds(seeds)


def shard_seeds(seeds: tuple[int, ...], k: int, n: int) -> tuple[int, ...]:
    """The seeds of shard ``k`` of ``n`` (``1 <= k <= n <= len(seeds)``): consecutive blocks, the first
    ``len(seeds) % n`` one seed longer, in the reproduction's order (so shards 1..n, joined, are ``seeds``)."""
    if not 1 <= k <= n <= len(seeds):
        raise ValueError(f"shard must be k/n with 1 <= k <= n <= {len(seeds)} (the number of seeds), got {k}/{n}")
    size, extra = divmod(len(seeds), n)
    start = (k - 1) * size + min(k - 1, extra)
    return tuple(seeds[start:start + size + (k <= extra)])


def shard_folder(out: pathlib.Path, k: int, n: int) -> pathlib.Path:
    """Where shard ``k`` of ``n`` writes: ``<out>/shards/<k>-of-<n>/``."""
    return pathlib.Path(out) / "shards" / f"{k}-of-{n}"


def _damaged(error: DamagedFileError, what: str) -> DamagedFileError:
    return error.advise(f"{what}; {RESTART_ADVICE}")


def _sweep(config: TrainConfig, stem: str, preset: str, device, out: pathlib.Path, deadline: float | None = None,
           restart: bool = False) -> TrainResult:
    path = out / f"{stem}.npz"
    checkpoint = out / "checkpoints" / f"{stem}.pt"
    if restart:
        checkpoint.unlink(missing_ok=True)
    elif path.exists():
        try:
            result = load_sweep(path)
        except DamagedFileError as error:
            raise _damaged(error, "delete it (the same command then rebuilds it from its checkpoint, or trains "
                                  "the sweep again if there is none)") from None
        if result.config == config and result.complete:
            print(f"{path}: up to date")
            return result
    print(f"training the {config.covariance} sweep ({preset} preset, seeds {', '.join(map(str, config.seeds))}) "
          f"on {device}; checkpoint {checkpoint}", flush=True)
    stop = None if deadline is None else (lambda: time.monotonic() > deadline)
    try:
        result = train(config, device=device, progress=True, checkpoint=checkpoint, checkpoint_every=CHECKPOINT_EVERY,
                       checkpoint_seconds=CHECKPOINT_SECONDS, should_stop=stop)
    except DamagedFileError as error:
        raise _damaged(error, "delete it to train this sweep from step 0") from None
    except ValueError as error:
        if "different configuration" not in str(error):
            raise
        raise DamagedFileError(checkpoint, "it was written for other settings of this sweep (another --seeds?)",
                               f"delete it to train this sweep from step 0; {RESTART_ADVICE}") from None
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


def final_key(result: TrainResult, preset: str) -> str:
    """What a cached final evaluation was computed for: the sweep's settings, its last step and the prompt count."""
    return json.dumps({"config": result.config.as_dict(), "steps": int(result.steps[-1]),
                       "n_prompts": FINAL_PROMPTS[preset]})


def _final(result, path: pathlib.Path, preset: str, device, restart: bool = False) -> dict:
    """The final evaluation of a sweep (cached next to it as ``<sweep>_final.npz``)."""
    final = path.with_name(path.stem + "_final.npz")
    key = final_key(result, preset)
    if final.exists() and not restart:
        try:
            cached = load_npz(final)
        except DamagedFileError as error:
            raise _damaged(error, "delete it (the same command then measures the final risks again, "
                                  "without training)") from None
        if str(cached.pop("key", "")) == key:
            return cached
    start = time.monotonic()
    evaluation = final_evaluation(result, FINAL_PROMPTS[preset], device=device)
    save_npz(final, key=np.array(key), **evaluation)
    print(f"{final}: final risks on {FINAL_PROMPTS[preset]:,} fresh prompts per seed and L, "
          f"{time.monotonic() - start:.0f} s", flush=True)
    return evaluation


def check_options(preset: str, max_minutes: float | None, seeds: int | None = None, sampler: str = "paper",
                  rng: str = "auto", shard: tuple[int, int] | None = None) -> None:
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}; got {preset!r}")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= 1000):
        raise ValueError(f"seeds must be an integer from 1 to 1000, got {seeds!r}")
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got {sampler!r}")
    if max_minutes is not None and not max_minutes > 0:
        raise ValueError(f"max_minutes must be positive, got {max_minutes!r}")
    if rng not in RNGS:
        raise ValueError(f"rng must be one of {', '.join(RNGS)}; got {rng!r}")
    if shard is not None:
        k, n = shard
        count = len(all_seeds(preset, seeds))
        if not 1 <= k <= n or n > count:
            raise ValueError(f"shard must be k/n with 1 <= k <= n <= {count} (one seed at least per shard; the "
                             f"reproduction has {count} seed{'s' if count > 1 else ''}), got {k}/{n}")


def reproduce(figure: str | list[str], preset: str = "lecture", device: str = "auto", out=None,
              max_minutes: float | None = None, seeds: int | None = None, sampler: str = "paper",
              restart: bool = False, shard: tuple[int, int] | None = None, rng: str = "auto") -> list[pathlib.Path]:
    """Compute and save the artifacts of ``figure`` (a name, ``"all"``, or a list of them); returns the files written.

    ``out`` defaults to the results folder, where the chapters read. ``max_minutes`` bounds the
    training time of this call (artifacts are then marked ``"complete": false``). ``seeds``: number of
    seeds of each sweep (default: the preset's, the paper's seed 327). ``sampler``: the inputs of the
    KMS sweep (Figures 6-8), ``"paper"`` or ``"published"``; the isotropic sweep is the same for both.
    ``rng``: the random stream of the training prompts (:class:`~softmax_as_linear.engine.sweep.TrainConfig`),
    ``"auto"`` (the counter-based stream on CUDA, torch's generators on a CPU), ``"torch"`` or ``"philox"``.
    ``restart``: train the sweeps afresh (their checkpoints are deleted, their files rewritten).
    ``shard=(k, n)``: train only the seeds of shard ``k`` of ``n`` (:func:`shard_seeds`), writing into
    :func:`shard_folder`; Figures 1 and 5 (no seeds) are left to the merge
    (:func:`~softmax_as_linear.experiments.shards.merge`).
    """
    names = figures_of(figure)
    check_options(preset, max_minutes, seeds, sampler, rng, shard)
    deadline = None if max_minutes is None else time.monotonic() + 60 * max_minutes
    device = resolve_device(device)
    out = results_folder() if out is None else pathlib.Path(out)
    overrides = {} if seeds is None else {"seeds": sweep_seeds(seeds)}
    if shard is not None:
        out = shard_folder(out, *shard)
        overrides = {"seeds": shard_seeds(all_seeds(preset, seeds), *shard)}
        names = [name for name in names if name in TRAINING_FIGURES]
    written, sweeps = [], {}
    for name in names:
        if name in CONCENTRATION_FIGURES:  # no training: softmax against linear attention at the initialisation
            data = concentration_figure(name, preset, device=device, progress=True)
            used = "paper"
        else:
            covariance, used = sweep_of(name, sampler)
            if covariance not in sweeps:
                start = time.monotonic()
                stem = sweep_stem(covariance, preset, used)
                config = resolved(sweep_config(preset, covariance, sampler=used, rng=rng, **overrides), device)
                result = _sweep(config, stem, preset, device, out, deadline, restart)
                evaluation = _final(result, out / f"{stem}.npz", preset, device, restart)
                origin = sweep_provenance(result, preset, device, time.monotonic() - start, evaluation)
                if shard is not None:
                    origin["shard"] = f"{shard[0]}/{shard[1]}"
                sweeps[covariance] = result, evaluation, origin
            result, evaluation, origin = sweeps[covariance]
            data = {**figure_data(name, result, evaluation=evaluation, change_prompts=CHANGE_PROMPTS[preset],
                                  device=device), "provenance": origin}
        written.append(save_json(out / figure_file(name, preset, used), data))
        print(f"wrote {written[-1]}", flush=True)
    return written
