"""The names of the paper's figures' and Chapter 6's result files, and the reading of any result file: found in the
results folder (then the copy shipped with the package), refused when partial or damaged with the command that writes
or finishes it, checked for the fields its chapter reads.

A file written by a run stopped at its time limit (``"complete": false``) is refused by the readers a claim uses
(``required=True``) with a :class:`PartialResultError` that says how far it went (:func:`progress`: the stage that
stopped and its step) and the command that finishes it; the others return it as it is, and the figures drawn from it
say "partial". Every result file, by name, is :mod:`~softmax_as_linear.experiments.result_files`'s.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess

from ..core import checks
from ..core.artifacts import ENV_VAR, DamagedFileError, find_result, load_from_search_path, load_json, results_folder
from ..registry import CONCENTRATION_FIGURES, COVARIATES, PRESETS, REPRODUCE_COMMAND, SAMPLERS, TRAINING_FIGURES

COMMAND = REPRODUCE_COMMAND


class PartialResultError(RuntimeError):
    """A result file written by a run stopped before its end (``"complete": false``), asked for by a reader that needs
    the whole run: the message names the file, how far it went (:func:`progress`), the command that finishes it (it
    resumes from its checkpoint) and, when there is one, the complete copy to read instead. ``path``: the file."""

    def __init__(self, path, data: dict, command: str):
        self.path = pathlib.Path(path).absolute()
        committed = _committed(self.path)
        if committed is not None:
            instead = f", or restore the committed file with\n    git -C {committed[0]} checkout -- {committed[1]}"
        elif os.environ.get(ENV_VAR) and self.path.parent == results_folder().absolute():
            instead = f", or unset {ENV_VAR} to read the course's own copy"
        else:
            instead = ""
        super().__init__(f"{self.path} is partial ({progress(data)}): run\n    {command} --out {self.path.parent}\n"
                         f"again to finish it (it resumes from its checkpoint){instead}")


def progress(data: dict) -> str:
    """How far the run behind a partial file went, naming the stage that stopped: ``"step 1,100 of 4,000"`` (its
    first stage), ``"the sweep complete, stopped in dependence 0 at step 4 of 8"`` (a later one)."""
    stopped, at = data.get("stopped_in"), data.get("stopped_at")
    if stopped is not None:
        where = f"step {at[0]:,} of {at[1]:,}" if isinstance(at, list) and len(at) == 2 else "stopped before its end"
        done = list(data.get("stages_complete") or ())
        return where if not done else f"{', '.join(done)} complete, stopped in {stopped} at {where}"
    steps = data.get("steps")
    last = steps[-1] if isinstance(steps, list) and steps else steps
    total = ((data.get("provenance") or {}).get("settings") or {}).get("steps")
    if not isinstance(last, int):
        return "stopped before its end"
    return f"step {last:,}" + (f" of {total:,}" if isinstance(total, int) else "")


def damaged_advice(path, command: str) -> str:
    """What to do about the damaged result file ``path`` that ``command`` writes: restore it with ``git checkout``
    when the repository holds it (with the time its rerun took, from the committed copy), or write it again."""
    rerun = f"write it again with\n    {command}"
    committed = _committed(pathlib.Path(path).absolute())
    if committed is None:
        return f"delete it and {rerun}"
    top, relative = committed
    took = ""
    try:
        origin = json.loads(_git(top, "show", f"HEAD:{relative}") or "").get("provenance") or {}
        device = origin.get("device_name") or origin.get("device")
        took = (f" (the committed run took {float(origin['wall_seconds']) / 60:.0f} min"
                + (f" on {device})" if device else ")"))
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return (f"the repository holds it: restore the committed file with\n    git -C {top} checkout -- {relative}\n"
            f"or {rerun}{took}")


def _committed(path: pathlib.Path) -> tuple[str, str] | None:
    """``(repository, path inside it)`` when a git repository tracks the file ``path``, else None."""
    top = _git(path.parent, "rev-parse", "--show-toplevel")
    if top is None or not path.resolve().is_relative_to(pathlib.Path(top).resolve()):
        return None
    relative = path.resolve().relative_to(pathlib.Path(top).resolve()).as_posix()
    return (top, relative) if _git(top, "ls-files", "--error-unmatch", "--", relative) is not None else None


def _git(folder, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def read_file(filename: str, folder, command: str, required: bool, fields: tuple[str, ...] = ()) -> dict | None:
    """The result file ``filename`` (``folder``, else the results folder, then the shipped copy): ``None`` when it is
    missing (with ``required``, a ``FileNotFoundError`` naming the command that writes it), a
    :class:`~softmax_as_linear.core.artifacts.DamagedFileError` with :func:`damaged_advice` when it cannot be read,
    and with ``required`` a :class:`PartialResultError` when its run stopped before its end, or a
    :class:`~softmax_as_linear.core.artifacts.DamagedFileError` when it lacks one of ``fields`` (what its chapter
    reads)."""
    path = find_result(filename, folder)
    if path is None:
        return load_from_search_path(filename, folder, command=command) if required else None  # the former raises
    try:
        data = load_json(path)
    except DamagedFileError as error:
        raise error.advise(damaged_advice(path, command)) from None
    if required and data.get("complete", True) is False:
        raise PartialResultError(path, data, command)
    if required:
        missing = next((field for field in fields if field not in data), None)
        if missing is not None:
            raise DamagedFileError(path, f"it lacks the field {missing!r} that its chapter reads",
                                   damaged_advice(path, command))
    return data


def sweep_stem(covariance: str, preset: str, sampler: str = "paper") -> str:
    """File stem of a figures' sweep: ``sweep_<covariance>[_published]_<preset>`` (its ``.npz``, ``_final.npz``,
    ``.pt``)."""
    return f"sweep_{covariance}{'' if sampler == 'paper' else '_' + sampler}_{preset}"


def figure_file(name: str, preset: str = "paper", sampler: str = "paper") -> str:
    """File name of a figure's artifact: ``<name>_<preset>.json``, or ``<name>_<preset>_published.json``
    for a training figure drawn with the published sampler."""
    checks.one_of("sampler", sampler, SAMPLERS)
    return f"{name}_{preset}{'' if sampler == 'paper' else '_' + sampler}.json"


def figure_command(name: str, preset: str = "paper", sampler: str = "paper", seeds: int | None = None) -> str:
    """The command line that writes the artifact of figure ``name`` at ``preset`` scale, with the
    other figures of its sweep (one training serves them all); Figures 1 and 5 need no training.
    ``sampler`` and ``seeds`` (a number of seeds) add ``--sampler`` / ``--seeds`` for the training figures."""
    checks.one_of("figure", name, (*TRAINING_FIGURES, *CONCENTRATION_FIGURES))
    checks.one_of("sampler", sampler, SAMPLERS)
    if name in CONCENTRATION_FIGURES:
        return f"{COMMAND} {name} --preset {preset}"
    siblings = " ".join(f for f, (covariance, _) in TRAINING_FIGURES.items() if covariance == TRAINING_FIGURES[name][0])
    extra = ("" if sampler == "paper" else f" --sampler {sampler}") + ("" if seeds is None else f" --seeds {seeds}")
    return f"{COMMAND} {siblings} --preset {preset}{extra}"


def saved_figure(name: str, preset: str = "paper", folder=None, required: bool = False,
                 sampler: str = "paper") -> dict | None:
    """The artifact ``<name>_<preset>.json`` written by the reproduction command, from ``folder`` or by
    default from the results folder, then the copy shipped with the package
    (:func:`~softmax_as_linear.core.artifacts.find_result`). When it has not been generated yet: ``None``,
    or with ``required`` a ``FileNotFoundError`` naming the file and the command that writes it. A partial file
    (a run stopped at its time limit) is returned as it is (its figure says so), or with ``required`` (what a claim
    reads) refused with a :class:`PartialResultError`."""
    checks.one_of("figure", name, (*TRAINING_FIGURES, *CONCENTRATION_FIGURES))
    return read_file(figure_file(name, preset, sampler), folder, figure_command(name, preset, sampler), required)


# Chapter 6 ------------------------------------------------------------------------------------------------------

def run_name(preset: str, seeds=None, lengths=None) -> str:
    """The name of a Chapter 6 run: ``preset`` when it used the preset's seeds and lengths, else the preset followed
    by what changed, ``<preset>_<n>seeds`` and/or ``_L<l1>-<l2>-...`` (``paper_3seeds_L10-30-100-300-1000``).
    ``seeds`` and ``lengths``: the run's, or None for the preset's."""
    from .presets import beyond_config

    checks.one_of("preset", preset, PRESETS)
    base = beyond_config(preset)
    name = preset
    if seeds is not None and tuple(seeds) != base.seeds:
        from .presets import sweep_seeds

        if tuple(seeds) != sweep_seeds(len(seeds)):
            raise ValueError(f"seeds must be the first N seeds of the reproduction ({sweep_seeds(len(seeds))}), "
                             f"got {tuple(seeds)}")
        name += f"_{len(seeds)}seeds"
    if lengths is not None and tuple(lengths) != base.lengths:
        name += "_L" + "-".join(str(int(L)) for L in lengths)
    return name


def parse_run(run: str) -> tuple[str, int | None, tuple[int, ...] | None]:
    """``(preset, number of seeds or None, lengths or None)`` of a run name of :func:`run_name`."""
    match = re.fullmatch(r"([a-z]+)(?:_(\d+)seeds)?(?:_L(\d+(?:-\d+)*))?", run)
    if match is None or match.group(1) not in PRESETS:
        raise ValueError(f"run must be a preset ({', '.join(PRESETS)}) optionally followed by _<N>seeds and "
                         f"_L<lengths>, got {run!r}")
    seeds = None if match.group(2) is None else int(match.group(2))
    lengths = None if match.group(3) is None else tuple(int(L) for L in match.group(3).split("-"))
    return match.group(1), seeds, lengths


def beyond_stem(covariates: str, run: str = "paper") -> str:
    """File stem of a Chapter 6 result: ``beyond_<covariates>_<run>`` (the sweep behind it is ``sweep_<stem>``)."""
    checks.one_of("covariates", covariates, COVARIATES)
    parse_run(run)
    return f"beyond_{covariates}_{run}"


def beyond_file(covariates: str, run: str = "paper") -> str:
    """File name of a Chapter 6 result: ``beyond_<covariates>_<run>.json``."""
    return beyond_stem(covariates, run) + ".json"


def beyond_command(covariates: str, run: str = "paper") -> str:
    """The command that writes ``beyond_<covariates>_<run>.json`` into the results folder."""
    preset, seeds, lengths = parse_run(run)
    checks.one_of("covariates", covariates, COVARIATES)
    extra = ("" if seeds is None else f" --seeds {seeds}") + ("" if lengths is None else
                                                               " --lengths " + " ".join(map(str, lengths)))
    return f"{COMMAND} beyond --covariates {covariates} --preset {preset}{extra}"


def reduced_runs(covariates: str, preset: str, folder=None) -> list[str]:
    """The runs of ``preset`` with other seeds or lengths saved for the covariate law ``covariates`` (results folder,
    then the shipped copy), the one with the most seeds, then the longest prompts, first."""
    from ..core.artifacts import search_path

    runs = set()
    for place in search_path(folder):
        for path in pathlib.Path(place).glob(f"beyond_{covariates}_{preset}_*.json"):
            run = path.stem.removeprefix(f"beyond_{covariates}_")
            try:
                if parse_run(run)[0] == preset:
                    runs.add(run)
            except ValueError:
                continue

    def size(run):
        _, seeds, lengths = parse_run(run)
        return (seeds or 0, max(lengths or (0,)))
    return sorted(runs, key=size, reverse=True)


def saved_beyond(covariates: str, preset: str = "paper", folder=None) -> dict | None:
    """The saved Chapter 6 result of the covariate law ``covariates`` at ``preset`` scale:
    ``beyond_<covariates>_<preset>.json`` when the preset's run has been made, else the largest reduced run of that
    preset (:func:`reduced_runs`; its file's ``run`` and ``overrides`` say what changed), else ``None``
    (:func:`beyond_command` writes it). A partial file is returned as
    it is (``"complete": false``: its figures say so, and Chapter 6 checks no claim on it)."""
    run = preset if find_result(beyond_file(covariates, preset), folder) is not None else next(
        iter(reduced_runs(covariates, preset, folder)), preset)
    data = read_file(beyond_file(covariates, run), folder, beyond_command(covariates, run), required=False)
    return None if data is None else beyond_with_current_names(data)


def beyond_with_current_names(data: dict) -> dict:
    """A Chapter 6 result as written by any version, with today's names: files written before the covariate law was
    renamed from ``law`` to ``covariates`` (the committed ones among them, kept as written) hold it as ``"law"`` at
    the top, in ``"tracking"``, ``"limits"`` and ``"final"``, and in the provenance's ``"settings"``."""
    def renamed(part):
        return {("covariates" if key == "law" else key): value for key, value in part.items()} \
            if isinstance(part, dict) else part

    out = renamed({key: renamed(value) if key in ("tracking", "limits", "final") else value
                   for key, value in data.items()})
    if isinstance(out.get("provenance"), dict):
        out["provenance"] = {**out["provenance"], "settings": renamed(out["provenance"].get("settings"))}
    return out


def shard_folder(out: pathlib.Path, k: int, n: int) -> pathlib.Path:
    """Where shard ``k`` of ``n`` writes: ``<out>/shards/<k>-of-<n>/``."""
    return pathlib.Path(out) / "shards" / f"{k}-of-{n}"


def overrides_of(seeds: int | None = None, sampler: str = "paper", rng: str = "auto", lengths=None,
                 shard: tuple[int, int] | None = None) -> dict:
    """The settings of a reproduction that are not its preset's, as its files record them."""
    out = {} if seeds is None else {"seeds": int(seeds)}
    if sampler != "paper":
        out["sampler"] = sampler
    if rng != "auto":
        out["rng"] = rng
    if lengths is not None:
        out["lengths"] = [int(L) for L in lengths]
    if shard is not None:
        out["shard"] = f"{shard[0]}/{shard[1]}"
    return out
