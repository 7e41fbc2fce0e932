"""Train or resume one stage of a reproduction under a deadline: the one loop behind every chapter's sweeps.

A *stage* is one training run of a reproduction (a figure's sweep, Chapter 7's sweep, its warm stage or its control,
Chapter 8's sweep or one setting of its window's dependence) with a checkpoint of its own. :func:`train_stage` trains
it, or resumes it from its checkpoint, with a progress bar and atomic checkpoints at one cadence
(``CHECKPOINT_EVERY`` steps once ``CHECKPOINT_SECONDS`` have passed since the last save), stops it at a
deadline, and says on stdout whether it starts at step 0 or resumes from step ``N`` (the checkpoint read once: the
state that says the step is the one the run resumes, :func:`~softmax_as_linear.engine.train.loaded_checkpoint`).
A checkpoint it cannot use is one of two documented errors, the same for every chapter (the command line exits with
1 on either):

- written for other settings: a :class:`~softmax_as_linear.core.artifacts.SettingsMismatchError` that says to run
  the command that started it again, or to pass ``--restart``;
- damaged (truncated, say): a :class:`~softmax_as_linear.core.artifacts.DamagedFileError` that names it and says to
  delete it to train the stage from step 0 (or to pass ``--restart``).
"""
from __future__ import annotations

import contextlib
import pathlib
import time
from typing import Callable

from ..core.artifacts import DamagedFileError, SettingsMismatchError, load_json
from ..engine.sweep import load_checkpoint
from ..engine.train import loaded_checkpoint

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


def damaged(error: DamagedFileError, what: str) -> DamagedFileError:
    """``error`` with the advice ``what`` and the restart option."""
    return error.advise(f"{what}; {RESTART_ADVICE}")


def read_stage(checkpoint: pathlib.Path, key, what: str) -> dict | None:
    """The state in the checkpoint of stage ``what`` (None without one), on the CPU, ``key`` (with ``as_dict()``,
    ``seeds`` and ``steps``) being what it must have been written for; a
    :class:`~softmax_as_linear.core.artifacts.SettingsMismatchError` when it was written for other settings
    (:func:`~softmax_as_linear.engine.sweep.load_checkpoint` says so by a ``ValueError``), a
    :class:`~softmax_as_linear.core.artifacts.DamagedFileError` when it cannot be read."""
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
    path = pathlib.Path(path)
    if not path.exists():
        return None
    try:
        return load_json(path)
    except DamagedFileError as error:
        print(f"{error}: writing it again from {source}", flush=True)
        return None


__all__ = ["CHECKPOINT_EVERY", "CHECKPOINT_SECONDS", "RESTART_ADVICE", "damaged", "discard", "passed",
           "read_result", "read_stage", "settings_text", "stop_at", "train_stage"]
