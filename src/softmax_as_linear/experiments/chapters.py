"""Every reproduction of the course, one object behind one interface, and the registry that ``reproduce``, ``merge``,
their option checks and the command line's choices and help iterate over.

A :class:`Reproduction` says what it is called on the command line (``name``), what it trains and writes
(``summary``, ``file``, ``example``), whether ``all`` includes it (``in_all``), which options only it takes
(``options``), how many seeds a preset gives it (``seeds``; ``fixed_seeds`` when the preset fixes them and ``--seeds``
does not apply; ``sharded`` when a sharded run leaves it to the merge), how it runs (``reproduce``: its stages, each
trained or resumed by :func:`~softmax_as_linear.experiments.stages.train_stage`, then its files, complete when every
stage is) and how its shards are joined (``check_shards``, then ``merged_files``, the per-seed files by
:func:`~softmax_as_linear.experiments.merging.merged_per_seed_shards`). The paper's figures
(:class:`Figure`, one per figure; Figures 2-4 share one sweep and Figures 6-8 another, trained once per call through
``shared``), Chapter 6's sweeps (:class:`Beyond`), Chapter 7 (:class:`Depth`) and Chapter 8 (:class:`Nonlinear`,
:class:`NonlinearDepth`, :class:`NonlinearWindow`, :class:`NonlinearOptima`) are such objects. A reproduction's
presets, stages, file name and merge live in other modules (``CONTRIBUTING.md``, "Adding a chapter's
reproduction", lists them); its class here, listed in :data:`REPRODUCTIONS`, is what ``reproduce``, ``merge``, their
option checks and the help iterate over: nothing else branches on its name.

The keyword ``options`` every method takes are the command's other options: ``sampler``, ``rng``, ``covariates``,
``lengths`` (with ``None`` and the defaults meaning "not given"), ``device`` (merge) and ``shared`` (reproduce) or
``sweeps`` (merge), one dictionary per call in which the figures keep the sweeps they share.
"""
from __future__ import annotations

import pathlib
from typing import Callable

from ..registry import CONCENTRATION_FIGURES, FIGURES


class Reproduction:
    """One reproduction (the interface; see the module docstring)."""

    #: The name on the command line (``python -m softmax_as_linear reproduce <name>``).
    name = ""
    #: What it is called in messages ("Chapter 7's regression sweep").
    title = ""
    #: What it trains and writes, for the command's help ("" when the help's first sentence says it).
    summary = ""
    #: An example command line for the help, after ``python -m softmax_as_linear`` ("" for none of its own).
    example = ""
    #: Whether the preset fixes the seeds (``--seeds``, ``--sampler`` and ``--rng`` do not apply).
    fixed_seeds = False
    #: Whether ``reproduce all`` includes it (the paper's figures).
    in_all = False
    #: Whether a sharded run trains it (else the merge computes it: Figures 1 and 5, which have no seeds).
    sharded = True
    #: The options that only some reproductions take, among ``"covariates"`` and ``"lengths"``.
    options: tuple[str, ...] = ()

    def seeds(self, preset: str, seeds: int | None = None) -> tuple[int, ...]:
        """The seeds this reproduction trains for ``preset`` (and ``seeds`` when it takes them)."""
        raise NotImplementedError

    def shard_count(self, preset: str, seeds: int | None = None) -> int | None:
        """How many seeds its shards split (None: it has none)."""
        return len(self.seeds(preset, seeds))

    def file(self, preset: str, seeds: int | None = None, **options) -> str:
        """The name of its result file."""
        raise NotImplementedError

    def check(self, preset: str, seeds: int | None, shard: tuple[int, int] | None, max_minutes: float | None,
              **options) -> None:
        """Its own checks of the command's options, after the common ones; a ``ValueError`` names a bad one."""
        if self.fixed_seeds and (seeds is not None or options.get("sampler", "paper") != "paper"
                                 or options.get("rng", "auto") != "auto"):
            raise ValueError(self.refused_options())

    def refused_options(self) -> str:
        """Why ``--seeds``, ``--sampler`` and ``--rng`` are refused, for a reproduction whose preset fixes them."""
        return f"seeds, sampler and rng do not apply to {self.title} (reproduce {self.name}): its preset fixes them"

    def before_training(self, preset: str, out: pathlib.Path, seeds: int | None, shard: tuple[int, int] | None,
                        **options) -> None:
        """Refuse, before anything of the call trains, what the call must not do to a file in ``out``."""

    def reproduce(self, preset: str, device, out: pathlib.Path, deadline: float | None, seeds: int | None,
                  restart: bool, shard: tuple[int, int] | None, dirty: bool, **options) -> list[pathlib.Path]:
        """Train or resume every stage until ``deadline``, write the result files into ``out``; the files written."""
        raise NotImplementedError

    def check_shards(self, preset: str, seeds: int | None, n: int, out: pathlib.Path, command, **options) -> None:
        """A :class:`~softmax_as_linear.experiments.merging.ShardError` when a shard has not written a sweep the merge
        joins, checked for every reproduction of a merge before any sweep is read (the figures and Chapter 6). This
        default checks nothing: a reproduction whose shards write one result file each checks them as
        :meth:`Reproduction.merged` reads them, before anything is written."""

    def merged(self, preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool,
               start: float) -> dict:
        """The result of one process joined from the ``n`` shards' files in ``out`` (a
        :class:`~softmax_as_linear.experiments.merging.ShardError` names a missing, unfinished or foreign shard)."""
        raise NotImplementedError

    def merged_files(self, preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool,
                     start: float, **options) -> list[tuple[str, Callable[[], dict]]]:
        """Each file the merge writes, as its name and what computes its content; every shard is read and checked
        here, and nothing is written."""
        data = self.merged(preset, seeds, n, out, command, dirty, start)
        return [(self.file(preset, seeds), lambda: data)]


class Figure(Reproduction):
    """A figure of the paper: a training figure reads its sweep (shared with the other figures of that sweep); Figures 1
    and 5 compare softmax and linear attention at the initialisation, without training (and without seeds)."""

    in_all = True

    def __init__(self, name: str):
        self.name, self.title = name, f"Figure {name[3:]}"
        self.sharded = name not in CONCENTRATION_FIGURES

    def seeds(self, preset, seeds=None):
        from .figure_sweeps import all_seeds

        return all_seeds(preset, seeds) if self.sharded else ()

    def shard_count(self, preset, seeds=None):
        return len(self.seeds(preset, seeds)) if self.sharded else None

    def file(self, preset, seeds=None, sampler="paper", **options):
        from .figure_sweeps import sweep_of
        from .result_files import figure_file

        return figure_file(self.name, preset, sweep_of(self.name, sampler)[1] if self.sharded else "paper")

    def before_training(self, preset, out, seeds, shard, sampler="paper", **options):
        from .figure_sweeps import figure_seeds, keep_other_seeds

        if self.sharded:
            keep_other_seeds(out / self.file(preset, seeds, sampler), figure_seeds(preset, seeds, shard))

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, sampler="paper", rng="auto",
                  shared=None, **options):
        from .figure_sweeps import reproduce_figure

        return [reproduce_figure(self.name, preset, device, out, deadline, seeds, restart, shard, dirty, sampler, rng,
                                 {} if shared is None else shared)]

    def check_shards(self, preset, seeds, n, out, command, sampler="paper", **options):
        from .figure_sweeps import sweep_of
        from .merging import check_sweep_shards
        from .result_files import sweep_stem

        if self.sharded:
            covariance, used = sweep_of(self.name, sampler)
            check_sweep_shards(sweep_stem(covariance, preset, used), out, n, command)

    def merged_files(self, preset, seeds, n, out, command, dirty, start, sampler="paper", rng="auto", device="auto",
                     sweeps=None, **options):
        from .merging import merged_figure

        return [(self.file(preset, seeds, sampler),
                 merged_figure(self.name, preset, seeds, n, out, command, dirty, start, sampler, rng, device,
                               {} if sweeps is None else sweeps))]


class Beyond(Reproduction):
    """Chapter 6: one sweep per covariate law, each read and written as ``beyond_<covariates>_<run>.json``."""

    name, title, options = "beyond", "Chapter 6's sweeps", ("covariates", "lengths")
    summary = ("Chapter 6's sweeps, one per covariate law (--covariates), written as "
               "beyond_<covariates>_<preset>.json")
    example = "reproduce beyond --preset paper --device cuda    # Chapter 6: uniform and Rademacher"

    def seeds(self, preset, seeds=None):
        from .figure_sweeps import all_seeds

        return all_seeds(preset, seeds, beyond=True)

    def file(self, preset, seeds=None, covariates=None, lengths=None, **options):
        """The file of its first covariate law (it writes one per law)."""
        from .figure_sweeps import BEYOND_COVARIATES, beyond_run
        from .result_files import beyond_stem

        return beyond_stem((covariates or BEYOND_COVARIATES)[0], beyond_run(preset, seeds, lengths)) + ".json"

    def check(self, preset, seeds, shard, max_minutes, covariates=None, lengths=None, **options):
        from ..core import checks
        from ..registry import COVARIATES
        from .presets import beyond_config

        for covariate in covariates or ():
            checks.one_of("covariates", covariate, COVARIATES)
        if lengths is not None:
            beyond_config(preset, lengths=tuple(lengths))  # checks the lengths

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, rng="auto", covariates=None,
                  lengths=None, **options):
        from .figure_sweeps import reproduce_beyond

        return reproduce_beyond(preset, device, out, deadline, seeds, rng, restart, shard, covariates, lengths, dirty)

    def check_shards(self, preset, seeds, n, out, command, covariates=None, lengths=None, **options):
        from .figure_sweeps import BEYOND_COVARIATES, beyond_run
        from .merging import check_sweep_shards
        from .result_files import beyond_stem

        for covariate in covariates or BEYOND_COVARIATES:
            check_sweep_shards(f"sweep_{beyond_stem(covariate, beyond_run(preset, seeds, lengths))}", out, n, command)

    def merged_files(self, preset, seeds, n, out, command, dirty, start, rng="auto", covariates=None, lengths=None,
                     sweeps=None, **options):
        from .merging import merged_beyond

        return merged_beyond(preset, seeds, n, out, command, dirty, start, rng, covariates, lengths,
                             {} if sweeps is None else sweeps)


class Depth(Reproduction):
    """Chapter 7: one- and two-layer attention on in-context regression, its warm stage and equal-budget control."""

    name, title = "depth", "Chapter 7's regression sweep"
    summary = "Chapter 7's in-context regression with one and two layers, written as depth_<preset>.json"
    example = "reproduce depth --preset lecture                 # Chapter 7: one and two layers"

    def seeds(self, preset, seeds=None):
        from .depth_reproduction import depth_seeds

        return depth_seeds(preset, seeds)

    def file(self, preset, seeds=None, **options):
        from .result_files import depth_file, depth_run

        return depth_file(depth_run(preset, seeds))

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, **options):
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

    def file(self, preset, seeds=None, **options):
        from .result_files import nonlinear_file

        return nonlinear_file(preset)

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, **options):
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

    def file(self, preset, seeds=None, **options):
        from .result_files import nonlinear_depth_file

        return nonlinear_depth_file(preset)

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, **options):
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

    def file(self, preset, seeds=None, **options):
        from .result_files import nonlinear_window_file

        return nonlinear_window_file(preset)

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, **options):
        from .nonlinear_window import reproduce_nonlinear_window
        from .presets import shard_seeds

        part = None if shard is None else shard_seeds(self.seeds(preset), *shard)
        return [reproduce_nonlinear_window(preset, device, out, deadline, restart, dirty, shard, part)]

    def merged(self, preset, seeds, n, out, command, dirty, start):
        from .merging import merged_nonlinear_window

        return merged_nonlinear_window(preset, n, out, command, dirty, start)


class NonlinearOptima(Reproduction):
    """Chapter 8's optima: the best window of one attention layer against the prompt length, fitted on fixed prompts
    (no training, no checkpoint: one run of fixed seeds on one CPU core; neither shards nor a time limit)."""

    name, title, fixed_seeds, sharded = "nonlinear_optima", "Chapter 8's optima", True, False
    summary = "the optima of one attention layer against L, written as nonlinear_optima_<preset>.json"
    example = "reproduce nonlinear_optima --preset lecture      # Chapter 8: one layer's optima (33 min)"

    def seeds(self, preset, seeds=None):
        from .nonlinear_optima import replicate_seeds

        return replicate_seeds(preset)

    def file(self, preset, seeds=None, **options):
        from .result_files import nonlinear_optima_file

        return nonlinear_optima_file(preset)

    def check(self, preset, seeds, shard, max_minutes, **options):
        from .result_files import OPTIMA_PRESETS

        super().check(preset, seeds, shard, max_minutes, **options)
        if preset not in OPTIMA_PRESETS:
            raise ValueError(f"preset must be one of {', '.join(map(repr, OPTIMA_PRESETS))} for {self.title} "
                             f"(reproduce {self.name}), got {preset!r}")
        if shard is not None:
            raise ValueError(f"shard does not apply to {self.title} (reproduce {self.name}): its fits run in one "
                             "process, without shards")
        if max_minutes is not None:
            raise ValueError(f"max_minutes does not apply to {self.title} (reproduce {self.name}): its fits keep no "
                             "checkpoint to resume from (the lecture preset takes about 33 minutes of one CPU core)")

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, **options):
        from .nonlinear_optima import reproduce_nonlinear_optima

        return [reproduce_nonlinear_optima(preset, out, restart=restart, dirty=dirty)]


#: Every reproduction, by name, in the order ``reproduce`` runs them (the paper's figures first).
REPRODUCTIONS: dict[str, Reproduction] = {r.name: r for r in (*(Figure(name) for name in FIGURES), Beyond(), Depth(),
                                                               Nonlinear(), NonlinearDepth(), NonlinearWindow(),
                                                               NonlinearOptima())}

__all__ = ["REPRODUCTIONS", "Beyond", "Depth", "Figure", "Nonlinear", "NonlinearDepth", "NonlinearOptima",
           "NonlinearWindow", "Reproduction"]
