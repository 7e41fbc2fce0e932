"""Chapter 7's reproduction: its sweep, then its warm stage and equal-budget control, written as ``depth_<run>.json``.

Each stage is trained or resumed under the deadline (:func:`~softmax_as_linear.experiments.stages.train_stage`); the
file is complete when every stage is (what ``python -m softmax_as_linear reproduce depth`` runs).
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np

from ..core.artifacts import save_json
from ..core.provenance import device_name, provenance, utc_now
from ..engine.sweep import config_fields
from .presets import shard_seeds, sweep_seeds
from .result_files import overrides_of
from .stages import discard, passed, read_result, train_stage


def depth_seeds(preset: str, seeds: int | None = None) -> tuple[int, ...]:
    """The seeds of a Chapter 7 regression reproduction: the preset's, or the first ``seeds`` of
    :func:`~softmax_as_linear.experiments.presets.sweep_seeds`."""
    from .depth_regression import depth_settings

    return depth_settings(preset).seeds if seeds is None else sweep_seeds(seeds)


def depth_shard_settings(preset: str, seeds: int | None = None, shard=None):
    """The :class:`~softmax_as_linear.experiments.depth_regression.DepthSettings` a reproduction (or one of its shards)
    trains."""
    from .depth_regression import depth_settings

    chosen = depth_seeds(preset, seeds)
    if shard is not None:
        chosen = shard_seeds(chosen, *shard)
    return depth_settings(preset, seeds=chosen)


def reproduce_depth(preset, device, out, deadline, seeds, restart, shard, dirty) -> pathlib.Path:
    """Chapter 7's regression sweep: trained (or resumed) through the engine's loop, read, then its warm stage
    (two-layer softmax from the trained two-layer linear weights) and that stage's equal-budget control (the same steps
    from the block-start two-layer softmax weights) trained and read, written as ``depth_<run>.json`` (a shard's into
    its folder). A file whose sweep is complete but whose warm stage or control is missing or unfinished resumes there
    without training the sweep again."""
    from .depth_regression import depth_readings, depth_references, train_depth, warm_settings
    from .result_files import depth_file, depth_run

    run = depth_run(preset, seeds)
    settings = depth_shard_settings(preset, seeds, shard)
    warm = warm_settings(preset)
    path = out / depth_file(run)
    checkpoint = out / "checkpoints" / f"depth_{run}.pt"
    warm_checkpoint = out / "checkpoints" / f"depth_{run}_warm.pt"
    control_checkpoint = out / "checkpoints" / f"depth_{run}_control.pt"
    data = None
    if restart:
        discard((checkpoint, warm_checkpoint, control_checkpoint))
    elif (saved := read_result(path)) is not None:  # a damaged file: written again from the checkpoints
        if saved.get("main_complete", saved.get("complete")) and \
                config_fields(saved.get("provenance", {}).get("settings") or {}) == settings.as_dict():
            if saved.get("complete") and _stage_done(saved, "warm", warm) and _stage_done(saved, "control", warm):
                print(f"{path}: up to date")
                return path
            data = {**saved, "main_complete": True}  # the sweep is done: only the warm stage or its control is left
    start = time.monotonic()
    if data is None:
        what = f"the Chapter 7 regression sweep ({preset} preset, seeds {', '.join(map(str, settings.seeds))})"
        stepper, records = train_stage(what, checkpoint, settings, settings.steps,
                                       lambda **kw: train_depth(settings, device, progress=True, **kw), device,
                                       deadline, restart)
        if records.complete:
            print(f"Chapter 7 regression sweep: complete, {records.seconds:.0f} s of training; measuring the final "
                  "risks and the references", flush=True)
            data = depth_readings(stepper, records, settings, depth_references(settings))
        else:  # stopped at the deadline: nothing measured
            print(f"Chapter 7 regression sweep: stopped at step {records.last_step} of {settings.steps} (partial), "
                  f"{records.seconds:.0f} s of training", flush=True)
            data = {"experiment": "depth_regression", "complete": False, "lengths": list(settings.lengths),
                    "steps": [int(s) for s in records.up_to(records.last_step)["steps"]]}
        data["main_complete"] = data["complete"]
        data["run"] = run
        data["provenance"] = {**depth_provenance(settings, preset, device, time.monotonic() - start, records),
                              "run": run, "overrides": overrides_of(seeds, shard=shard),
                              **({"allow_dirty": True} if dirty else {})}
        if shard is not None:
            data["provenance"]["shard"] = f"{shard[0]}/{shard[1]}"
    for name, source, stage_checkpoint in (("warm", "linear_2", warm_checkpoint),
                                           ("control", "softmax_2", control_checkpoint)):
        ready = data["main_complete"] and (name == "warm" or _stage_done(data, "warm", warm))
        if ready and not passed(deadline) and not _stage_done(data, name, warm):
            data[name] = _depth_warm(settings, warm, data, device, stage_checkpoint, deadline, restart, source)
    data["complete"] = bool(data["main_complete"] and _stage_done(data, "warm", warm)
                            and _stage_done(data, "control", warm))  # a file is complete when every stage is
    save_json(path, data)
    print(f"wrote {path}", flush=True)
    return path


def depth_provenance(settings, preset: str, device, wall_seconds: float, records) -> dict:
    """Where a Chapter 7 result came from: device, torch, commit, uncommitted changes, wall time, every setting, the
    training path and time, the date."""
    return {**provenance(device, wall_seconds), "device_name": device_name(device), "preset": preset,
            "settings": settings.as_dict(), "engine_path": records.engine_path,
            "training_seconds": round(float(records.seconds), 1), "date": utc_now()}


def dataclass_dict(value) -> dict:
    """A settings dataclass as the JSON files record it."""
    import dataclasses

    return json.loads(json.dumps(dataclasses.asdict(value)))


def _stage_done(data: dict, name: str, warm) -> bool:
    """Whether the file ``data`` holds its second stage ``name`` (``warm``, ``control``) complete, with the settings
    ``warm``."""
    stage = data.get(name) or {}
    return bool(stage.get("complete")) and stage.get("settings") == dataclass_dict(warm)


def _depth_warm(settings, warm, data, device, checkpoint, deadline, restart: bool = False,
                source: str = "linear_2") -> dict:
    """A second stage of a finished sweep ``data``: two-layer softmax trained (or resumed) from its trained model
    ``source`` (the two-layer linear weights: the warm stage; the block-start two-layer softmax weights: its
    equal-budget control), read."""
    from .depth_regression import WarmCheckpointKey, train_warm, warm_readings

    U, v = np.asarray(data["per_seed"]["U"]), np.asarray(data["per_seed"]["v"])
    what = ("the warm stage (two-layer softmax from the trained two-layer linear weights)" if source == "linear_2"
            else "the equal-budget control (the warm stage's steps from the block-start two-layer softmax weights)")
    stepper, records = train_stage(
        what, checkpoint, WarmCheckpointKey(settings, warm, source), warm.steps,
        lambda **kw: train_warm(settings, warm, U, v, device, progress=True, source=source, **kw), device, deadline,
        restart)
    if not records.complete:  # stopped at the deadline: nothing measured
        return {"settings": dataclass_dict(warm), "complete": False, "source": source,
                "steps": [int(s) for s in records.up_to(records.last_step)["steps"]]}
    start = time.monotonic()
    out = {**warm_readings(stepper, records, settings, warm, U, v), "source": source}
    out["provenance"] = {**provenance(device, time.monotonic() - start + float(records.seconds)),
                         "device_name": device_name(device), "engine_path": records.engine_path, "date": utc_now()}
    return out
