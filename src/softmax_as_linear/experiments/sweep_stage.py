"""The engine's shared sweep (the paper's figures' and Chapter 6's, which several result files read): read when its
file is up to date, else trained or resumed by :func:`~softmax_as_linear.experiments.pipeline.train_stage`, its final
risks measured once, and its shards joined.

A sweep is saved as ``<stem>.npz`` (its :class:`~softmax_as_linear.engine.sweep.TrainConfig` inside: it is up to date
when complete and of the call's configuration) and its final evaluation on fresh prompts as ``<stem>_final.npz`` (with
the key it was computed for, :func:`final_key`). A damaged sweep or final evaluation stops the call with a
:class:`~softmax_as_linear.core.artifacts.DamagedFileError` that says what to do (they are training's output, not a
result file: :func:`~softmax_as_linear.experiments.pipeline.read_result`). The shards' sweeps are joined along the seed
axis (:func:`join_sweep`), a missing, unfinished or foreign shard named with the command that completes it
(:class:`~softmax_as_linear.experiments.shard_files.ShardError`), and the merged provenance is
:func:`~softmax_as_linear.experiments.shard_files.common_origin`'s. The reproductions that read a sweep
(:mod:`~softmax_as_linear.experiments.reproductions.figures`,
:mod:`~softmax_as_linear.experiments.reproductions.beyond`) say which sweep, and what each file reads from it.
"""
from __future__ import annotations

import json
import pathlib
import time
from typing import NamedTuple

import numpy as np

from ..core.artifacts import DamagedFileError, load_json, load_npz, save_npz
from ..core.provenance import provenance, utc_now
from ..engine.evaluation import final_evaluation
from ..engine.sweep import TrainConfig, TrainResult, config_fields, load_sweep, save_sweep
from ..engine.train import train
from .file_names import shard_folder
from .pipeline import damaged, train_stage
from .presets import shard_seeds
from .shard_files import MERGE_OWN, ShardError, common_origin


def trained_sweep(config: TrainConfig, stem: str, preset: str, device, out: pathlib.Path, deadline: float | None = None,
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


def final_risks(result, path: pathlib.Path, n_prompts: int, device, restart: bool = False) -> dict:
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
