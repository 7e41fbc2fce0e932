"""Every result file of the course in one place: its name, how a chapter loads it, and the command that rebuilds it.

Names (in the results folder, :func:`~softmax_as_linear.core.artifacts.results_folder`):

- ``<figure>_<preset>.json`` for Figures 1-8 (``<figure>_<preset>_published.json`` for Figures 6-8 drawn with the
  published code's sampler), written by ``python -m softmax_as_linear reproduce <figures> --preset <preset>``;
- ``beyond_<covariates>_<run>.json`` for Chapter 6, written by ``python -m softmax_as_linear reproduce beyond``, where
  ``<run>`` is the preset's name when the run used the preset's settings, and otherwise the preset's name followed
  by what changed (:func:`~softmax_as_linear.experiments.file_names.run_name`), so that a reduced run never takes the
  full preset's name;
- ``depth_<run>.json``, ``nonlinear_<preset>.json``, ``nonlinear_depth_<preset>.json``,
  ``nonlinear_window_<preset>.json`` and ``nonlinear_optima_<preset>.json`` for Chapters 7 and 8: each reproduction's
  own module of :mod:`~softmax_as_linear.experiments.reproductions` declares its file, its command and what its
  chapter reads (:meth:`~softmax_as_linear.experiments.pipeline.Reproduction.read`; :func:`saved` by name);
- ``sweep_<covariance>[_published]_<preset>.npz`` and ``sweep_beyond_<covariates>_<run>.npz``: the training sweeps
  behind them (with ``_final.npz``, their final evaluation, and ``checkpoints/<stem>.pt``).

:func:`load_result` loads any of the JSON files by name and, when it is missing or damaged, names the command that
writes it (:func:`command_for`); a damaged file that the repository holds is also named with the ``git checkout`` that
restores it. A file written by a run stopped at its time limit (``"complete": false``) is refused by the loaders a
claim reads (``required=True`` and :func:`load_result`) with a
:class:`~softmax_as_linear.experiments.file_names.PartialResultError` that says how far it went
and the command that finishes it; the others return it as it is, and the figures drawn from it say "partial".
"""
from __future__ import annotations

import pathlib

from ..core import checks
from ..registry import PRESETS
from .file_names import (
    COMMAND,
    PartialResultError,
    beyond_command,
    beyond_file,
    beyond_stem,
    beyond_with_current_names,
    damaged_advice,
    figure_command,
    figure_file,
    overrides_of,
    parse_run,
    progress,
    read_file,
    reduced_runs,
    run_name,
    saved_beyond,
    saved_figure,
    shard_folder,
    sweep_stem,
)

# Chapters 7 and 8 ------------------------------------------------------------------------------------------------

def saved(name: str, preset: str = "lecture", folder=None, required: bool = False, **options) -> dict | None:
    """The saved file of the reproduction ``name`` at ``preset``
    (:meth:`~softmax_as_linear.experiments.pipeline.Reproduction.read`: ``None`` when it has not been written, or with
    ``required`` an error naming the command that
    writes it; a partial or damaged file refused)."""
    from .reproductions import REPRODUCTIONS

    return REPRODUCTIONS[checks.one_of("reproduction", name, tuple(REPRODUCTIONS))].read(preset, folder, required,
                                                                                          **options)


def saved_depth(run: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """Chapter 7's ``depth_<run>.json`` (``run``: the preset, or ``<preset>_<N>seeds``), as :func:`saved` reads."""
    from .reproductions import REPRODUCTIONS

    parsed = REPRODUCTIONS["depth"].parse_run(run)
    if parsed is None:
        raise ValueError(f"run must be a preset ({', '.join(PRESETS)}) optionally followed by _<N>seeds, got {run!r}")
    return saved("depth", parsed[0], folder, required, seeds=parsed[1])


def saved_nonlinear(preset: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """Chapter 8's ``nonlinear_<preset>.json``, as :func:`saved` reads."""
    return saved("nonlinear", preset, folder, required)


def saved_nonlinear_depth(preset: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """Chapter 8's ``nonlinear_depth_<preset>.json``, as :func:`saved` reads."""
    return saved("nonlinear_depth", preset, folder, required)


def saved_nonlinear_window(preset: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """Chapter 8's ``nonlinear_window_<preset>.json``, as :func:`saved` reads."""
    return saved("nonlinear_window", preset, folder, required)


def saved_nonlinear_optima(preset: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """Chapter 8's ``nonlinear_optima_<preset>.json``, as :func:`saved` reads."""
    return saved("nonlinear_optima", preset, folder, required)


# Any file ----------------------------------------------------------------------------------------------------------

def owner(filename: str):
    """``(reproduction, command)``: the reproduction of :mod:`~softmax_as_linear.experiments.reproductions` that writes
    the result file ``filename``, and the command that writes it; a ``ValueError`` for a file of none."""
    from .reproductions import REPRODUCTIONS

    name = pathlib.Path(filename).name
    for reproduction in REPRODUCTIONS.values():
        try:
            command = reproduction.command_for(name)
        except ValueError:
            continue
        if command is not None:
            return reproduction, command
    raise ValueError("filename must be a result file of the course (<figure>_<preset>[_published].json, "
                     "beyond_<covariates>_<run>.json, depth_<run>.json, nonlinear_<preset>.json, "
                     "nonlinear_depth_<preset>.json, nonlinear_window_<preset>.json or "
                     f"nonlinear_optima_<preset>.json), got {filename!r}")


def command_for(filename: str) -> str:
    """The command that writes the result file ``filename`` (:func:`owner`)."""
    return owner(filename)[1]


def load_result(filename: str, folder=None) -> dict:
    """The result file ``filename`` (results folder, then the shipped copy); a ``FileNotFoundError``,
    :class:`~softmax_as_linear.core.artifacts.DamagedFileError` or
    :class:`~softmax_as_linear.experiments.file_names.PartialResultError` names it and the
    command that writes (or finishes) it."""
    reproduction, command = owner(filename)
    return read_file(filename, folder, command, required=True, fields=reproduction.fields)




#: Every reader and name of a result file, in one place (the chapters read them from here).
__all__ = ["COMMAND", "PartialResultError", "beyond_command", "beyond_file", "beyond_stem", "beyond_with_current_names",
           "command_for", "damaged_advice", "figure_command", "figure_file", "load_result", "overrides_of", "owner",
           "parse_run", "progress", "read_file", "reduced_runs", "run_name", "saved", "saved_beyond", "saved_depth",
           "saved_figure", "saved_nonlinear", "saved_nonlinear_depth", "saved_nonlinear_optima",
           "saved_nonlinear_window", "shard_folder", "sweep_stem"]
