"""Every reproduction of the course, one module each, and the registry that ``reproduce``, ``merge``, their option
checks, the command line's choices and help, and the readers of result files iterate over: adding a reproduction is
writing its module (a :class:`~softmax_as_linear.experiments.pipeline.Staged` declaration) and adding it here; nothing
else branches on its name. Importing this package imports no torch (each declaration imports what it runs inside its
methods)."""
from __future__ import annotations

from ..pipeline import Reproduction
from . import beyond, depth, figures, nonlinear, nonlinear_depth, nonlinear_optima, nonlinear_window

#: Every reproduction, by name, in the order ``reproduce`` runs them (the paper's figures first).
REPRODUCTIONS: dict[str, Reproduction] = {r.name: r for r in (
    *figures.REPRODUCTIONS,
    beyond.REPRODUCTION,
    depth.REPRODUCTION,
    nonlinear.REPRODUCTION,
    nonlinear_depth.REPRODUCTION,
    nonlinear_window.REPRODUCTION,
    nonlinear_optima.REPRODUCTION,
)}

__all__ = ["REPRODUCTIONS"]
