"""A shard's result file read, and the one provenance rule of every merge: what
:func:`~softmax_as_linear.experiments.pipeline.merge_shards` and the sweeps' join of
:mod:`~softmax_as_linear.experiments.sweep_stage` share.

A missing, unfinished or damaged shard is a :class:`ShardError` that names it and the command that completes it; the
provenance of a joined file is :func:`common_origin`'s: every key the same on every shard, or marked as differing.
"""
from __future__ import annotations

import pathlib

from ..core.artifacts import DamagedFileError, load_json


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


#: What the merged provenance marks for a key on which the shards differ (each shard's own value is kept in
#: ``provenance["shards"]``).
SEVERAL = "several (see shards)"


def common_origin(origins: list[dict], own: tuple[str, ...] = ()) -> dict:
    """The one provenance rule of every merge: each key of the shards' provenance but ``own`` (what the merge
    records itself) with its value where every shard records the same, else :data:`SEVERAL` (a key one shard lacks
    and another records differs too)."""
    keys = dict.fromkeys(key for origin in origins for key in origin if key not in own)
    top = {}
    for key in keys:
        values = [origin.get(key, SEVERAL) for origin in origins]
        top[key] = values[0] if all(v == values[0] for v in values) and all(key in o for o in origins) else SEVERAL
    return top


#: What a merge records itself rather than taking from the shards.
MERGE_OWN = ("shard", "seeds", "stages", "settings", "overrides", "wall_seconds", "training_seconds", "date",
             "allow_dirty", "shards", "merged")


__all__ = ["MERGE_OWN", "SEVERAL", "ShardError", "ShardsPartial", "common_origin", "shard_json"]
