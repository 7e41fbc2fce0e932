"""Coding exercises: a student writes a chapter's central computation, and :func:`check` says whether it is right.

Each chapter's exercises are declared in their own module (:mod:`~softmax_as_linear.exercises.chapter1` to
:mod:`~softmax_as_linear.exercises.chapter8`); :mod:`~softmax_as_linear.exercises.feedback` runs a student's function
against the library's reference and diagnoses the usual mistakes. In a chapter::

    from softmax_as_linear import exercises

    def softmax_attention(tokens, query, U, V):
        raise NotImplementedError      # the student's code replaces this line

    exercises.check(softmax_attention)   # "… softmax_attention: not attempted yet", then a diagnosis, then "passed"

The exercise is found by the function's name; ``exercises.check(fn, name="...")`` names it when the function is
called otherwise. :func:`check` prints and never raises, so *Run All* goes through untouched skeletons.
"""
from __future__ import annotations

import importlib
from typing import Callable

from .feedback import Exercise, Feedback, diagnose

CHAPTERS = tuple(range(1, 9))


def exercises() -> dict[str, Exercise]:
    """Every coding exercise of the course, by the name of the function a student writes."""
    found: dict[str, Exercise] = {}
    for chapter in CHAPTERS:
        for exercise in importlib.import_module(f".chapter{chapter}", __name__).EXERCISES:
            if exercise.function in found:
                raise RuntimeError(f"two exercises ask for a function named {exercise.function!r}")
            found[exercise.function] = exercise
    return found


def result(function: Callable, name: str | None = None) -> Feedback:
    """The checker's answer for ``function`` (the exercise named ``name``, by default the function's own name)."""
    name = name or getattr(function, "__name__", None)
    known = exercises()
    if name not in known:
        raise ValueError(f"name: no coding exercise asks for a function named {name!r}; the exercises' functions are"
                         f" {', '.join(sorted(known))}")
    return diagnose(known[name], function)


def check(function: Callable, name: str | None = None) -> None:
    """Print the checker's answer for a student's ``function``: not attempted yet, passed, or what is wrong."""
    try:
        print(result(function, name))
    except ValueError as error:
        print(f"✗ {error}")


__all__ = ["Exercise", "Feedback", "check", "diagnose", "exercises", "result"]
