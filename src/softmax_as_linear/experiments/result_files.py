"""Every result file of the course in one place: its name, how a chapter loads it, and the command that rebuilds it.

Names (in the results folder, :func:`~softmax_as_linear.core.artifacts.results_folder`):

- ``<figure>_<preset>.json`` for Figures 1-8 (``<figure>_<preset>_published.json`` for Figures 6-8 drawn with the
  published code's sampler), written by ``python -m softmax_as_linear reproduce <figures> --preset <preset>``;
- ``beyond_<covariates>_<run>.json`` for Chapter 6, written by ``python -m softmax_as_linear reproduce beyond``, where
  ``<run>`` is the preset's name when the run used the preset's settings, and otherwise the preset's name followed
  by what changed (:func:`run_name`), so that a reduced run never takes the full preset's name;
- ``depth_<run>.json`` for Chapter 7's regression with one and two layers, written by
  ``python -m softmax_as_linear reproduce depth``, ``<run>`` the preset's name, followed by ``_<N>seeds`` when the
  number of seeds was overridden (:func:`depth_run`), with its checkpoint ``checkpoints/depth_<run>.pt``;
- ``nonlinear_<preset>.json`` for Chapter 8's nonlinear in-context regression, written by
  ``python -m softmax_as_linear reproduce nonlinear --preset <preset>``, with its checkpoint
  ``checkpoints/nonlinear_<preset>.pt``, and ``nonlinear_depth_<preset>.json`` for its one- and two-layer sweep, written
  by ``python -m softmax_as_linear reproduce nonlinear_depth --preset <preset>``, and ``nonlinear_optima_<preset>.json``
  for the optima of one attention layer, written by ``python -m softmax_as_linear reproduce nonlinear_optima --preset
  <preset>``;
- ``sweep_<covariance>[_published]_<preset>.npz`` and ``sweep_beyond_<covariates>_<run>.npz``: the training sweeps
  behind them (with ``_final.npz``, their final evaluation, and ``checkpoints/<stem>.pt``).

:func:`load_result` loads any of the JSON files by name and, when it is missing or damaged, names the command that
writes it (:func:`command_for`); a damaged file that the repository holds is also named with the ``git checkout`` that
restores it. A file written by a run stopped at its time limit (``"complete": false``) is refused by the loaders a
claim reads (``required=True`` and :func:`load_result`) with a :class:`PartialResultError` that says how far it went
and the command that finishes it; the others return it as it is, and the figures drawn from it say "partial".
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess

from ..core import checks
from ..core.artifacts import ENV_VAR, DamagedFileError, find_result, load_json, results_folder
from ..core.artifacts import load_result as _load_result
from ..registry import CONCENTRATION_FIGURES, COVARIATES, PRESETS, SAMPLERS, TRAINING_FIGURES

COMMAND = "python -m softmax_as_linear reproduce"


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
    """How far the run behind a result file went, naming the stage that stopped: ``"step 1,100 of 4,000"`` (its
    first stage); once that is complete, the later stage that stopped: for Chapter 7's file ``"the sweep complete, its
    warm stage at step 500 of 2,000"`` (``"... not started"``; ``"..., its warm stage complete, its equal-budget
    control at ..."``), for a file that records ``stopped_in`` (Chapter 8's) ``"the sweep complete, stopped in
    dependence 0 at step 4 of 8"``."""
    if data.get("main_complete") and data.get("experiment") == "depth_regression":
        done = "the sweep complete"
        for name, label in (("warm", "warm stage"), ("control", "equal-budget control")):
            stage = data.get(name)
            if not stage:
                return f"{done}, its {label} not started"
            if not stage.get("complete"):
                return f"{done}, its {label} at {_steps(stage, stage.get('settings') or {})}"
            done += f", its {label} complete"
        return done
    stopped, at = data.get("stopped_in"), data.get("stopped_at")
    if stopped and stopped not in ("sweep", "the sweep"):
        where = f" at step {at[0]:,} of {at[1]:,}" if isinstance(at, list) and len(at) == 2 else ""
        return f"the sweep complete, stopped in {stopped}{where}"
    return _steps(data, (data.get("provenance") or {}).get("settings") or {})


def _steps(data: dict, settings: dict) -> str:
    steps = data.get("steps")
    last = steps[-1] if isinstance(steps, list) and steps else steps
    total = settings.get("steps")
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


def _read(filename: str, folder, command: str, required: bool) -> dict | None:
    """The result file ``filename`` (``folder``, else the results folder, then the shipped copy): ``None`` when it is
    missing (with ``required``, a ``FileNotFoundError`` naming the command that writes it), a
    :class:`~softmax_as_linear.core.artifacts.DamagedFileError` with :func:`damaged_advice` when it cannot be read,
    and with ``required`` a :class:`PartialResultError` when its run stopped before its end."""
    path = find_result(filename, folder)
    if path is None:
        return _load_result(filename, folder, command=command) if required else None  # the former raises
    try:
        data = load_json(path)
    except DamagedFileError as error:
        raise error.advise(damaged_advice(path, command)) from None
    if required and data.get("complete", True) is False:
        raise PartialResultError(path, data, command)
    if required:
        missing = next((field for field in _fields_read(filename) if field not in data), None)
        if missing is not None:
            raise DamagedFileError(path, f"it lacks the field {missing!r} that its chapter reads",
                                   damaged_advice(path, command))
    return data


#: The fields a chapter reads from a complete result file, by the start of the file's name (:func:`by_prefix`).
FIELDS_READ = {"nonlinear_depth_": ("per_seed", "lengths", "models", "steps", "provenance"),
               "nonlinear_window_": ("per_seed", "lengths", "steps", "decay_step", "dependence", "provenance"),
               "nonlinear_optima_": ("lengths", "replicates", "prompts", "limits", "replicate", "summary", "moves",
                                     "exponent", "dependence", "provenance"),
               "nonlinear_": ("config", "models", "trajectories", "final", "windows", "references", "dependence",
                              "provenance"),
               "depth_": ("per_seed", "lengths", "steps", "decay_step", "references", "provenance")}


def by_prefix(table: dict, name: str):
    """The entry of ``table`` whose key is the longest that ``name`` starts with (None for none), whatever the
    table's order: the one rule by which :data:`FIELDS_READ` and :data:`COMMANDS` are read."""
    matches = [prefix for prefix in table if name.startswith(prefix)]
    return table[max(matches, key=len)] if matches else None


def _fields_read(filename: str) -> tuple[str, ...]:
    return by_prefix(FIELDS_READ, filename) or ()


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
    return _read(figure_file(name, preset, sampler), folder, figure_command(name, preset, sampler), required)


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
    data = _read(beyond_file(covariates, run), folder, beyond_command(covariates, run), required=False)
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


# Chapter 7 ------------------------------------------------------------------------------------------------------

def depth_run(preset: str, seeds: int | None = None) -> str:
    """The run name of a Chapter 7 regression sweep: ``preset``, or ``<preset>_<N>seeds`` when ``seeds`` (a number of
    seeds, the first ``N`` of the reproduction's) is not the preset's."""
    from .depth_regression import depth_settings
    from .presets import sweep_seeds

    checks.one_of("preset", preset, PRESETS)
    if seeds is None or sweep_seeds(seeds) == depth_settings(preset).seeds:
        return preset
    return f"{preset}_{int(seeds)}seeds"


def parse_depth_run(run: str) -> tuple[str, int | None]:
    """``(preset, number of seeds or None)`` of a run name of :func:`depth_run`."""
    match = re.fullmatch(r"([a-z]+)(?:_(\d+)seeds)?", run)
    if match is None or match.group(1) not in PRESETS:
        raise ValueError(f"run must be a preset ({', '.join(PRESETS)}) optionally followed by _<N>seeds, got {run!r}")
    return match.group(1), None if match.group(2) is None else int(match.group(2))


def depth_file(run: str = "lecture") -> str:
    """File name of a Chapter 7 regression result: ``depth_<run>.json``."""
    parse_depth_run(run)
    return f"depth_{run}.json"


def depth_command(run: str = "lecture") -> str:
    """The command that writes ``depth_<run>.json`` into the results folder."""
    preset, seeds = parse_depth_run(run)
    return f"{COMMAND} depth --preset {preset}" + ("" if seeds is None else f" --seeds {seeds}")


def saved_depth(run: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """The saved Chapter 7 regression result ``depth_<run>.json`` (results folder, then the shipped copy): ``None``
    when it has not been written, or with ``required`` a ``FileNotFoundError`` naming the command that writes it.
    With ``required`` (what Chapter 7 reads), a partial file (the sweep or its warm stage stopped at a time limit)
    is refused with a :class:`PartialResultError` naming how far it went and the command that finishes it."""
    return _read(depth_file(run), folder, depth_command(run), required)


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


# Chapter 8 ------------------------------------------------------------------------------------------------------

def nonlinear_file(preset: str = "lecture") -> str:
    """File name of Chapter 8's result: ``nonlinear_<preset>.json``."""
    checks.one_of("preset", preset, PRESETS)
    return f"nonlinear_{preset}.json"


def nonlinear_command(preset: str = "lecture") -> str:
    """The command that writes ``nonlinear_<preset>.json`` into the results folder."""
    checks.one_of("preset", preset, PRESETS)
    return f"{COMMAND} nonlinear --preset {preset}"


def saved_nonlinear(preset: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """The saved Chapter 8 result ``nonlinear_<preset>.json`` (results folder, then the shipped copy): ``None`` when
    it has not been written, or with ``required`` a ``FileNotFoundError`` naming the command that writes it. With
    ``required`` (what Chapter 8 reads), a partial file is refused with a :class:`PartialResultError`."""
    return _read(nonlinear_file(preset), folder, nonlinear_command(preset), required)


def nonlinear_depth_file(preset: str = "lecture") -> str:
    """File name of Chapter 8's one- and two-layer result: ``nonlinear_depth_<preset>.json``."""
    checks.one_of("preset", preset, PRESETS)
    return f"nonlinear_depth_{preset}.json"


def nonlinear_depth_command(preset: str = "lecture") -> str:
    """The command that writes ``nonlinear_depth_<preset>.json`` into the results folder."""
    checks.one_of("preset", preset, PRESETS)
    return f"{COMMAND} nonlinear_depth --preset {preset}"


def saved_nonlinear_depth(preset: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """The saved result ``nonlinear_depth_<preset>.json`` of Chapter 8's second layer, as :func:`saved_nonlinear`
    reads Chapter 8's sweep."""
    return _read(nonlinear_depth_file(preset), folder, nonlinear_depth_command(preset), required)


def nonlinear_window_file(preset: str = "lecture") -> str:
    """File name of Chapter 8's runs trained with the window on a log scale: ``nonlinear_window_<preset>.json``."""
    checks.one_of("preset", preset, PRESETS)
    return f"nonlinear_window_{preset}.json"


def nonlinear_window_command(preset: str = "lecture") -> str:
    """The command that writes ``nonlinear_window_<preset>.json`` into the results folder."""
    checks.one_of("preset", preset, PRESETS)
    return f"{COMMAND} nonlinear_window --preset {preset}"


def saved_nonlinear_window(preset: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """The saved result ``nonlinear_window_<preset>.json``, as :func:`saved_nonlinear` reads Chapter 8's sweep."""
    return _read(nonlinear_window_file(preset), folder, nonlinear_window_command(preset), required)


#: The presets of :mod:`~softmax_as_linear.experiments.nonlinear_optima` (kept here: that module imports this one
#: through :mod:`~softmax_as_linear.experiments.nonlinear`; a test checks that the two agree).
OPTIMA_PRESETS = ("lecture", "smoke")


def nonlinear_optima_file(preset: str = "lecture") -> str:
    """File name of Chapter 8's optima of one attention layer: ``nonlinear_optima_<preset>.json``."""
    checks.one_of("preset", preset, OPTIMA_PRESETS)
    return f"nonlinear_optima_{preset}.json"


def nonlinear_optima_command(preset: str = "lecture") -> str:
    """The command that writes ``nonlinear_optima_<preset>.json`` into the results folder."""
    checks.one_of("preset", preset, OPTIMA_PRESETS)
    return f"python -m softmax_as_linear reproduce nonlinear_optima --preset {preset}"


def saved_nonlinear_optima(preset: str = "lecture", folder=None, required: bool = False) -> dict | None:
    """The saved result ``nonlinear_optima_<preset>.json`` of Chapter 8's optima, as :func:`saved_nonlinear`."""
    return _read(nonlinear_optima_file(preset), folder, nonlinear_optima_command(preset), required)


# Any file ----------------------------------------------------------------------------------------------------------

#: The command of each result file named ``<prefix><preset or run>.json``, by prefix (a file takes the longest prefix
#: it starts with): a reproduction's file name, command and reader above, and one entry here.
COMMANDS = {"nonlinear_optima_": nonlinear_optima_command, "nonlinear_window_": nonlinear_window_command,
            "nonlinear_depth_": nonlinear_depth_command, "nonlinear_": nonlinear_command, "depth_": depth_command}


def command_for(filename: str) -> str:
    """The command that writes the result file ``filename``: of :data:`COMMANDS`, a figure's or a Chapter 6 file."""
    stem = pathlib.Path(filename).stem
    command = by_prefix({prefix: (prefix, c) for prefix, c in COMMANDS.items()}, stem)
    if command is not None:
        return command[1](stem.removeprefix(command[0]))
    if stem.startswith("beyond_"):
        _, covariates, run = stem.split("_", 2)
        return beyond_command(covariates, run)
    figure, _, rest = stem.partition("_")
    sampler = next((s for s in SAMPLERS if s != "paper" and rest.endswith("_" + s)), "paper")
    preset = rest.removesuffix("_" + sampler) if sampler != "paper" else rest
    if figure not in (*TRAINING_FIGURES, *CONCENTRATION_FIGURES) or preset not in PRESETS:
        raise ValueError(f"filename must be a result file of the course (<figure>_<preset>[_published].json, "
                         "beyond_<covariates>_<run>.json, depth_<run>.json, nonlinear_<preset>.json, "
                         "nonlinear_depth_<preset>.json, nonlinear_window_<preset>.json or "
                         f"nonlinear_optima_<preset>.json), got {filename!r}")
    return figure_command(figure, preset, sampler)


def load_result(filename: str, folder=None) -> dict:
    """The result file ``filename`` (results folder, then the shipped copy); a ``FileNotFoundError``,
    :class:`~softmax_as_linear.core.artifacts.DamagedFileError` or :class:`PartialResultError` names it and the
    command that writes (or finishes) it."""
    return _read(filename, folder, command_for(filename), required=True)
