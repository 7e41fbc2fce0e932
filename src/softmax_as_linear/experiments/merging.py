"""Joining the shards of a reproduction: each shard's file read, and one rule for the joined file's provenance.

A missing, unfinished or foreign shard is named with the command that completes it (:class:`ShardError`); the
provenance of a joined file is :func:`common_origin`'s. The merges of every reproduction are here (the figures' and
Chapter 6's shared sweeps joined along the seed axis, :func:`join_sweep`; Chapters 7 and 8's files);
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
from ..engine.sweep import TrainConfig, TrainResult, config_fields, load_sweep, save_sweep
from ..registry import CONCENTRATION_FIGURES, TRAINING_FIGURES
from .concentration_figures import concentration_figure
from .figure_sweeps import BEYOND_COVARIATES, all_seeds, beyond_overrides, beyond_run, final_key, sweep_of
from .paper_figures import figure_data
from .presets import BEYOND_FINAL_PROMPTS, CHANGE_PROMPTS, FINAL_PROMPTS, beyond_config, shard_seeds, sweep_config
from .result_files import beyond_stem, figure_file, overrides_of, shard_folder, sweep_stem


class ShardError(RuntimeError):
    """A shard that is missing, incomplete or failed: the message names it and the command that completes it."""


class ShardsPartial(ShardError):
    """Shards that stopped at their time limit (``max_minutes``): the same call resumes them."""


def shard_json(path: pathlib.Path, k: int, n: int, command) -> dict:
    """Shard ``k`` of ``n``'s result file, or a :class:`ShardError` naming the command that writes it again (or
    completes it, where the shard stopped before the end)."""
    if not path.exists():
        raise ShardError(f"shard {k}/{n} has not written {path}: run\n    {command(k)}")
    try:
        data = load_json(path)
    except DamagedFileError as error:
        raise ShardError(f"{error}; run the shard's command again\n    {command(k)}") from None
    if not data.get("complete"):
        raise ShardError(f"shard {k}/{n} stopped before the end: run the same command again to resume it\n"
                         f"    {command(k)}")
    return data


#: The one rule of every merge: the keys of where the shards ran that the merged file's provenance takes at its top,
#: each either the same on every shard or marked "several (see shards)" (every shard's own is kept in ``shards``).
ORIGIN_KEYS = ("device", "device_name", "gpu", "torch", "python", "commit", "uncommitted_changes", "engine_path",
               "machine")


def common_origin(origins: list[dict]) -> dict:
    """Each of :data:`ORIGIN_KEYS` that a shard's provenance records: its value where every shard records the same,
    else "several (see shards)" (a key one shard lacks and another records differs too)."""
    top = {}
    for key in ORIGIN_KEYS:
        values = [o.get(key) for o in origins]
        if any(key in o for o in origins):
            top[key] = values[0] if all(v == values[0] for v in values) else "several (see shards)"
    return top


def merge_per_seed(parts: list[dict]) -> dict:
    """The ``per_seed`` blocks of shards (consecutive seeds), joined along the seed axis (every reproduction whose
    readings are per seed)."""
    def join(values):
        if isinstance(values[0], dict):
            return {k: join([v[k] for v in values]) for k in values[0]}
        if isinstance(values[0], list):
            return [row for v in values for row in v]
        return values[0]  # a count shared by the shards (prompts per seed)
    return join(parts)


def merged_depth(preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool, start: float) -> dict:
    """Chapter 7's regression result joined from its ``n`` shards' ``depth_<run>.json`` (per-seed arrays concatenated
    along the seed axis; the references, which have no seed, from the first shard), with the merged provenance; a
    :class:`ShardError` names a missing, unfinished or foreign shard."""
    from .depth_regression import warm_settings
    from .depth_reproduction import dataclass_dict, depth_shard_settings
    from .result_files import depth_file, depth_run

    run, warm = depth_run(preset, seeds), dataclass_dict(warm_settings(preset))
    parts, origins = [], []
    for k in range(1, n + 1):
        path = shard_folder(out, k, n) / depth_file(run)
        data = shard_json(path, k, n, command)
        expected = depth_shard_settings(preset, seeds, (k, n)).as_dict()
        if config_fields(data.get("provenance", {}).get("settings") or {}) != expected:
            raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                             f"{k}/{n} ({path}) has other settings (seeds {data.get('per_seed', {}).get('seeds')}, "
                             f"this merge: {expected['seeds']}). Run merge with the shards' --preset and --seeds, or "
                             "train the shards again with these settings and --restart")
        for stage in ("warm", "control"):  # every stage's settings, not only the sweep's
            if (data.get(stage) or {}).get("settings") != warm:
                raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                                 f"{k}/{n} ({path}) has other settings of its {stage} stage. Run merge with the "
                                 "shards' --preset, or train the shards again with this library and --restart")
        parts.append(data)
        origin = dict(data["provenance"])
        origin.pop("settings", None)
        origins.append({**origin, "shard": f"{k}/{n}", "seeds": data["per_seed"]["seeds"]})
    merged = {key: value for key, value in parts[0].items() if key not in ("per_seed", "provenance")}
    merged["per_seed"] = merge_per_seed([p["per_seed"] for p in parts])
    seeded = ("risk", "risk_se", "minus", "minus_se", "fall", "fall_se", "trajectory")
    for stage in ("warm", "control"):  # the second stages' per-seed arrays, joined (their settings checked above)
        if all(stage in p for p in parts):
            merged[stage] = {**parts[0][stage], **merge_per_seed([{k: p[stage][k] for k in seeded} for p in parts]),
                             "shards": [p[stage].get("provenance") for p in parts]}
    top = common_origin(origins)
    merged["provenance"] = {**top, **({"allow_dirty": True} if dirty else {}), "preset": preset, "run": run,
                            "overrides": overrides_of(seeds),
                            "settings": depth_shard_settings(preset, seeds).as_dict(),
                            "training_seconds": round(sum(o.get("training_seconds", 0.0) for o in origins), 1),
                            "date": utc_now(), "shards": origins, "merged": provenance("cpu", time.monotonic() - start)}
    return merged


def merged_nonlinear(preset: str, n: int, out: pathlib.Path, command, dirty: bool, start: float) -> dict:
    """Chapter 8's result joined from its ``n`` shards' ``nonlinear_<preset>.json``: the per-seed rows
    (:data:`~softmax_as_linear.experiments.nonlinear.PER_SEED`, and the dependence's) joined in seed order, then what
    needs every seed or none (the window exponent, the references) computed as one process computes it
    (:func:`~softmax_as_linear.experiments.nonlinear.finish`), with the merged provenance; a :class:`ShardError`
    names a missing, unfinished or foreign shard."""
    from ..core.artifacts import jsonable
    from .nonlinear import DEPENDENCE_PER_SEED, PER_SEED, finish, nonlinear_config
    from .presets import (
        NONLINEAR_DEPENDENCE,
        NONLINEAR_DEPENDENCE_LENGTH,
        NONLINEAR_FINAL_PROMPTS,
        NONLINEAR_REFERENCE_PROMPTS,
    )
    from .result_files import nonlinear_command, nonlinear_file

    whole = nonlinear_config(preset)
    parts, origins = [], []
    for k in range(1, n + 1):
        path = shard_folder(out, k, n) / nonlinear_file(preset)
        data = shard_json(path, k, n, command)
        expected = jsonable(whole.replace(seeds=shard_seeds(whole.seeds, k, n)).as_dict())
        dependence = data.get("dependence") or {}
        if [dependence.get("length"), dependence.get("settings")] != \
                [NONLINEAR_DEPENDENCE_LENGTH[preset], [list(x) for x in NONLINEAR_DEPENDENCE]]:
            raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                             f"{k}/{n} ({path}) has other settings of the window's dependence (its length and "
                             "(frequency, noise) pairs). Run merge with the shards' --preset, or train the shards "
                             "again with this library and --restart")
        if data.get("config") != expected:
            differ = [key for key in expected if (data.get("config") or {}).get(key) != expected[key]]
            raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                             f"{k}/{n} ({path}) has other {', '.join(differ)}. Run merge with the shards' --preset, or "
                             "train the shards again with this library and --restart")
        parts.append(data)
        origins.append({**data["provenance"], "shard": f"{k}/{n}"})
    first = parts[0]
    merged = {"preset": preset, "complete": True, "steps_reached": first["steps_reached"],
              "config": jsonable(whole.as_dict()), "models": first["models"]}
    for section, names in PER_SEED.items():
        merged[section] = {**first[section],
                           **{name: [row for p in parts for row in p[section][name]] for name in names}}
    dependence = first["dependence"]
    merged["dependence"] = {**dependence, "complete": True, **{
        name: [[value for p in parts for value in p["dependence"][name][i]] for i in range(len(dependence["settings"]))]
        for name in DEPENDENCE_PER_SEED}}
    import torch

    threads = torch.get_num_threads()
    try:  # the shards' number of threads: a CPU's sums, and so the references' last digits, depend on it
        torch.set_num_threads(int(origins[0].get("torch_threads") or threads))
        finish(merged, preset, progress=True)
    finally:
        torch.set_num_threads(threads)
    top = common_origin(origins)
    wall = time.monotonic() - start
    merged["provenance"] = {**top, "wall_seconds": round(sum(o.get("wall_seconds", 0.0) for o in origins) + wall, 1),
                            "preset": preset, "run": preset, "seeds": list(whole.seeds),
                            "training_seconds": round(sum(o.get("training_seconds", 0.0) for o in origins), 1),
                            "command": nonlinear_command(preset), "allow_dirty": bool(dirty),
                            "final_prompts": NONLINEAR_FINAL_PROMPTS[preset],
                            "reference_prompts": NONLINEAR_REFERENCE_PROMPTS[preset],
                            "date": utc_now(), "shards": origins, "merged": provenance("cpu", wall)}
    return merged


def merged_nonlinear_depth(preset: str, n: int, out: pathlib.Path, command, dirty: bool, start: float) -> dict:
    """Chapter 8's one- and two-layer result joined from its ``n`` shards' ``nonlinear_depth_<preset>.json`` (the
    per-seed readings concatenated along the seed axis), with the merged provenance; a :class:`ShardError` names a
    missing, unfinished or foreign shard."""
    from .nonlinear_depth import nonlinear_depth_settings
    from .result_files import nonlinear_depth_command, nonlinear_depth_file

    return merged_per_seed_shards(lambda **kw: {"settings": nonlinear_depth_settings(preset, **kw).as_dict()},
                                  nonlinear_depth_file(preset), nonlinear_depth_command(preset), preset, n, out,
                                  command, dirty, start)


def merged_nonlinear_window(preset: str, n: int, out: pathlib.Path, command, dirty: bool, start: float) -> dict:
    """Chapter 8's log-window runs joined from their ``n`` shards' ``nonlinear_window_<preset>.json``, as
    :func:`merged_nonlinear_depth`, every stage's settings checked (the sweep's and each of the dependence's)."""
    from .nonlinear_window import dependence_settings, window_settings
    from .result_files import nonlinear_window_command, nonlinear_window_file

    def stages(seeds=None):
        return {"settings": window_settings(preset, **({} if seeds is None else {"seeds": seeds})).as_dict(),
                "dependence_settings": [s.as_dict() for s in dependence_settings(preset, seeds)]}

    return merged_per_seed_shards(stages, nonlinear_window_file(preset), nonlinear_window_command(preset), preset, n,
                                  out, command, dirty, start)


def merged_per_seed_shards(stages, file: str, command_text: str, preset: str, n: int, out: pathlib.Path, command,
                           dirty: bool, start: float) -> dict:
    """A result file whose readings are all per seed (``"per_seed"``, seed axis first) joined from its ``n`` shards'
    ``file``: ``stages(seeds=...)`` gives what the provenance of a file of those seeds records of every stage's
    settings (``{"settings": ..., <a later stage's key>: ...}``), and each shard's must be it, for every stage; the
    per-seed readings are concatenated, the rest taken from the first shard, and the provenance is
    :func:`common_origin`'s with every shard's own kept; a :class:`ShardError` names a missing, unfinished or foreign
    shard (and the stage whose settings differ)."""
    whole = stages()
    all_seeds = tuple(whole["settings"]["seeds"])
    parts, origins = [], []
    for k in range(1, n + 1):
        path = shard_folder(out, k, n) / file
        data = shard_json(path, k, n, command)
        found = data.get("provenance") or {}
        for stage, expected in stages(seeds=shard_seeds(all_seeds, k, n)).items():
            if found.get(stage) != expected:
                differ = [key for key in expected if (found.get(stage) or {}).get(key) != expected[key]] \
                    if isinstance(expected, dict) else ["settings"]
                raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                                 f"{k}/{n} ({path}) has other {', '.join(differ)}"
                                 + ("" if stage == "settings" else f" (its {stage})") + ". Run merge with the shards' "
                                 "--preset, or train the shards again with this library and --restart")
        parts.append(data)
        origin = {key: value for key, value in data["provenance"].items() if key not in whole}
        origins.append({**origin, "shard": f"{k}/{n}"})
    merged = {key: value for key, value in parts[0].items() if key not in ("per_seed", "provenance")}
    merged["per_seed"] = merge_per_seed([p["per_seed"] for p in parts])
    top = common_origin(origins)
    wall = time.monotonic() - start
    merged["provenance"] = {**top, "wall_seconds": round(sum(o.get("wall_seconds", 0.0) for o in origins) + wall, 1),
                            "preset": preset, "run": preset, **whole, "seeds": list(all_seeds),
                            "training_seconds": round(sum(o.get("training_seconds", 0.0) for o in origins), 1),
                            "command": command_text, "allow_dirty": bool(dirty),
                            "date": utc_now(), "shards": origins, "merged": provenance("cpu", wall)}
    return merged


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
    """A :class:`~softmax_as_linear.experiments.merging.ShardError` naming the first of the ``n`` shards that has not
    written its sweep ``<stem>.npz`` (with the sweeps it holds instead, for Chapter 6's, whose names say their seeds
    and lengths)."""
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
    top = {**common_origin(origins), **({"allow_dirty": True} if first.get("allow_dirty") else {})}
    merged = provenance("cpu", seconds)
    return {**top, **({"allow_dirty": True} if dirty else {}), "preset": preset, "overrides": overrides,
            "settings": result.config.as_dict(), "training_seconds": round(float(result.seconds), 1),
            "final_prompts": first.get("final_prompts"), "date": utc_now(), "shards": origins, "merged": merged}
