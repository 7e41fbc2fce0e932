r"""The deep stepper with a step decay of its learning rate: ``lr`` until ``decay_step``, then ``lr * decay_factor``.

A constant step leaves Adam's iterates moving in a band whose width grows with the step; dividing the step once,
late in training, lets a run settle there, so that its final risk measures the model rather than the optimiser's
noise. The decay is a function of the step count, which :meth:`~softmax_as_linear.engine.deep.DeepStepper.state`
saves, so a resumed run decays at the same step as an uninterrupted one.
"""
from __future__ import annotations

import torch

from ..core import checks
from .deep import DeepConfig, DeepStepper

#: Fractions of training over which the paired fall of the risk is measured (from that record to the end).
FALL_FRACTIONS = (0.5, 0.25, 0.1)


class DecaySchedule:
    """The record steps of a run of ``steps`` Adam steps whose rate is divided once, at ``decay_at`` of training (the
    settings of the sweeps :class:`DecayedDeepStepper` trains inherit it; they hold ``steps``, ``decay_at`` and
    ``record_every``)."""

    @property
    def decay_step(self) -> int:
        return int(round(self.decay_at * self.steps))

    def fall_step(self, fraction: float) -> int:
        """The record from which the fall over the last ``fraction`` of training is measured."""
        return int(round((1 - fraction) * self.steps))

    def record_steps(self) -> list[int]:
        """Step 0, every ``record_every`` steps, the decay step, the fall fractions' steps and the last step."""
        marks = {0, self.steps, self.decay_step, *range(0, self.steps + 1, self.record_every)}
        return sorted(marks | {self.fall_step(f) for f in FALL_FRACTIONS})


class DecayedDeepStepper(DeepStepper):
    """:class:`~softmax_as_linear.engine.deep.DeepStepper` whose learning rate is multiplied by ``decay_factor`` from
    step ``decay_step`` on (runs of shape ``(S, nL, nA)``, the engine's step interface, ``path = "deep"``)."""

    def __init__(self, cfg: DeepConfig, decay_step: int, decay_factor: float = 0.1,
                 device: torch.device | str = "cpu", dtype=torch.float32):
        self.decay_step = checks.int_at_least("decay_step", decay_step, 0)
        self.decay_factor = checks.positive_float("decay_factor", decay_factor)
        super().__init__(cfg, device, dtype)

    def current_lr(self) -> float:
        """The learning rate of the next step."""
        return self.cfg.lr * (self.decay_factor if self.step_count >= self.decay_step else 1.0)

    def step(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.current_lr()
        super().step()
