"""What ``python -m softmax_as_linear reproduce`` runs: its options checked, then every reproduction named, in the
order of the registry :data:`~softmax_as_linear.experiments.reproductions.REPRODUCTIONS`.

Each reproduction is declared in a module of its own (:mod:`~softmax_as_linear.experiments.reproductions`) and run
by :mod:`~softmax_as_linear.experiments.pipeline` (its stages trained or resumed, the "up to date" short-cut,
completeness, restart, the partial file; the paper's figures and Chapter 6, whose sweeps several files share, through
:mod:`~softmax_as_linear.experiments.sweep_stage`). With a deadline, training stops after about that long and the
result files are written marked ``"complete": false``; the same call later resumes from the checkpoints (with
``restart``, the same call without it).

Every file records its preset and every override (``provenance["overrides"]``: seeds, lengths, sampler, random
stream, shard). A library with uncommitted changes writes nothing unless ``allow_dirty`` is given
(:class:`UncommittedChangesError`); the files then say so (``provenance["allow_dirty"]``).

A damaged result file is written again from its sweep or its stages' checkpoints, which the call says on stdout
(:func:`~softmax_as_linear.experiments.pipeline.read_result`); a damaged sweep, final evaluation or checkpoint stops
the call with a :class:`~softmax_as_linear.core.artifacts.DamagedFileError` that names it and says what to do, a
checkpoint written for other settings with a :class:`~softmax_as_linear.core.artifacts.SettingsMismatchError`;
nothing else is touched. ``restart`` trains the requested reproductions afresh (every stage's checkpoint deleted).
A reproduction split into shards (``shard=(k, n)``, :mod:`~softmax_as_linear.experiments.shards`) trains the seeds
of shard ``k`` only, in a folder of its own.
"""
from __future__ import annotations

import pathlib
import time

from ..core import checks
from ..core.artifacts import results_folder
from ..core.devices import resolve_device
from ..core.provenance import library_changes
from ..registry import PRESETS, RNGS, SAMPLERS
from .presets import all_seeds
from .reproductions import REPRODUCTIONS
from .result_files import shard_folder


class UncommittedChangesError(Exception):
    """The library has uncommitted changes and ``allow_dirty`` was not given: a result written now could not say
    which code computed it. The message lists the changed files."""


def check_clean(allow_dirty: bool = False) -> bool:
    """Raise :class:`UncommittedChangesError` when the library's source has uncommitted changes, unless
    ``allow_dirty``; returns whether it has (False when unknown)."""
    changed = library_changes()
    if changed and not allow_dirty:
        listed = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
        raise UncommittedChangesError(
            f"the library has uncommitted changes ({listed}): a result written now could not say which code computed "
            "it. Commit them, or pass --allow-dirty (allow_dirty=True) to write results that say so")
    return bool(changed)


def figures_of(figure: str | list[str]) -> list[str]:
    """The reproductions named (``"all"``: every paper figure), in the registry's order; a ``ValueError`` names an
    unknown one."""
    requested = [figure] if isinstance(figure, str) else list(figure)
    for name in requested:
        checks.one_of("figure", name, (*REPRODUCTIONS, "all"))
    if not requested:
        raise ValueError("figure must name at least one figure")
    return [name for name, r in REPRODUCTIONS.items() if ("all" in requested and r.in_all) or name in requested]


def check_options(preset: str, max_minutes: float | None, seeds: int | None = None, sampler: str = "paper",
                  rng: str = "auto", shard: tuple[int, int] | None = None, names=("fig2",), covariates=None,
                  lengths=None) -> None:
    """Check a reproduction's options before anything is computed; a ``ValueError`` names the first bad one
    (``names``: the reproductions of :func:`figures_of`, each of which checks its own options after the common ones;
    ``covariates`` and ``lengths`` apply only to the reproductions that take them, Chapter 6's)."""
    checks.one_of("preset", preset, PRESETS)
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= 1000):
        raise ValueError(f"seeds must be an integer from 1 to 1000, got {seeds!r}")
    checks.one_of("sampler", sampler, SAMPLERS)
    if max_minutes is not None and not max_minutes > 0:
        raise ValueError(f"max_minutes must be positive, got {max_minutes!r}")
    checks.one_of("rng", rng, RNGS)
    chosen = [REPRODUCTIONS[name] for name in names]
    for option, value in (("covariates", covariates), ("lengths", lengths)):
        if value is not None and not any(option in r.options for r in chosen):
            takers = [r for r in REPRODUCTIONS.values() if option in r.options]
            raise ValueError(f"{option} applies to {' and '.join(r.title for r in takers)} only "
                             f"(reproduce {' '.join(r.name for r in takers)})")
    for r in chosen:
        r.check(preset, seeds, shard, max_minutes, sampler=sampler, rng=rng, covariates=covariates, lengths=lengths)
    if shard is not None:
        k, n = shard
        counts = {r.name: r.shard_count(preset, seeds) for r in chosen}
        fixed_counts = [counts[r.name] for r in chosen if r.fixed_seeds]  # Chapter 8's presets fix their seeds
        count = min((c for c in counts.values() if c is not None), default=len(all_seeds(preset, seeds)))
        if not 1 <= k <= n:
            raise ValueError(f"shard must be K/N with 1 <= K <= N, got {k}/{n}")
        if n > count:
            raise ValueError(f"shard needs a seed at least per shard: {n} shards, and this reproduction has {count} "
                             f"seed{'s' if count > 1 else ''}; "
                             + (f"use {count} shards or fewer (the preset fixes Chapter 8's seeds)"
                                if count in fixed_counts else f"add --seeds {n} or more"))


def reproduce(figure: str | list[str], preset: str = "lecture", device: str = "auto", out=None,
              max_minutes: float | None = None, seeds: int | None = None, sampler: str = "paper",
              restart: bool = False, shard: tuple[int, int] | None = None, rng: str = "auto",
              covariates=None, lengths=None, allow_dirty: bool = False) -> list[pathlib.Path]:
    """Compute and save the artifacts of ``figure`` (a name of
    :data:`~softmax_as_linear.experiments.reproductions.REPRODUCTIONS`, ``"all"``, or a list of them); returns the
    files written. Each reproduction named runs in the registry's order
    (:meth:`~softmax_as_linear.experiments.pipeline.Reproduction.reproduce`).

    ``out`` defaults to the results folder, where the chapters read. ``max_minutes`` bounds the
    training time of this call (artifacts are then marked ``"complete": false``). ``seeds``: number of
    seeds of each sweep (default: the preset's; the paper's seed 327 first). ``sampler``: the inputs of the
    KMS sweep (Figures 6-8), ``"paper"`` or ``"published"``; the isotropic sweep is the same for both.
    ``rng``: the random stream of the training prompts (:class:`~softmax_as_linear.engine.sweep.TrainConfig`),
    ``"auto"`` (the counter-based stream on CUDA, torch's generators on a CPU), ``"torch"`` or ``"philox"``
    (Chapter 6's sweeps, which train infinite-prompt models, always use torch's generators). Chapter 8's
    reproductions (``"nonlinear"``, ``"nonlinear_depth"`` and ``"nonlinear_window"``, which shard, and
    ``"nonlinear_optima"``, which does not) take their seeds and stream from their preset. ``covariates`` (default
    :data:`~softmax_as_linear.experiments.reproductions.beyond.BEYOND_COVARIATES`) and ``lengths`` (default the
    preset's): Chapter 6's covariate laws and prompt lengths. ``restart``: train the sweeps afresh (their checkpoints
    are deleted, their files rewritten). ``shard=(k, n)``: train only the seeds of shard ``k`` of ``n``
    (:func:`~softmax_as_linear.experiments.presets.shard_seeds`), writing into
    :func:`~softmax_as_linear.experiments.file_names.shard_folder`; Figures 1 and 5 (no seeds) are left to the merge
    (:func:`~softmax_as_linear.experiments.shards.merge`). ``allow_dirty``: write results although the library has
    uncommitted changes (:func:`check_clean`), saying so in every file.
    """
    names = figures_of(figure)
    check_options(preset, max_minutes, seeds, sampler, rng, shard, names, covariates, lengths)
    dirty = check_clean(allow_dirty)
    deadline = None if max_minutes is None else time.monotonic() + 60 * max_minutes
    device = resolve_device(device)
    out = results_folder() if out is None else pathlib.Path(out)
    chosen = [REPRODUCTIONS[name] for name in names]
    if shard is not None:
        out = shard_folder(out, *shard)
        chosen = [r for r in chosen if r.sharded]
    options = dict(sampler=sampler, rng=rng, covariates=covariates, lengths=lengths)
    if not restart:
        for r in chosen:
            r.before_training(preset, out, seeds, shard, **options)
    written, shared = [], {}  # shared: the sweeps the figures of this call share, trained once
    for r in chosen:
        written += r.reproduce(preset, device, out, deadline, seeds, restart, shard, dirty, shared=shared, **options)
    return written
