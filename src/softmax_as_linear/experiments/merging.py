"""Joining the shards of the sweeps that the paper's figures and Chapter 6 share, along the seed axis
(:func:`join_sweep`), a missing, unfinished or foreign shard named with the command that completes it
(:class:`~softmax_as_linear.experiments.shard_files.ShardError`).

The files of a staged reproduction are joined by
:func:`~softmax_as_linear.experiments.pipeline.merge_shards`; the provenance of every joined file is
:func:`~softmax_as_linear.experiments.shard_files.common_origin`'s;
:func:`~softmax_as_linear.experiments.shards.merge` writes them.
"""
from __future__ import annotations

import pathlib
import time
from typing import NamedTuple

import numpy as np

from ..core.artifacts import DamagedFileError, load_json, load_npz, save_npz
from ..core.devices import resolve_device
from ..core.provenance import provenance, utc_now
from ..engine.sweep import TrainConfig, TrainResult, load_sweep, save_sweep
from ..registry import CONCENTRATION_FIGURES, TRAINING_FIGURES
from .concentration_figures import concentration_figure
from .figure_sweeps import BEYOND_COVARIATES, all_seeds, beyond_overrides, beyond_run, final_key, sweep_of
from .file_names import beyond_stem, figure_file, overrides_of, shard_folder, sweep_stem
from .paper_figures import figure_data
from .presets import BEYOND_FINAL_PROMPTS, CHANGE_PROMPTS, FINAL_PROMPTS, beyond_config, shard_seeds, sweep_config
from .shard_files import MERGE_OWN, ShardError, common_origin

# The paper's figures and Chapter 6: their shared sweeps joined ----------------------------------------

#: The arrays of a final evaluation that have a seed axis (the others, ``n_prompts``, are shared).
EVALUATION_PER_SEED = ("risk", "risk_se", "paired_difference", "paired_difference_se", "linear_exact")


def join_sweep(stem: str, config: TrainConfig, final_prompts: int, out: pathlib.Path, n: int, command,
               shard_file=None) -> tuple[TrainResult, dict, list[dict]]:
    """The shards' sweeps ``<stem>.npz`` and final evaluations, joined along the seed axis (in memory: a
    :class:`JoinedSweep` saves them), with each shard's
    provenance (read from ``shard_file(folder)``, one of the shard's result files, when given). ``config``: the
    whole reproduction's; with ``rng="auto"`` the shards' random stream is the one the first shard used (it depends
    on its device)."""
    results, evaluations, origins = [], [], []
    for k in range(1, n + 1):
        folder = shard_folder(out, k, n)
        path = folder / f"{stem}.npz"
        expected = config.replace(seeds=shard_seeds(config.seeds, k, n))
        if not path.exists():
            raise ShardError(f"shard {k}/{n} has not written {path}: run\n    {command(k)}")
        result = load_sweep(path)
        if config.rng == "auto":  # the stream "auto" meant where the first shard ran
            config = config.replace(rng=result.config.rng)
            expected = expected.replace(rng=result.config.rng)
        if result.config != expected:
            differ = [f"{key} {_shown(theirs)} (this merge: {_shown(mine)})" for key, theirs, mine in
                      ((key, value, expected.as_dict()[key]) for key, value in result.config.as_dict().items())
                      if theirs != mine]
            raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                             f"{k}/{n} ({path}) has {'; '.join(differ)}. Run merge with the shards' --preset, --seeds, "
                             "--sampler, --rng (and --lengths), or train the shards again with these settings and "
                             "--restart")
        if not result.complete:
            raise ShardError(f"shard {k}/{n} stopped at step {int(result.steps[-1])} of {config.steps}: run the same "
                             f"command again to resume it\n    {command(k)}")
        final = folder / f"{stem}_final.npz"
        evaluation = load_npz(final) if final.exists() else {}
        if str(evaluation.pop("key", "")) != final_key(result, final_prompts):
            raise ShardError(f"shard {k}/{n} has no final evaluation of its sweep ({final}): run\n    {command(k)}")
        origin = {"shard": f"{k}/{n}", "seeds": list(result.config.seeds),
                  "training_seconds": round(float(result.seconds), 1)}
        figure = None if shard_file is None else shard_file(folder)
        if figure is not None and figure.exists():
            try:
                origin = {**load_json(figure).get("provenance", {}), **origin}
            except DamagedFileError as error:  # its provenance would be lost: the shard's command rewrites it
                raise ShardError(f"{error}; it holds the provenance of shard {k}/{n} (where and how it ran): run the "
                                 f"shard's command again, which rewrites it from its sweep without training\n"
                                 f"    {command(k)}") from None
            origin.pop("settings", None)
        results.append(result)
        evaluations.append(evaluation)
        origins.append(origin)
    first = results[0]
    merged = TrainResult(config, first.steps,
                         *(np.concatenate([getattr(r, name) for r in results]) for name in ("train_risk", "eval_risk")),
                         {name: np.concatenate([r.params[name] for r in results]) for name in first.params},
                         np.concatenate([r.diverged_at for r in results]), float(sum(r.seconds for r in results)), True,
                         np.concatenate([r.eval_sd for r in results]),
                         ", ".join(dict.fromkeys(r.engine_path for r in results)))  # the path, or each one that ran
    evaluation = {name: np.concatenate([e[name] for e in evaluations]) for name in EVALUATION_PER_SEED}
    evaluation["n_prompts"] = evaluations[0]["n_prompts"]
    return merged, evaluation, origins


class JoinedSweep(NamedTuple):
    """A sweep joined from its shards (:func:`join_sweep`), with its final evaluation and the merged files'
    provenance, not yet written."""

    stem: str
    result: TrainResult
    evaluation: dict
    provenance: dict
    final_prompts: int

    def save(self, out: pathlib.Path) -> None:
        """Write ``<stem>.npz`` and ``<stem>_final.npz`` into ``out``, as one process training every seed does."""
        save_sweep(out / f"{self.stem}.npz", self.result)
        save_npz(out / f"{self.stem}_final.npz", key=np.array(final_key(self.result, self.final_prompts)),
                 **self.evaluation)


def check_sweep_shards(stem: str, out: pathlib.Path, n: int, command) -> None:
    """A :class:`~softmax_as_linear.experiments.shard_files.ShardError` naming the first of the ``n`` shards that has
    not written its sweep ``<stem>.npz`` (with the sweeps it holds instead, for Chapter 6's, whose names say their
    seeds and lengths)."""
    for k in range(1, n + 1):
        folder = shard_folder(out, k, n)
        if not (folder / f"{stem}.npz").exists():
            others = sorted(p.stem for p in folder.glob(f"{stem.split('_', 3)[0]}_*.npz")
                            if not p.stem.endswith("_final")) if stem.startswith("sweep_beyond") else []
            hint = (f" (it holds {', '.join(others)}: were the shards trained with other --seeds or --lengths "
                    "than this merge's?)") if others else ""
            raise ShardError(f"shard {k}/{n} has not written its sweep {stem} yet{hint}: run\n    {command(k)}")


def joined(sweeps: dict, stem: str, config: TrainConfig, final_prompts: int, out: pathlib.Path, n: int, command,
           shard_file, preset: str, overrides: dict, dirty: bool, start: float) -> JoinedSweep:
    """The sweep ``stem`` joined from its ``n`` shards once per merge (``sweeps`` keeps it for the other files that
    read it)."""
    if stem not in sweeps:
        merged, evaluation, origins = join_sweep(stem, config, final_prompts, out, n, command, shard_file)
        provenance = _merged_provenance(merged, preset, origins, time.monotonic() - start, overrides, dirty)
        sweeps[stem] = JoinedSweep(stem, merged, evaluation, provenance, final_prompts)
    return sweeps[stem]


def merged_figure(name: str, preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool,
                  start: float, sampler: str = "paper", rng: str = "auto", device="auto", sweeps: dict | None = None):
    """What computes figure ``name``'s file from its joined sweep (Figures 1 and 5, which have no seeds: computed
    here), the sweep being joined now, before anything is written."""
    if name in CONCENTRATION_FIGURES:
        def concentration() -> dict:
            data = concentration_figure(name, preset, device=resolve_device(device), progress=True)
            if dirty:
                data["provenance"] = {**data.get("provenance", {}), "allow_dirty": True}
            return data
        return concentration
    covariance, used = sweep_of(name, sampler)
    sweep = joined({} if sweeps is None else sweeps, sweep_stem(covariance, preset, used),
                   sweep_config(preset, covariance, sampler=used, seeds=all_seeds(preset, seeds), rng=rng),
                   FINAL_PROMPTS[preset], out, n, command, lambda folder: _figure_of_sweep(folder, covariance, preset,
                                                                                            used),
                   preset, overrides_of(seeds, sampler if covariance == "kms" else "paper", rng), dirty, start)
    return lambda: {**figure_data(name, sweep.result, evaluation=sweep.evaluation,
                                  change_prompts=CHANGE_PROMPTS[preset], device=resolve_device(device)),
                    "provenance": sweep.provenance}


def merged_beyond(preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool, start: float,
                  rng: str = "auto", covariates=None, lengths=None, sweeps: dict | None = None) -> list:
    """Chapter 6's files (one per law) and what computes each from its joined sweep, joined now."""
    from .beyond_gaussian import beyond_readings

    run, files = beyond_run(preset, seeds, lengths), []
    for covariate in covariates or BEYOND_COVARIATES:
        stem = beyond_stem(covariate, run)
        config = beyond_config(preset, covariate, rng=rng, **beyond_overrides(preset, seeds, lengths))
        sweep = joined({} if sweeps is None else sweeps, f"sweep_{stem}", config, BEYOND_FINAL_PROMPTS[preset], out,
                       n, command, lambda folder, stem=stem: folder / f"{stem}.json", preset,
                       overrides_of(seeds, "paper", rng, lengths), dirty, start)
        files.append((f"{stem}.json", lambda sweep=sweep: {**beyond_readings(sweep.result, sweep.evaluation, preset),
                                                           "run": run, "provenance": {**sweep.provenance, "run": run}}))
    return files


def _figure_of_sweep(folder: pathlib.Path, covariance: str, preset: str, sampler: str) -> pathlib.Path:
    """The file, in a shard's ``folder``, of the first figure of the sweep ``covariance`` that the shard wrote (it
    holds the shard's provenance: where and how it ran), whichever of the sweep's figures the shard was run for."""
    files = [folder / figure_file(f, preset, sampler) for f, (c, _) in TRAINING_FIGURES.items() if c == covariance]
    return next((path for path in files if path.exists()), files[0])


def _shown(value):
    return list(value) if isinstance(value, tuple) else repr(value) if isinstance(value, str) else value


def _merged_provenance(result: TrainResult, preset: str, origins: list[dict], seconds: float, overrides: dict,
                       dirty: bool) -> dict:
    """The provenance of merged files: where the shards ran (the first shard's device, torch and commit at the top,
    every shard in ``shards``), the preset, its overrides and the settings of the whole reproduction, the summed
    training time, and the merge."""
    first = origins[0]
    top = {**common_origin(origins, MERGE_OWN), **({"allow_dirty": True} if first.get("allow_dirty") else {})}
    merged = provenance("cpu", seconds)
    return {**top, **({"allow_dirty": True} if dirty else {}), "preset": preset, "overrides": overrides,
            "settings": result.config.as_dict(), "training_seconds": round(float(result.seconds), 1),
            "final_prompts": first.get("final_prompts"), "date": utc_now(), "shards": origins, "merged": merged}
