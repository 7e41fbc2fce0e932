"""The one engine of the course's reproductions: a reproduction declares its stages, its file and what its chapter
reads; training, resuming, the "up to date" short-cut, completeness, restart, the partial file, the shard merge and the
reader are written here, once.

A reproduction is a :class:`Reproduction` (its name on the command line, its title, its presets' seeds, its file).
Most are a :class:`Staged` reproduction, which declares only (as Lightning's ``LightningModule`` declares its steps
and its ``Trainer`` owns the loop):

- :meth:`Staged.stages`: its :class:`Stage`\\ s, in order, each with its settings, its checkpoint's name, how to
  train it (given the readings of the stages before it) and what to read from the trained state;
- :meth:`Staged.assemble`: the result file's content from every stage's readings, and :meth:`Staged.finish`, what
  needs every seed or none (computed after a whole run or a merge);
- :attr:`Staged.per_seed`: which arrays of the file have a seed axis (what a merge concatenates);
- :attr:`Reproduction.fields`: what its chapter reads from a complete file.

Then, for every such reproduction (:meth:`Staged.reproduce`, :meth:`Staged.merged_files`, :meth:`Reproduction.read`):

- **up to date**: a complete file whose provenance records, for every stage, the settings this call would train
  (``provenance["stages"]``), of the same shard, is left as it is and the call says so; a damaged file is written
  again from the checkpoints, said on stdout (:func:`read_result`);
- **restart**: every stage's checkpoint is deleted before the first stage trains;
- **training**: each stage is trained, resumed or reused by
  :func:`train_stage` (progress, checkpoints, deadline, the documented errors);
- **completeness**: the file is complete when every stage is; otherwise it records the stages finished
  (``stages_complete``), the stage that stopped (``stopped_in``) and how far it went (``stopped_at``), nothing
  measured, and :func:`~softmax_as_linear.experiments.file_names.progress` names them when a reader refuses it;
- **merge**: the shards' files are read, every stage's settings checked shard by shard, the per-seed arrays joined
  in seed order, :meth:`Staged.finish` computed as one process computes it, and the provenance is
  :func:`~softmax_as_linear.experiments.shard_files.common_origin`'s (every key the same on every shard, or marked as
  differing);
- **reading**: :meth:`Reproduction.read` finds the file, names the command that writes it when it is missing,
  refuses a partial or damaged one (with ``required``), and checks the fields its chapter reads.

One stage, the paper's figures' sweeps too, is trained, resumed or reused by :func:`train_stage`: progress, atomic
checkpoints (``CHECKPOINT_EVERY`` steps once ``CHECKPOINT_SECONDS`` have passed), the deadline, the checkpoint read
once; one written for other settings is a :class:`~softmax_as_linear.core.artifacts.SettingsMismatchError`, a damaged
one a :class:`~softmax_as_linear.core.artifacts.DamagedFileError` (the command line exits with 1 on either).
"""
from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import time
from typing import Any, Callable

from ..registry import REPRODUCE_COMMAND as COMMAND

# A checkpoint at the first multiple of CHECKPOINT_EVERY steps once CHECKPOINT_SECONDS of training have passed since
# the last one (and on Ctrl-C / SIGTERM, and at the deadline): a minute of work at most is lost, and a fast GPU sweep
# does not spend its time writing checkpoints (the test of the cadence is a clock reading every 100 steps).
CHECKPOINT_EVERY, CHECKPOINT_SECONDS = 100, 60.0

RESTART_ADVICE = "or run the same command again with --restart to train this sweep afresh"


def stop_at(deadline: float | None) -> Callable[[], bool] | None:
    """The ``should_stop`` of a stage trained until ``deadline`` (a ``time.monotonic()`` reading; None: no limit)."""
    return None if deadline is None else (lambda: time.monotonic() > deadline)


def passed(deadline: float | None) -> bool:
    """Whether ``deadline`` has passed (never, without one)."""
    return deadline is not None and time.monotonic() > deadline


def damaged(error, what: str):
    """``error`` with the advice ``what`` and the restart option."""
    return error.advise(f"{what}; {RESTART_ADVICE}")


def read_stage(checkpoint: pathlib.Path, key, what: str) -> dict | None:
    """The state in the checkpoint of stage ``what`` (None without one), on the CPU, ``key`` (with ``as_dict()``,
    ``seeds`` and ``steps``) being what it must have been written for; a
    :class:`~softmax_as_linear.core.artifacts.SettingsMismatchError` when it was written for other settings
    (:func:`~softmax_as_linear.engine.sweep.load_checkpoint` says so by a ``ValueError``), a
    :class:`~softmax_as_linear.core.artifacts.DamagedFileError` when it cannot be read."""
    from ..core.artifacts import DamagedFileError, SettingsMismatchError
    from ..engine.sweep import load_checkpoint

    if not checkpoint.exists():
        return None
    try:
        return load_checkpoint(checkpoint, key, "cpu")
    except DamagedFileError as error:
        raise damaged(error, f"delete it to train {what} from step 0") from None
    except ValueError:  # load_checkpoint's one ValueError: a configuration other than this one
        raise SettingsMismatchError(
            checkpoint, f"checkpoint {checkpoint} was written for other settings of {what} than this command's "
                        f"({settings_text(key)}): run the command that started it again (the same options) to resume "
                        "it, " + RESTART_ADVICE) from None


def settings_text(key) -> str:
    """The settings a checkpoint is compared on, as the mismatch message lists them."""
    seen = key.as_dict()
    parts = [f"seeds {', '.join(map(str, seen['seeds']))}"]
    if "lengths" in seen:
        parts.append(f"lengths {', '.join(map(str, seen['lengths']))}")
    parts.append(f"{seen.get('warm', {}).get('steps', seen.get('steps'))} steps")
    if seen.get("rng") not in (None, "torch"):
        parts.append(f"rng {seen['rng']}")
    return ", ".join(parts)


def train_stage(what: str, checkpoint: pathlib.Path, key, steps: int, train: Callable, device,
                deadline: float | None = None, restart: bool = False):
    """Train stage ``what`` (a phrase: "the Chapter 7 regression sweep (smoke preset, seeds 327, 0)") or resume it
    from ``checkpoint``, until ``deadline``: ``train(checkpoint=..., should_stop=..., checkpoint_every=...,
    checkpoint_seconds=...)`` takes its ``steps`` steps (with a progress bar) and returns what the caller reads.
    ``key``: what the checkpoint must have been written for (:func:`read_stage`). ``restart``: delete the
    checkpoint first. A damaged or foreign checkpoint is the documented error, before a step is taken."""
    from ..core.artifacts import DamagedFileError
    from ..engine.train import loaded_checkpoint

    checkpoint = pathlib.Path(checkpoint)
    if restart:
        checkpoint.unlink(missing_ok=True)
    state = read_stage(checkpoint, key, what)
    step = None if state is None else int(state["step"])
    start = (f"training {what}" if step is None else f"reusing the finished {what} (step {step:,} of {steps:,})"
             if step >= steps else f"resuming {what} from step {step:,} of {steps:,}")
    print(f"{start} on {device}; checkpoint {checkpoint}", flush=True)
    # the state read here is the one the run resumes: the checkpoint is read once
    handed = contextlib.nullcontext() if state is None else loaded_checkpoint(checkpoint, state)
    del state
    try:
        with handed:
            return train(checkpoint=checkpoint, should_stop=stop_at(deadline), checkpoint_every=CHECKPOINT_EVERY,
                         checkpoint_seconds=CHECKPOINT_SECONDS)
    except DamagedFileError as error:
        raise damaged(error, f"delete it to train {what} from step 0") from None


def discard(checkpoints) -> None:
    """``restart``: delete the checkpoints of every stage of a reproduction before its first stage trains, so that a
    restart stopped by the deadline in an early stage leaves no old checkpoint of a later stage, which the next run
    would resume (as finished)."""
    for checkpoint in checkpoints:
        pathlib.Path(checkpoint).unlink(missing_ok=True)


def read_result(path: pathlib.Path, source: str = "its checkpoints") -> dict | None:
    """The one rule for a reproduction's result file that is there but cannot be read (truncated, say): it holds
    nothing that its ``source`` (its stages' checkpoints, or the sweep it was read from) does not, so it is written
    again from them, and the command says so on stdout. Returns the file's data, or None when it is missing or
    damaged. (A damaged checkpoint, sweep or final evaluation, which training made, is an error: see the module.)"""
    from ..core.artifacts import DamagedFileError, load_json

    path = pathlib.Path(path)
    if not path.exists():
        return None
    try:
        return load_json(path)
    except DamagedFileError as error:
        print(f"{error}: writing it again from {source}", flush=True)
        return None


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of a :class:`Staged` reproduction: one training run with a checkpoint of its own.

    ``name``: its key in the file (``"sweep"``, ``"dependence 0"``, ``"warm"``); ``label``: how messages name it
    ("the warm stage"); ``what``: the phrase of its progress line; ``settings``: what it trains (``as_dict()``, or a
    dataclass), recorded in the file's provenance and compared by the short-cut and the merge; ``checkpoint``: its
    file name in ``<out>/checkpoints/``; ``steps``: its number of steps; ``train(done, checkpoint=...,
    should_stop=..., checkpoint_every=..., checkpoint_seconds=...)``: trains or resumes it, given ``done``, the
    readings of the stages before it, and returns the trained state (``(stepper, records)`` or a sweep result);
    ``read(trained, done)``: its readings (JSON-ready); ``key``: what its checkpoint must have been written for
    (default ``settings``)."""

    name: str
    label: str
    what: str
    settings: Any
    checkpoint: str
    steps: int
    train: Callable
    read: Callable
    key: Any = None

    def recorded(self) -> dict:
        """The settings as the file records them."""
        from ..core.artifacts import jsonable

        value = self.settings.as_dict() if hasattr(self.settings, "as_dict") else dataclasses.asdict(self.settings)
        return jsonable(value)


def reached(trained) -> tuple[bool, int, float, str]:
    """``(complete, last step, training seconds, code path)`` of a trained state: ``(stepper, records)`` of
    :func:`~softmax_as_linear.engine.train.run`, or the result of :func:`~softmax_as_linear.engine.train.train`."""
    records = trained[1] if isinstance(trained, tuple) else trained
    last = getattr(records, "last_step", None)
    last = int(records.steps[-1]) if last is None else int(last)
    return bool(records.complete), last, float(records.seconds), str(records.engine_path)


class Reproduction:
    """One reproduction (see the module docstring): what ``reproduce``, ``merge``, their option checks and the command
    line's help ask of it. :class:`Staged` implements the stage-based ones; the paper's figures and Chapter 6 (whose
    sweeps several files share) and Chapter 8's optima (no training) implement :meth:`reproduce` and
    :meth:`merged_files` themselves.

    The keyword ``options`` every method takes are the command's other options: ``sampler``, ``rng``,
    ``covariates``, ``lengths`` (with ``None`` and the defaults meaning "not given"), ``device`` (merge) and
    ``shared`` (reproduce) or ``sweeps`` (merge), one dictionary per call in which the figures keep the sweeps they
    share."""

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
    #: The presets it has.
    presets: tuple[str, ...] = ("paper", "lecture", "smoke")
    #: The fields its chapter reads from a complete file (a file without one of them is refused as damaged).
    fields: tuple[str, ...] = ()

    def seeds(self, preset: str, seeds: int | None = None) -> tuple[int, ...]:
        """The seeds it trains for ``preset`` (and ``seeds`` when it takes them)."""
        raise NotImplementedError

    def shard_count(self, preset: str, seeds: int | None = None) -> int | None:
        """How many seeds its shards split (None: it has none)."""
        return len(self.seeds(preset, seeds))

    def file(self, preset: str, seeds: int | None = None, **options) -> str:
        """The name of its result file: ``<name>_<preset>.json``."""
        self.check_preset(preset)
        return f"{self.name}_{preset}.json"

    def command(self, preset: str, seeds: int | None = None, **options) -> str:
        """The command that writes its file into the results folder."""
        self.check_preset(preset)
        return f"{COMMAND} {self.name} --preset {preset}"

    def command_for(self, filename: str) -> str | None:
        """The command that writes ``filename`` when it is one of this reproduction's files, else None."""
        return next((self.command(p) for p in self.presets if self.file(p) == filename), None)

    def check_preset(self, preset: str) -> str:
        """``preset``, or a ``ValueError`` naming its presets."""
        from ..core import checks

        if preset not in self.presets:
            return checks.one_of("preset", preset, self.presets)
        return preset

    def read(self, preset: str = "lecture", folder=None, required: bool = False, seeds: int | None = None,
             **options) -> dict | None:
        """Its saved file for ``preset`` (``folder``, else the results folder, then the copy shipped with the
        package): ``None`` when it has not been written, or with ``required`` (what a claim reads) a
        ``FileNotFoundError`` naming the command that writes it, a
        :class:`~softmax_as_linear.experiments.file_names.PartialResultError` for a partial file and a
        :class:`~softmax_as_linear.core.artifacts.DamagedFileError` for one that cannot be read or lacks a field of
        :attr:`~softmax_as_linear.experiments.pipeline.Reproduction.fields`."""
        from .file_names import read_file

        return read_file(self.file(preset, seeds, **options), folder, self.command(preset, seeds, **options), required,
                         self.fields)

    def check(self, preset: str, seeds: int | None, shard: tuple[int, int] | None, max_minutes: float | None,
              **options) -> None:
        """Its own checks of the command's options, after the common ones; a ``ValueError`` names a bad one."""
        self.check_preset(preset)
        if self.fixed_seeds and (seeds is not None or options.get("sampler", "paper") != "paper"
                                 or options.get("rng", "auto") != "auto"):
            raise ValueError(f"seeds, sampler and rng do not apply to {self.title} (reproduce {self.name}): its "
                             "preset fixes them")

    def before_training(self, preset: str, out: pathlib.Path, seeds: int | None, shard: tuple[int, int] | None,
                        **options) -> None:
        """Refuse, before anything of the call trains, what the call must not do to a file in ``out``."""

    def reproduce(self, preset: str, device, out: pathlib.Path, deadline: float | None, seeds: int | None,
                  restart: bool, shard: tuple[int, int] | None, dirty: bool, **options) -> list[pathlib.Path]:
        """Train or resume every stage until ``deadline``, write the result files into ``out``; the files written."""
        raise NotImplementedError

    def check_shards(self, preset: str, seeds: int | None, n: int, out: pathlib.Path, command, **options) -> None:
        """A :class:`~softmax_as_linear.experiments.shard_files.ShardError` when a shard has not written what the merge
        joins, checked for every reproduction of a merge before anything is read (a reproduction whose shards write
        one file each checks them as :meth:`merged_files` reads them, before anything is written)."""

    def merged_files(self, preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool,
                     start: float, **options) -> list[tuple[str, Callable[[], dict]]]:
        """Each file the merge writes, as its name and what computes its content; every shard is read and checked
        here, and nothing is written."""
        raise NotImplementedError


class Staged(Reproduction):
    """A reproduction declared by its stages (see the module docstring): it declares :meth:`stages`,
    :meth:`assemble` and, when it needs them, :meth:`finish`, :attr:`per_seed` and :meth:`origin`; this class trains,
    resumes, short-cuts, writes, merges and reads it."""

    fixed_seeds = True
    #: The arrays of a complete file that have a seed axis, as ``"section.name"`` paths (``"per_seed"``: a whole
    #: block), with the axis: what a merge concatenates, in seed order; the rest is taken from the first shard.
    per_seed: dict[str, int] = {"per_seed": 0}

    def stages(self, preset: str, seeds: tuple[int, ...], device) -> list[Stage]:
        """Its stages for ``preset`` and the seeds ``seeds`` (all of them, or a shard's), in the order they train."""
        raise NotImplementedError

    def assemble(self, preset: str, seeds: tuple[int, ...], readings: dict[str, dict]) -> dict:
        """The content of a complete file from every stage's readings (by stage name), without its provenance."""
        raise NotImplementedError

    def finish(self, data: dict, preset: str) -> dict:
        """``data`` completed with what needs every seed or none, after a whole run or a merge (default: nothing)."""
        return data

    def origin(self, preset: str) -> dict:
        """Settings of the file that are not a stage's (prompt counts of the readings, a seed rule), for its
        provenance."""
        return {}

    def run_name(self, preset: str, seeds: int | None) -> str:
        """The run's name (the preset's, unless the seeds are overridden)."""
        return preset

    def shard_seeds(self, preset: str, seeds: int | None, shard) -> tuple[int, ...]:
        """The seeds this call trains: the reproduction's, or shard ``shard``'s part of them."""
        from .presets import shard_seeds

        chosen = self.seeds(preset, seeds)
        return chosen if shard is None else shard_seeds(chosen, *shard)

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, **options):
        from ..core.artifacts import save_json
        from ..core.provenance import device_name, provenance, utc_now
        from .file_names import overrides_of
        start = time.monotonic()
        chosen = self.shard_seeds(preset, seeds, shard)
        stages = self.stages(preset, chosen, device)
        recorded = {stage.name: stage.recorded() for stage in stages}
        part = None if shard is None else f"{shard[0]}/{shard[1]}"
        path = pathlib.Path(out) / self.file(preset, seeds)
        checkpoints = pathlib.Path(out) / "checkpoints"
        if restart:  # every stage's, so that a restart stopped in an early stage leaves none of a later stage
            discard(checkpoints / stage.checkpoint for stage in stages)
        elif up_to_date(path, recorded, self.fields, part):
            print(f"{path}: up to date")
            return [path]
        done, seconds, paths, stopped = {}, 0.0, [], None
        for stage in stages:
            trained = train_stage(stage.what, checkpoints / stage.checkpoint,
                                  stage.settings if stage.key is None else stage.key, stage.steps,
                                  lambda stage=stage, **kw: stage.train(done, **kw), device, deadline, restart)
            complete, last, spent, engine_path = reached(trained)
            seconds += spent
            paths.append(engine_path)
            if not complete:
                stopped = stage, last
                break
            done[stage.name] = stage.read(trained, done)
        if stopped is None:
            print(f"{self.title}: every stage complete, {seconds:.0f} s of training", flush=True)
            data = {**self.assemble(preset, chosen, done), "complete": True}
            if shard is None:
                data = self.finish(data, preset)
        else:
            stage, last = stopped
            data = {"experiment": self.name, "complete": False, "stages_complete": [s.label for s in stages
                                                                                      if s.name in done],
                    "stopped_in": stage.label, "stopped_at": [last, stage.steps]}
            print(f"{self.title}: stopped at the time limit in {stage.label} at step {last:,} of {stage.steps:,} "
                  f"(partial); the same command{' without --restart' if restart else ''} resumes it", flush=True)
        data["provenance"] = {**provenance(device, time.monotonic() - start), "device_name": device_name(device),
                              "preset": preset, "run": self.run_name(preset, seeds), "seeds": list(chosen),
                              "settings": recorded[stages[0].name], "stages": recorded, **self.origin(preset),
                              "engine_path": ", ".join(dict.fromkeys(paths)),
                              "training_seconds": round(seconds, 1), "command": self.command(preset, seeds),
                              "overrides": overrides_of(seeds, shard=shard), "allow_dirty": bool(dirty),
                              "date": utc_now(), **({} if part is None else {"shard": part})}
        save_json(path, data)
        print(f"wrote {path}", flush=True)
        return [path]

    def merged_files(self, preset, seeds, n, out, command, dirty, start, **options):
        data = merge_shards(self, preset, seeds, n, pathlib.Path(out), command, dirty, start)
        return [(self.file(preset, seeds), lambda: data)]


def up_to_date(path: pathlib.Path, recorded: dict, fields: tuple[str, ...] = (), shard: str | None = None) -> bool:
    """The one "up to date" rule: ``path`` holds a complete file, with every field of ``fields``, written with the
    settings ``recorded`` of every stage (:func:`same_stages`), by the same shard. A damaged file is not up to date: it
    is written again, which the call says on stdout (:func:`read_result`)."""
    saved = read_result(path)
    return (saved is not None and bool(saved.get("complete", True)) and same_stages(saved, recorded, shard)
            and all(field in saved for field in fields))


def same_stages(data: dict, recorded: dict, shard: str | None = None) -> bool:
    """Whether the file ``data`` was written with the settings ``recorded`` of every stage, by the same shard."""
    origin = data.get("provenance") or {}
    return origin.get("stages") == recorded and origin.get("shard") == shard


def merge_shards(reproduction: Staged, preset: str, seeds: int | None, n: int, out: pathlib.Path, command,
                 dirty: bool, start: float) -> dict:
    """The file one process writes, joined from the ``n`` shards' files: each shard's read (a
    :class:`~softmax_as_linear.experiments.shard_files.ShardError` names a missing, unfinished or damaged one and the
    command that completes it), every stage's settings checked against the shard's seeds' (the stage that differs
    named), the arrays of :attr:`Staged.per_seed` joined in seed order, :meth:`Staged.finish` computed with the
    shards' number of torch threads, and the provenance of
    :func:`~softmax_as_linear.experiments.shard_files.common_origin` with every shard's own kept."""
    import torch

    from ..core.provenance import provenance, utc_now
    from .file_names import overrides_of, shard_folder
    from .presets import shard_seeds
    from .shard_files import MERGE_OWN, ShardError, common_origin, shard_json

    everyone = reproduction.seeds(preset, seeds)
    whole = {stage.name: stage.recorded() for stage in reproduction.stages(preset, everyone, "cpu")}
    parts, origins = [], []
    for k in range(1, n + 1):
        path = shard_folder(out, k, n) / reproduction.file(preset, seeds)
        data = shard_json(path, k, n, command)
        found = (data.get("provenance") or {}).get("stages") or {}
        expected = {stage.name: stage.recorded()
                    for stage in reproduction.stages(preset, shard_seeds(everyone, k, n), "cpu")}
        for name, settings in expected.items():
            if found.get(name) != settings or list(found) != list(expected):
                differ = [key for key in settings if (found.get(name) or {}).get(key) != settings[key]]
                which = (f"other {', '.join(differ)} in its stage {name!r}" if name in found and differ else
                         f"the stages {', '.join(map(repr, found))}, and this merge {', '.join(map(repr, expected))}")
                raise ShardError("the settings of this merge differ from those the shards were trained with: shard "
                                 f"{k}/{n} ({path}) has {which}. Run merge with the shards' --preset (and --seeds), "
                                 "or train the shards again with this library and --restart")
        parts.append(data)
        origin = {key: value for key, value in data["provenance"].items() if key not in ("stages", "settings")}
        origins.append({**origin, "shard": f"{k}/{n}"})
    merged = {key: value for key, value in parts[0].items() if key != "provenance"}
    for where, axis in reproduction.per_seed.items():
        _put(merged, where, join_seeds([_get(p, where) for p in parts], axis))
    threads = torch.get_num_threads()
    try:  # the shards' number of threads: a CPU's sums, and so the last digits of what finish computes, depend on it
        torch.set_num_threads(int(origins[0].get("torch_threads") or threads))
        merged = reproduction.finish(merged, preset)
    finally:
        torch.set_num_threads(threads)
    wall = time.monotonic() - start
    merged["provenance"] = {**common_origin(origins, MERGE_OWN), "seeds": list(everyone),
                            "settings": next(iter(whole.values())), "stages": whole,
                            "overrides": overrides_of(seeds),
                            "wall_seconds": round(sum(o.get("wall_seconds", 0.0) for o in origins) + wall, 1),
                            "training_seconds": round(sum(o.get("training_seconds", 0.0) for o in origins), 1),
                            "allow_dirty": bool(dirty) or any(o.get("allow_dirty") for o in origins),
                            "date": utc_now(), "shards": origins, "merged": provenance("cpu", wall)}
    return merged


def _get(data: dict, where: str):
    for key in where.split("."):
        data = data[key]
    return data


def _put(data: dict, where: str, value) -> None:
    *path, last = where.split(".")
    for key in path:
        data[key] = dict(data[key])
        data = data[key]
    data[last] = value


def join_seeds(values: list, axis: int = 0):
    """Shards' values joined along the seed axis ``axis`` (0: rows; 1: the rows' entries), recursively in blocks."""
    if isinstance(values[0], dict):
        return {key: join_seeds([v[key] for v in values], axis) for key in values[0]}
    if not isinstance(values[0], list):
        return values[0]  # a count shared by the shards (prompts per seed)
    if axis == 0:
        return [row for v in values for row in v]
    return [join_seeds([v[i] for v in values], axis - 1) for i in range(len(values[0]))]


__all__ = ["CHECKPOINT_EVERY", "CHECKPOINT_SECONDS", "COMMAND", "RESTART_ADVICE", "Reproduction", "Stage", "Staged",
           "damaged", "discard", "join_seeds", "merge_shards", "passed", "reached", "read_result", "read_stage",
           "same_stages", "settings_text", "stop_at", "train_stage", "up_to_date"]
