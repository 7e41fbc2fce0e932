r"""Chapter 6's sweeps read run by run: when each (seed, ``L``, model) stopped moving, and whether it still moves
at the end of training.

A sweep of :func:`~softmax_as_linear.experiments.beyond_gaussian.beyond_experiment` (run in the chapter or read from
its saved file) records, for every seed, length ``L`` and model of :data:`MODELS` (softmax and linear attention at
``L``, and the two infinite-prompt models, the same run at every ``L``), the held-out risk :math:`R_t` at every
record. Where the sweep does not store the records' standard errors (``"eval_se"``), they are inferred from the
relative spread of the per-prompt losses that the sweep's final evaluation measured for the same run,

.. math:: s_t = R_t \,\frac{\mathrm{se}_{\mathrm{final}}}{R_{\mathrm{final}}}\,\sqrt{n_{\mathrm{final}} / n_{\mathrm{eval}}},

which assumes that the relative spread at a record is that of the final parameters (close for the records of a run
that has settled, a guess for early ones), as
:func:`~softmax_as_linear.experiments.uncertainty.held_out_se` does for the paper's figures. These standard errors are reported, not tested: whether a run still moves is
read from its own scatter over the last half of training (41 records of the 81 a paper-scale sweep keeps, cut into
8 batches of 5; the last quarter's 21 records are too few),
:func:`~softmax_as_linear.experiments.trajectory.read_risks` with ``fraction=0.5``.
"""
from __future__ import annotations

import math

import numpy as np

from ..core import checks
from .trajectory import TrajectoryReading, read_risks

#: The models of a Chapter 6 sweep, in the order of the reading's last axis.
MODELS = ("softmax", "linear", "softmax_limit", "linear_limit")


def record_risks(run: dict) -> tuple[np.ndarray, np.ndarray, str]:
    """Held-out risks ``(S, nL, 4, T)`` of a sweep's records (models in the order of :data:`MODELS`), their standard
    errors, and how those were had."""
    for key in ("eval_risk", "final", "steps", "provenance"):
        if key not in run:
            raise ValueError(f"run: not a Chapter 6 sweep (no {key!r})")
    risk = np.stack([np.asarray(run["eval_risk"][m], dtype=float) for m in MODELS], 2)
    if "eval_se" in run:
        se = np.stack([np.asarray(run["eval_se"][m], dtype=float) for m in MODELS], 2)
        return risk, se, "measured on the held-out prompts"
    final = run["final"]
    n_eval = checks.positive_int("eval_prompts", run["provenance"]["settings"]["eval_prompts"])
    n_final = checks.positive_int("final_prompts", final["final_prompts"])
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.stack([np.asarray(final["risk_se"][m], dtype=float) / np.asarray(final["risk"][m], dtype=float)
                        for m in MODELS], 2)
    se = risk * (rel * math.sqrt(n_final / n_eval))[..., None]
    return risk, se, "inferred: the relative spread of the per-prompt losses measured by the final evaluation"


#: The window of the trend test on a Chapter 6 sweep: its last half (its records are fewer than the paper's figures').
FRACTION = 0.5


def read_sweep(run: dict, level: float = 0.01, fraction: float = FRACTION) -> TrajectoryReading:
    """Every (seed, ``L``, model) run of a Chapter 6 sweep read as a whole
    (:func:`~softmax_as_linear.experiments.trajectory.read_risks`): arrays ``(S, nL, 4)``, models in the order of
    :data:`MODELS` (``activations`` of the reading)."""
    risk, se, how = record_risks(run)
    return read_risks(run["steps"], risk, se, level, fraction, method=how, seeds=list(run["final"]["seeds"]),
                      lengths=list(run["final"]["lengths"]), activations=list(MODELS))


__all__ = ["FRACTION", "MODELS", "read_sweep", "record_risks"]
