"""What training records at its record steps: batch and held-out risks, the held-out spread, and the parameters.

Arrays have axes seed ``S``, length ``nL``, model ``nA`` and record ``T``; a run that has diverged records NaN.
"""
from __future__ import annotations

import numpy as np
from torch import Tensor

from .stepper import Stepper


class Records:
    """The trajectories of a sweep at ``steps`` (its record steps), filled by :meth:`write` as training goes; once
    the loop ends (:func:`~softmax_as_linear.engine.train.run`), ``last_step``, ``seconds`` (training time),
    ``complete`` and ``engine_path`` (the path that took the steps) say how it ended."""

    def __init__(self, steps: list[int], stepper: Stepper):
        shape = tuple(stepper.alive.shape)
        self.steps = list(steps)
        self.last_step, self.seconds, self.complete, self.engine_path = 0, 0.0, False, stepper.path
        self.train_risk = np.full((*shape, len(steps)), np.nan)
        self.eval_risk = np.full_like(self.train_risk, np.nan)
        self.eval_sd = np.full_like(self.train_risk, np.nan)
        self.history = {n: np.full((*shape, len(steps), *p.shape[3:]), np.nan) for n, p in stepper.weights().items()}

    def __contains__(self, step: int) -> bool:
        return step in self.steps

    def write(self, step: int, stepper: Stepper) -> None:
        """Record the stepper's batch risk, held-out risk and spread, and parameters, as record ``step``."""
        k = self.steps.index(step)
        dead = ~stepper.alive
        self.train_risk[..., k] = _masked(stepper.batch_risk(), dead)
        mean, sd = stepper.held_out()
        self.eval_risk[..., k] = _masked(mean, dead)
        self.eval_sd[..., k] = _masked(sd, dead)
        dead = dead.cpu().numpy()
        for n, p in stepper.weights().items():
            value = p.double().cpu().numpy().copy()
            value[dead] = np.nan
            self.history[n][:, :, :, k] = value  # the record axis, whatever the parameter's shape

    def state(self) -> dict:
        """The arrays, for a checkpoint (the keys every checkpoint since 0.2 holds)."""
        return {"train_risk": self.train_risk, "eval_risk": self.eval_risk, "eval_sd": self.eval_sd,
                "history": self.history}

    def load_state(self, state: dict) -> None:
        """Restore the arrays from :meth:`state` (a checkpoint before 0.2 has no ``eval_sd``: NaN)."""
        self.train_risk, self.eval_risk, self.history = state["train_risk"], state["eval_risk"], state["history"]
        self.eval_sd = state.get("eval_sd", np.full_like(self.eval_risk, np.nan))  # checkpoints before 0.2 lack it

    def up_to(self, step: int) -> dict:
        """The records taken at steps ``<= step``: ``steps``, ``train_risk``, ``eval_risk``, ``eval_sd``, ``params``."""
        kept = [k for k, s in enumerate(self.steps) if s <= step]
        return {"steps": np.array(self.steps)[kept], "train_risk": self.train_risk[..., kept],
                "eval_risk": self.eval_risk[..., kept], "eval_sd": self.eval_sd[..., kept],
                "params": {n: h[:, :, :, kept] for n, h in self.history.items()}}


def _masked(values: Tensor, dead: Tensor) -> np.ndarray:
    return values.masked_fill(dead, float("nan")).double().cpu().numpy()
