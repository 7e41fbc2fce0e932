"""Joining the shards of a reproduction: each shard's file read, and one rule for the joined file's provenance.

A missing, unfinished or foreign shard is named with the command that completes it (:class:`ShardError`); the
provenance of a joined file is :func:`common_origin`'s. The merges of the chapters' own reproductions (Chapters 7 and
8) are here; :mod:`~softmax_as_linear.experiments.shards` writes them.
"""
from __future__ import annotations

import pathlib
import time

from ..core.artifacts import DamagedFileError, load_json
from ..core.provenance import provenance, utc_now
from ..engine.sweep import config_fields
from .presets import shard_seeds
from .result_files import overrides_of, shard_folder


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


#: The one rule of every merge: the provenance keys the merged file takes from its first shard, and those of them that
#: may differ between shards (marked "several (see shards)" where they do; every shard's own is kept in ``shards``).
ORIGIN_KEYS = ("device", "device_name", "gpu", "torch", "python", "commit", "uncommitted_changes", "engine_path",
               "machine")
#: The keys of :data:`ORIGIN_KEYS` that may differ between shards.
MAY_DIFFER = ("device_name", "torch", "commit", "uncommitted_changes", "engine_path")


def common_origin(origins: list[dict]) -> dict:
    """The :data:`ORIGIN_KEYS` of the first shard's provenance, each of :data:`MAY_DIFFER` marked "several (see
    shards)" where the shards differ."""
    top = {key: origins[0].get(key) for key in ORIGIN_KEYS if key in origins[0]}
    for key in MAY_DIFFER:
        if len({str(o.get(key)) for o in origins}) > 1:
            top[key] = "several (see shards)"
    return top


def merged_depth(preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool, start: float) -> dict:
    """Chapter 7's regression result joined from its ``n`` shards' ``depth_<run>.json`` (per-seed arrays concatenated
    along the seed axis; the references, which have no seed, from the first shard), with the merged provenance; a
    :class:`ShardError` names a missing, unfinished or foreign shard."""
    from .depth_regression import merge_per_seed
    from .depth_reproduction import depth_shard_settings
    from .result_files import depth_file, depth_run

    run = depth_run(preset, seeds)
    parts, origins = [], []
    for k in range(1, n + 1):
        path = shard_folder(out, k, n) / depth_file(run)
        data = shard_json(path, k, n, command)
        expected = depth_shard_settings(preset, seeds, (k, n)).as_dict()
        if config_fields(data.get("provenance", {}).get("settings") or {}) != expected:
            raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                             f"{k}/{n} "
                             f"({path}) has other settings (seeds {data.get('per_seed', {}).get('seeds')}, this merge: "
                             f"{expected['seeds']}). Run merge with the shards' --preset and --seeds, or train the "
                             "shards again with these settings and --restart")
        parts.append(data)
        origin = dict(data["provenance"])
        origin.pop("settings", None)
        origins.append({**origin, "shard": f"{k}/{n}", "seeds": data["per_seed"]["seeds"]})
    merged = {key: value for key, value in parts[0].items() if key not in ("per_seed", "provenance")}
    merged["per_seed"] = merge_per_seed([p["per_seed"] for p in parts])
    seeded = ("risk", "risk_se", "minus", "minus_se", "fall", "fall_se", "trajectory")
    for stage in ("warm", "control"):  # the second stages' per-seed arrays, joined; their settings are the first's
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
    from .presets import NONLINEAR_FINAL_PROMPTS, NONLINEAR_REFERENCE_PROMPTS
    from .result_files import nonlinear_command, nonlinear_file

    whole = nonlinear_config(preset)
    parts, origins = [], []
    for k in range(1, n + 1):
        path = shard_folder(out, k, n) / nonlinear_file(preset)
        data = shard_json(path, k, n, command)
        expected = jsonable(whole.replace(seeds=shard_seeds(whole.seeds, k, n)).as_dict())
        if data.get("config") != expected:
            differ = [key for key in expected if (data.get("config") or {}).get(key) != expected[key]]
            raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                             f"{k}/{n} "
                             f"({path}) has other {', '.join(differ)}. Run merge with the shards' --preset, or train "
                             "the shards again with this library and --restart")
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
    from .depth_regression import merge_per_seed
    from .nonlinear_depth import nonlinear_depth_settings
    from .result_files import nonlinear_depth_command, nonlinear_depth_file

    whole = nonlinear_depth_settings(preset)
    parts, origins = [], []
    for k in range(1, n + 1):
        path = shard_folder(out, k, n) / nonlinear_depth_file(preset)
        data = shard_json(path, k, n, command)
        expected = nonlinear_depth_settings(preset, seeds=shard_seeds(whole.seeds, k, n)).as_dict()
        found = data.get("provenance", {}).get("settings") or {}
        if found != expected:
            differ = [key for key in expected if found.get(key) != expected[key]]
            raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                             f"{k}/{n} "
                             f"({path}) has other {', '.join(differ)}. Run merge with the shards' --preset, or train "
                             "the shards again with this library and --restart")
        parts.append(data)
        origin = dict(data["provenance"])
        origin.pop("settings", None)
        origins.append({**origin, "shard": f"{k}/{n}"})
    merged = {key: value for key, value in parts[0].items() if key not in ("per_seed", "provenance")}
    merged["per_seed"] = merge_per_seed([p["per_seed"] for p in parts])
    top = common_origin(origins)
    wall = time.monotonic() - start
    merged["provenance"] = {**top, "wall_seconds": round(sum(o.get("wall_seconds", 0.0) for o in origins) + wall, 1),
                            "preset": preset, "run": preset, "settings": whole.as_dict(), "seeds": list(whole.seeds),
                            "training_seconds": round(sum(o.get("training_seconds", 0.0) for o in origins), 1),
                            "command": nonlinear_depth_command(preset), "allow_dirty": bool(dirty),
                            "date": utc_now(), "shards": origins, "merged": provenance("cpu", wall)}
    return merged
