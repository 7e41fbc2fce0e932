"""Each chapter's reproduction of its own stages, one object behind one interface, and the registry that ``reproduce``,
``merge``, their option checks and the command line's help iterate over.

A :class:`Reproduction` says what a reproduction is called on the command line (``name``), what it trains and writes
(``summary``, ``file``, ``command``), how many seeds a preset gives it (``seeds``; ``fixed_seeds`` when the preset
fixes them and ``--seeds`` does not apply), how it runs (``reproduce``: its stages, each trained or resumed by
:func:`~softmax_as_linear.experiments.stages.train_stage`, then its file, complete when every stage is) and how its
shards are joined (``merged``). Adding a chapter's reproduction is writing one such class and listing it in
:data:`REPRODUCTIONS`; nothing else branches on its name. The paper's figures and Chapter 6, whose files are read from
shared sweeps, are :mod:`~softmax_as_linear.experiments.reproduce`'s own.
"""
from __future__ import annotations

import pathlib


class Reproduction:
    """One chapter's reproduction (the interface; see the module docstring)."""

    #: The name on the command line (``python -m softmax_as_linear reproduce <name>``).
    name = ""
    #: What it trains and writes, for the command's help.
    summary = ""
    #: An example command line for the help, after ``python -m softmax_as_linear``.
    example = ""
    #: Whether the preset fixes the seeds (``--seeds``, ``--sampler`` and ``--rng`` do not apply).
    fixed_seeds = False

    def seeds(self, preset: str, seeds: int | None = None) -> tuple[int, ...]:
        """The seeds this reproduction trains for ``preset`` (and ``seeds`` when it takes them)."""
        raise NotImplementedError

    def file(self, preset: str, seeds: int | None = None) -> str:
        """The name of its result file."""
        raise NotImplementedError

    def reproduce(self, preset: str, device, out: pathlib.Path, deadline: float | None, seeds: int | None,
                  restart: bool, shard: tuple[int, int] | None, dirty: bool) -> list[pathlib.Path]:
        """Train or resume every stage until ``deadline``, write the result file into ``out``; the files written."""
        raise NotImplementedError

    def merged(self, preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool,
               start: float) -> dict:
        """The result of one process joined from the ``n`` shards' files in ``out`` (a
        :class:`~softmax_as_linear.experiments.merging.ShardError` names a missing, unfinished or foreign shard)."""
        raise NotImplementedError

    def refused_options(self) -> str:
        """Why ``--seeds``, ``--sampler`` and ``--rng`` are refused, for a reproduction whose preset fixes them."""
        return f"seeds, sampler and rng do not apply to {self.title} (reproduce {self.name}): its preset fixes them"

    title = ""


class Depth(Reproduction):
    """Chapter 7: one- and two-layer attention on in-context regression, its warm stage and equal-budget control."""

    name, title = "depth", "Chapter 7's regression sweep"
    summary = "Chapter 7's in-context regression with one and two layers, written as depth_<preset>.json"
    example = "reproduce depth --preset lecture                 # Chapter 7: one and two layers"

    def seeds(self, preset, seeds=None):
        from .depth_reproduction import depth_seeds

        return depth_seeds(preset, seeds)

    def file(self, preset, seeds=None):
        from .result_files import depth_file, depth_run

        return depth_file(depth_run(preset, seeds))

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty):
        from .depth_reproduction import reproduce_depth

        return [reproduce_depth(preset, device, out, deadline, seeds, restart, shard, dirty)]

    def merged(self, preset, seeds, n, out, command, dirty, start):
        from .merging import merged_depth

        return merged_depth(preset, seeds, n, out, command, dirty, start)


class Nonlinear(Reproduction):
    """Chapter 8: softmax and linear attention on a nonlinear task, the learned window and its dependence."""

    name, title, fixed_seeds = "nonlinear", "Chapter 8's sweep", True
    summary = "Chapter 8's nonlinear task, written as nonlinear_<preset>.json"
    example = "reproduce nonlinear --preset lecture             # Chapter 8: a nonlinear task, the learned window"

    def seeds(self, preset, seeds=None):
        from .nonlinear import nonlinear_config

        return nonlinear_config(preset).seeds

    def file(self, preset, seeds=None):
        from .result_files import nonlinear_file

        return nonlinear_file(preset)

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty):
        from .nonlinear import reproduce_nonlinear
        from .presets import shard_seeds

        part = None if shard is None else shard_seeds(self.seeds(preset), *shard)
        return [reproduce_nonlinear(preset, device, out, deadline, restart, dirty, shard, part)]

    def merged(self, preset, seeds, n, out, command, dirty, start):
        from .merging import merged_nonlinear

        return merged_nonlinear(preset, n, out, command, dirty, start)


class NonlinearDepth(Reproduction):
    """Chapter 8's second layer: one- and two-layer attention on the nonlinear task."""

    name, title, fixed_seeds = "nonlinear_depth", "Chapter 8's one- and two-layer sweep", True
    summary = "its one- and two-layer sweep, written as nonlinear_depth_<preset>.json"
    example = "reproduce nonlinear_depth --preset lecture       # Chapter 8: its second layer"

    def seeds(self, preset, seeds=None):
        from .nonlinear_depth import nonlinear_depth_settings

        return nonlinear_depth_settings(preset).seeds

    def file(self, preset, seeds=None):
        from .result_files import nonlinear_depth_file

        return nonlinear_depth_file(preset)

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty):
        from .nonlinear_depth import reproduce_nonlinear_depth
        from .presets import shard_seeds

        part = None if shard is None else shard_seeds(self.seeds(preset), *shard)
        return [reproduce_nonlinear_depth(preset, device, out, deadline, restart, dirty, shard, part)]

    def merged(self, preset, seeds, n, out, command, dirty, start):
        from .merging import merged_nonlinear_depth

        return merged_nonlinear_depth(preset, n, out, command, dirty, start)


class NonlinearWindow(Reproduction):
    """Chapter 8's softmax layer trained with its window on a log scale until the window settles, and its dependence."""

    name, title, fixed_seeds = "nonlinear_window", "Chapter 8's log-window runs", True
    summary = "its softmax layer trained with the window on a log scale, written as nonlinear_window_<preset>.json"
    example = "reproduce nonlinear_window --preset lecture      # Chapter 8: windows trained until they settle"

    def seeds(self, preset, seeds=None):
        from .nonlinear_window import window_settings

        return window_settings(preset).seeds

    def file(self, preset, seeds=None):
        from .result_files import nonlinear_window_file

        return nonlinear_window_file(preset)

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty):
        from .nonlinear_window import reproduce_nonlinear_window
        from .presets import shard_seeds

        part = None if shard is None else shard_seeds(self.seeds(preset), *shard)
        return [reproduce_nonlinear_window(preset, device, out, deadline, restart, dirty, shard, part)]

    def merged(self, preset, seeds, n, out, command, dirty, start):
        from .merging import merged_nonlinear_window

        return merged_nonlinear_window(preset, n, out, command, dirty, start)


#: Every reproduction that trains its own stages, by name, in the order ``reproduce`` runs them.
REPRODUCTIONS: dict[str, Reproduction] = {r.name: r for r in (Depth(), Nonlinear(), NonlinearDepth(),
                                                                        NonlinearWindow())}

__all__ = ["REPRODUCTIONS", "Depth", "Nonlinear", "NonlinearDepth", "NonlinearWindow", "Reproduction"]
