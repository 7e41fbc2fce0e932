"""The checker of the coding exercises: a student's function run against the library's reference, with a diagnosis.

An :class:`Exercise` names the function a student writes, the library's reference, the cases it is tried on (random
inputs and edge cases: one token, huge scores, a zero matrix) and the plausible :class:`Mistake` s, each a wrong
implementation with what to tell a student who made it. :func:`diagnose` runs the student's function on every case
and answers, in this order:

1. *not attempted yet*: the function raises ``NotImplementedError`` (the skeleton's body);
2. an exception it raised, with the case that raised it;
3. an output that is not an array of numbers, or of the wrong shape (the expected shape is said; it is no answer);
4. *passed* when it agrees with the reference on every case, within ``rtol``/``atol``;
5. the first :class:`Mistake` whose wrong implementation it agrees with on every case (NaN where it has NaN);
6. NaN or infinity where the answer is finite (the exercise says why, for instance an exponential that overflows);
7. a constant factor (a sign, a factor of two), or a transposed matrix;
8. else: on which case it differs, and by how much relative to the answer's size.

It never prints the reference's output. The wording follows otter-grader's ``grader.check("q1")``: "results: all
test cases passed", or what failed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

NOT_ATTEMPTED, PASSED, FAILED = "not attempted", "passed", "failed"


@dataclass(frozen=True)
class Case:
    """One input the student's function is tried on: a name a student can act on, and the arguments."""

    name: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Mistake:
    """A plausible wrong implementation (same signature as the reference) and what a student who made it is told."""

    diagnosis: str
    wrong: Callable


@dataclass(frozen=True)
class Exercise:
    """A coding exercise: the function's name, its reference, its cases and its known mistakes.

    ``cases`` builds the inputs (seeded, so every run tries the same); ``nonfinite`` is what to say when the output
    is NaN or infinite where the answer is finite.
    """

    function: str
    chapter: int
    reference: Callable
    cases: Callable[[], Sequence[Case]]
    mistakes: tuple[Mistake, ...] = ()
    nonfinite: str = ("a step overflows or divides by zero: rewrite it in a form that stays finite"
                      " (for an exponential of scores, subtract the largest score first)")
    rtol: float = 1e-5
    atol: float = 1e-8


@dataclass(frozen=True)
class Feedback:
    """The checker's answer: ``status`` is ``"not attempted"``, ``"passed"`` or ``"failed"``; ``message`` says it."""

    function: str
    status: str
    message: str

    def __str__(self) -> str:
        mark = {PASSED: "✓", FAILED: "✗", NOT_ATTEMPTED: "…"}[self.status]
        return f"{mark} {self.function}: {self.message}"


def _as_tensor(value) -> Tensor | None:
    """The output as a float64 tensor, or None when it is not an array of numbers."""
    if isinstance(value, Tensor):
        return value.detach().to("cpu", torch.float64)
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return torch.from_numpy(array.copy())


def _copy(value):
    # the student's function gets its own copies: an in-place edit must not change the reference's inputs
    if isinstance(value, Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    return value


def _run(function: Callable, case: Case):
    return function(*_copy(case.args), **_copy(case.kwargs))


def _close(output: Tensor, answer: Tensor, exercise: Exercise) -> bool:
    if output.shape != answer.shape:
        return False
    finite = torch.isfinite(answer)
    if not torch.equal(torch.isfinite(output), finite):
        return False
    return bool(torch.allclose(output[finite], answer[finite], rtol=exercise.rtol, atol=exercise.atol))


def _shape(t: Tensor) -> str:
    return "a scalar" if t.ndim == 0 else f"shape {tuple(t.shape)}"


def _factor(outputs: list[Tensor], answers: list[Tensor], exercise: Exercise) -> float | None:
    """The one constant c with output = c * answer on every case, if there is one."""
    factors = []
    for output, answer in zip(outputs, answers):
        norm = float((answer * answer).sum())
        if norm < 1e-24:
            if not _close(output, answer, exercise):
                return None
            continue
        factors.append(float((output * answer).sum()) / norm)
    if not factors:
        return None
    c = factors[0]
    if not all(abs(f - c) <= 1e-6 * max(1.0, abs(c)) for f in factors):
        return None
    if all(_close(o, c * a, exercise) for o, a in zip(outputs, answers)):
        return c
    return None


def _describe_factor(c: float) -> str:
    if abs(c + 1) < 1e-6:
        return "its sign is flipped: it returns minus the answer"
    if abs(c) < 1e-12:
        return "it returns zeros"
    for ratio, words in ((2.0, "twice the answer"), (0.5, "half the answer"), (-2.0, "minus twice the answer"),
                         (-0.5, "minus half the answer")):
        if abs(c - ratio) < 1e-6:
            return f"it returns {words}: a factor of two is off somewhere"
    return "it is off by a constant factor on every case: a normalisation or a scale is wrong"


def _transposed(outputs: list[Tensor], answers: list[Tensor], exercise: Exercise) -> bool:
    square = [(o, a) for o, a in zip(outputs, answers) if a.ndim >= 2 and a.shape[-1] == a.shape[-2] > 1]
    return bool(square) and all(_close(o, a, exercise) for o, a in zip(outputs, answers) if a.ndim < 2 or
                                a.shape[-1] != a.shape[-2]) and all(
        _close(o.transpose(-1, -2), a, exercise) for o, a in square)


def diagnose(exercise: Exercise, function: Callable) -> Feedback:
    """Run ``function`` on every case of ``exercise`` and say whether, and how, it is wrong (never the answer)."""
    name = exercise.function
    if not callable(function):
        return Feedback(name, FAILED, f"expected a function, got {type(function).__name__}: pass the function"
                        f" itself, check({name}), not the result of calling it")
    cases = list(exercise.cases())
    answers = [_as_tensor(_run(exercise.reference, case)) for case in cases]
    outputs = []
    for case, answer in zip(cases, answers):
        try:
            value = _run(function, case)
        except NotImplementedError:
            return Feedback(name, NOT_ATTEMPTED, "not attempted yet: replace the line `raise NotImplementedError`"
                            " with your code, run that cell, then this one again.")
        except Exception as error:  # a student's bug, whatever it is, is reported, not raised
            return Feedback(name, FAILED, f"on the case '{case.name}' it raises {type(error).__name__}: {error}")
        output = _as_tensor(value)
        if output is None:
            return Feedback(name, FAILED, f"on the case '{case.name}' it returns {type(value).__name__}, not an"
                            f" array of numbers: return a tensor (or array) of {_shape(answer)}")
        if output.shape != answer.shape:
            hint = (" (the transpose of the expected one)" if output.ndim == answer.ndim >= 2 and
                    tuple(output.shape) == tuple(answer.shape)[:-2] + tuple(answer.shape)[-2:][::-1] else "")
            return Feedback(name, FAILED, f"on the case '{case.name}' it returns {_shape(output)}{hint}, expected"
                            f" {_shape(answer)}.")
        outputs.append(output)
    if all(_close(o, a, exercise) for o, a in zip(outputs, answers)):
        listed = ", ".join(f"'{case.name}'" for case in cases)
        return Feedback(name, PASSED, f"all {len(cases)} test cases passed ({listed}).")
    for mistake in exercise.mistakes:
        try:
            wrong = [_as_tensor(_run(mistake.wrong, case)) for case in cases]
        except Exception:  # a mistake that cannot run on some case is not the one made
            continue
        if all(w is not None and _close(o, w, exercise) for o, w in zip(outputs, wrong)):
            return Feedback(name, FAILED, mistake.diagnosis)
    for case, output, answer in zip(cases, outputs, answers):
        if not torch.isfinite(output).all() and torch.isfinite(answer).all():
            return Feedback(name, FAILED, f"on the case '{case.name}' it returns NaN or infinity where the answer is"
                            f" finite: {exercise.nonfinite}.")
    c = _factor(outputs, answers, exercise)
    if c is not None:
        return Feedback(name, FAILED, _describe_factor(c) + ".")
    if _transposed(outputs, answers, exercise):
        return Feedback(name, FAILED, "it returns the transpose of the answer: a matrix is transposed.")
    for case, output, answer in zip(cases, outputs, answers):
        if not _close(output, answer, exercise):
            scale = float(answer.abs().max()) if answer.numel() else 0.0
            error = float((output - answer).abs().nan_to_num(math.inf).max())
            relative = error / scale if scale > 0 else math.inf
            size = f"{relative:.0%} of the answer's largest entry" if math.isfinite(relative) else "an entry"
            return Feedback(name, FAILED, f"on the case '{case.name}' it is off by up to {size}, in a way none of"
                            " the usual mistakes explains: go through the formula above step by step.")
    raise AssertionError("unreachable: every output was close, yet not all of them")  # pragma: no cover
