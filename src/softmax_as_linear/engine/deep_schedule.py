r"""The deep stepper with a step decay of its learning rate: ``lr`` until ``decay_step``, then ``lr * decay_factor``.

A constant step leaves Adam's iterates moving in a band whose width grows with the step; dividing the step once,
late in training, lets a run settle there, so that its final risk measures the model rather than the optimiser's
noise. The decay is a function of the step count, which :meth:`~softmax_as_linear.engine.stepper.SeedStepper.state`
saves, so a resumed run decays at the same step as an uninterrupted one.
"""
from __future__ import annotations

import dataclasses

import torch

from ..core import checks
from .deep import DeepConfig, DeepStepper

#: Fractions of training over which the paired fall of the risk is measured (from that record to the end).
FALL_FRACTIONS = (0.5, 0.25, 0.1)
#: The four models of a deep sweep, as ``(activation, K)`` columns: one- and two-layer softmax and linear attention.
DEPTH_MODELS = (("softmax", 1), ("linear", 1), ("softmax", 2), ("linear", 2))
#: Fraction of the steps taken at the full learning rate before it is divided by ten (the default schedule).
DECAY_AT, DECAY_FACTOR = 0.75, 0.1


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


class DeepSweepSettings(DecaySchedule):
    """What the settings of every sweep of :data:`DEPTH_MODELS` that :class:`DecayedDeepStepper` trains share
    (Chapter 7's regression, Chapter 8's second layer): a frozen dataclass subclassing it holds ``lengths``, ``seeds``,
    ``steps``, ``batch_size``, ``lr``, ``record_every``, ``held_out_prompts``, ``final_prompts``, ``alpha``,
    ``optimizer``, ``decay_at``, ``decay_factor`` and its task's fields, and says what its task is (``task()``), what
    it checks of its own fields (``check_own``) and what its checkpoints record beside its fields (``RECORDED``).
    Shared: the checks, the :class:`~softmax_as_linear.engine.deep.DeepConfig` trained, a copy with changes and the
    dictionary a checkpoint compares."""

    #: Fields a checkpoint of the sweep records beside the dataclass's own (the random stream, the inputs' law, ...).
    RECORDED: dict = {}

    def __post_init__(self):
        checks.positive_int("steps", self.steps)
        checks.positive_int("record_every", self.record_every)
        checks.int_at_least("final_prompts", self.final_prompts, 2)
        self.check_own()
        if not 0 < self.decay_at <= 1:
            raise ValueError(f"decay_at must be in (0, 1], got {self.decay_at}")
        self.deep_config()  # checks the rest

    def check_own(self) -> None:
        """A ``ValueError`` naming a bad field of the subclass's own (none by default)."""

    def task(self):
        """The task the sweep's prompts are drawn from."""
        raise NotImplementedError

    def deep_config(self) -> DeepConfig:
        """The configuration :class:`DecayedDeepStepper` trains: the four models of :data:`DEPTH_MODELS`."""
        return DeepConfig(task=self.task(), seeds=tuple(self.seeds), lengths=tuple(self.lengths), models=DEPTH_MODELS,
                          batch_size=self.batch_size, lr=self.lr, optimizer=self.optimizer, alpha=self.alpha,
                          held_out_prompts=self.held_out_prompts)

    def replace(self, **changes):
        """A copy with the fields ``changes`` changed (checked again)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        """Every setting, JSON-ready, with the fields a training checkpoint compares (:attr:`RECORDED`, the models)."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
        return {**out, **self.RECORDED, "models": [list(m) for m in DEPTH_MODELS]}


class DecayedDeepStepper(DeepStepper):
    """:class:`~softmax_as_linear.engine.deep.DeepStepper` whose learning rate is multiplied by ``decay_factor`` from
    step ``decay_step`` on (runs of shape ``(S, nL, nA)``, the engine's step interface, ``path = "deep"``): the decay
    is :meth:`~softmax_as_linear.engine.stepper.SeedStepper.current_lr`'s, which every step applies."""

    def __init__(self, cfg: DeepConfig, decay_step: int, decay_factor: float = 0.1,
                 device: torch.device | str = "cpu", dtype=torch.float32):
        self.decay_step = checks.int_at_least("decay_step", decay_step, 0)
        self.decay_factor = checks.positive_float("decay_factor", decay_factor)
        super().__init__(cfg, device, dtype)
