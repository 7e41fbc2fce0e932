r"""Chapter 8's second layer: one- and two-layer softmax and linear attention trained on the nonlinear task, paired
(what ``python -m softmax_as_linear reproduce nonlinear_depth`` runs).

The task is Chapter 8's (:data:`~softmax_as_linear.experiments.presets.NONLINEAR_TASK`: random-cosine-feature labels
of inputs on the circle, :class:`~softmax_as_linear.theory.cosine_task.CosineTask`); the networks and the trainer are
Chapter 7's: residual attention of :mod:`~softmax_as_linear.theory.depth` trained by
:class:`~softmax_as_linear.engine.deep_schedule.DecayedDeepStepper` through the engine's loop, four columns
``(softmax, 1), (linear, 1), (softmax, 2), (linear, 2)`` that start from the same block initialisation (Assumption
5.1 with scale ``alpha``) and draw the same batches per seed, so the second layer's effect is a paired difference.
The result file ``nonlinear_depth_<preset>.json`` holds, per seed (``"per_seed"``, seed axis first):

- the final risks of the four models on the same fresh prompts (stream ``"evaluation"`` of the seed), with standard
  errors over prompts, and the paired differences of
  :data:`~softmax_as_linear.experiments.depth_regression.DIFFERENCES` (``second_layer_softmax``: two-layer minus
  one-layer softmax, and so on);
- the paired fall of each risk over the last half, quarter and tenth of training (positive: still descending);
- the held-out risk at every record, the final weights, and each layer's window :math:`w_\ell =
  \operatorname{tr}(U_{\ell,xx})/d`;
- ``provenance``: device, torch, commit, wall and training time, the preset and every setting, the training path.

Risks are :math:`R = \tfrac12\mathrm{MSE}`.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..core import checks
from ..core.artifacts import jsonable
from ..engine.deep_schedule import DECAY_AT, DECAY_FACTOR, DecayedDeepStepper, DeepSweepSettings
from ..engine.train import run
from ..registry import PRESETS
from ..theory.cosine_task import CosineTask
from . import presets
from .depth_regression import FALL_FRACTIONS, MODEL_NAMES, deep_final_evaluation, final_weights
from .presets import NONLINEAR_TASK


@dataclasses.dataclass(frozen=True)
class NonlinearDepthSettings(DeepSweepSettings):
    """Every setting of the sweep: lengths, seeds, optimisation (Adam with one step decay, as Chapter 7's), the
    block initialisation's scale ``alpha`` and the task (Chapter 8's); checks, training configuration and checkpoint
    fields shared with Chapter 7's (:class:`~softmax_as_linear.engine.deep_schedule.DeepSweepSettings`)."""

    lengths: tuple[int, ...]
    seeds: tuple[int, ...]
    steps: int
    batch_size: int
    record_every: int
    held_out_prompts: int
    final_prompts: int
    lr: float = 0.1
    alpha: float = 0.1
    optimizer: str = "adam"
    decay_at: float = DECAY_AT
    decay_factor: float = DECAY_FACTOR
    d: int = NONLINEAR_TASK["d"]
    features: int = NONLINEAR_TASK["features"]
    frequency: float = NONLINEAR_TASK["frequency"]
    task_var: float = NONLINEAR_TASK["task_var"]
    noise_var: float = NONLINEAR_TASK["noise_var"]

    RECORDED = {"labels": "cosine", "rng": "torch", "covariates": "sphere"}

    def task(self) -> CosineTask:
        """Chapter 8's task (the same as :meth:`~softmax_as_linear.engine.sweep.TrainConfig.task` with cosine
        labels)."""
        return CosineTask(self.d, self.features, self.frequency, self.task_var, self.noise_var, inputs="sphere")


def nonlinear_depth_settings(preset: str = "lecture", **overrides) -> NonlinearDepthSettings:
    """The settings of ``preset`` (:data:`~softmax_as_linear.experiments.presets.NONLINEAR_DEPTH_SETTINGS`), fields
    overridden by ``overrides``."""
    checks.one_of("preset", preset, PRESETS)
    return NonlinearDepthSettings(**{**presets.NONLINEAR_DEPTH_SETTINGS[preset], **overrides})


def layer_windows(U: np.ndarray, d: int) -> np.ndarray:
    r"""Each layer's window :math:`w_\ell = \operatorname{tr}(U_{\ell,xx})/d`: U ``(..., K, D, D)`` -> ``(..., K)``."""
    return np.trace(np.asarray(U)[..., :d, :d], axis1=-2, axis2=-1) / d


def train_nonlinear_depth(settings: NonlinearDepthSettings, device="cpu", checkpoint=None, should_stop=None,
                          progress: bool = False, checkpoint_every: int = 1000, checkpoint_seconds: float = 0.0):
    """Train the sweep with the engine's loop; returns ``(stepper, records)`` (the stepper holds the last weights)."""
    stepper = DecayedDeepStepper(settings.deep_config(), settings.decay_step, settings.decay_factor, device)
    records = run(stepper, settings.steps, settings.record_steps(), config=settings, checkpoint=checkpoint,
                  checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds, progress=progress,
                  should_stop=should_stop)
    return stepper, records


def nonlinear_depth_readings(stepper, records, settings: NonlinearDepthSettings) -> dict:
    """What Chapter 8 reads from the trained sweep, JSON-ready, without provenance."""
    evaluation = deep_final_evaluation(stepper, records, settings)
    kept = records.up_to(records.last_step)
    U, v = (x.double().cpu().numpy() for x in final_weights(stepper))
    per_seed = {"seeds": list(settings.seeds),
                "risk": evaluation["risk"], "risk_se": evaluation["risk_se"],
                "difference": evaluation["difference"], "difference_se": evaluation["difference_se"],
                "fall": evaluation["fall"], "fall_se": evaluation["fall_se"],
                "trajectory": {name: kept["eval_risk"][:, :, a] for a, name in enumerate(MODEL_NAMES)},
                "trajectory_se": {name: kept["eval_sd"][:, :, a] / math.sqrt(settings.held_out_prompts)
                                  for a, name in enumerate(MODEL_NAMES)},
                "windows": {name: layer_windows(U[:, :, a], settings.d) for a, name in enumerate(MODEL_NAMES)},
                "U": U, "v": v, "diverged_at": stepper.diverged_at.cpu().numpy()}
    return {"experiment": "nonlinear_depth", "complete": bool(records.complete), "models": list(MODEL_NAMES),
            "lengths": list(settings.lengths), "steps": [int(s) for s in kept["steps"]],
            "decay_step": settings.decay_step, "final_prompts": evaluation["n_prompts"],
            "fall_fractions": list(FALL_FRACTIONS), "per_seed": jsonable(per_seed)}


def second_layer_effect(data: dict, model: str = "softmax") -> dict:
    r"""The second layer's paired effect at every length, two-layer minus one-layer risk for ``model``: the per-seed
    differences ``(S, nL)`` (each on the same fresh prompts), their mean over seeds and its standard error over seeds
    (NaN for one seed), and the means of the two risks. Negative: the second layer helps."""
    per = data["per_seed"]
    diff = np.asarray(per["difference"][f"second_layer_{model}"], dtype=float)
    one, two = (np.asarray(per["risk"][f"{model}_{K}"], dtype=float) for K in (1, 2))
    S = diff.shape[0]
    se = diff.std(0, ddof=1) / math.sqrt(S) if S > 1 else np.full(diff.shape[1], np.nan)
    return {"lengths": data["lengths"], "per_seed": diff, "mean": diff.mean(0), "se": se,
            "one_layer": one.mean(0), "two_layers": two.mean(0)}
