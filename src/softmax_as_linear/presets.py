"""Named settings of the training experiments: ``"paper"`` (Section 6 and Appendix A exactly) and
``"lecture"`` (the same stories in about two minutes on a 2-core CPU).

The lecture preset keeps the paper's task, model, initialisation, batch size and optimiser (plain
SGD on the MSE from PyTorch's default initialisation, softmax and linear paired) and changes only
what costs time: six prompt lengths up to 500 instead of nineteen up to 1000, a learning rate ten
times larger and 60 times fewer steps (gradient-flow time ``2 lr steps`` = 100 instead of 600; the
risks have settled by time 80 in both presets), and a smaller held-out set.
"""
from __future__ import annotations

from . import _checks
from .train import TrainConfig

PAPER_LENGTHS = tuple(range(10, 100, 10)) + tuple(range(100, 1001, 100))
PRESET_NAMES = ("paper", "lecture")

_BASE = {
    "paper": dict(d=5, noise_var=0.1, lengths=PAPER_LENGTHS, seeds=(327,), steps=300_000, batch_size=128,
                  lr=1e-3, optimizer="sgd", parametrisation="four_matrix", init="pytorch", record_every=1000,
                  eval_prompts=4096),
    "lecture": dict(d=5, noise_var=0.1, lengths=(10, 20, 50, 100, 200, 500), seeds=(327,), steps=5_000,
                    batch_size=128, lr=1e-2, optimizer="sgd", parametrisation="four_matrix", init="pytorch",
                    record_every=50, eval_prompts=2048),
}


def sweep_config(preset: str, covariance: str = "isotropic", **overrides) -> TrainConfig:
    """The :class:`~softmax_as_linear.train.TrainConfig` of a preset, for ``"isotropic"`` or ``"kms"`` inputs.

    ``overrides`` replace fields (for example ``seeds=(1, 2, 3)``) and are validated like any config.
    """
    _checks.one_of("preset", preset, PRESET_NAMES)
    _checks.one_of("covariance", covariance, ("isotropic", "kms"))
    return TrainConfig(**{**_BASE[preset], "covariance": covariance, "rho": 0.5, **overrides})
