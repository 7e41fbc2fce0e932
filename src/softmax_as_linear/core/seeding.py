"""The one seeding rule: which random numbers an experiment with a given seed uses.

Every experiment has an integer ``seed`` (the paper's is 327). Each kind of randomness in it is a
*stream* with a fixed offset, and draws from its own generator, seeded by

.. math:: \\text{generator seed} = \\text{offset}(\\text{stream}) + \\text{seed}

or, for a stream drawn separately at every prompt length ``L`` (so that the data of one length do
not depend on which other lengths are computed),

.. math:: \\text{generator seed} = (\\text{offset}(\\text{stream}) + \\text{seed}) \\times 1\\,000\\,003 + L .

================  ======  ===========================================================================
stream            offset  what it draws
================  ======  ===========================================================================
``"init"``        0       PyTorch's default initialisation of the four matrices (``torch.manual_seed``)
``"train"``       10,000  the training batches of a sweep, one batch per step
``"held_out"``    20,000  the fixed held-out prompts on which a sweep's risk is recorded
``"bayes"``       30,000  per ``L``: the Monte Carlo prompts of the Bayes-optimal (ridge) reference risk
``"prompts"``     40,000  per ``L``: the prompts of a concentration experiment (Figures 1 and 5, Chapter 3)
``"evaluation"``  50,000  per ``L``: the large fresh prompts on which a sweep's final risks are measured
``"analysis"``    60,000  per ``L``: fresh prompts on which two records of one run are compared (paired changes)
``"pgd_fit"``     70,000  per ``L``: the prompt inputs on which the best preconditioners of gradient descent are fitted
``"pgd_score"``   80,000  per ``L``: the independent prompt inputs on which those preconditioners are scored
================  ======  ===========================================================================

Seeds lie in ``[0, 10_000)`` and ``1 <= L < 1_000_003``, so no two (seed, stream, L) share a generator
seed: per-experiment seeds stay below 90,000 and per-length ones start above :math:`10^{10}`. Paired softmax and
linear runs of one seed therefore start from the same weights and see the same batches. The
reference risks are properties of the task, not of one experiment: they use ``seed = 0``
(:data:`REFERENCE_SEED`).
"""
from __future__ import annotations

import torch

from . import checks

STREAM_OFFSETS = {"init": 0, "train": 10_000, "held_out": 20_000, "bayes": 30_000, "prompts": 40_000,
                  "evaluation": 50_000, "analysis": 60_000, "pgd_fit": 70_000, "pgd_score": 80_000}
PER_LENGTH_STREAMS = ("prompts", "bayes", "evaluation", "analysis", "pgd_fit", "pgd_score")
SEED_LIMIT = 10_000
#: The seed of the reference risks (Bayes and best linear risks), which belong to the task, not to one experiment.
REFERENCE_SEED = 0
_LENGTH_FACTOR = 1_000_003


def check_seed(name: str, seed) -> int:
    """``seed`` as an int in ``[0, SEED_LIMIT)``, or a ``ValueError`` naming ``name``."""
    value = checks.int_at_least(name, seed, 0)
    if value >= SEED_LIMIT:
        raise ValueError(f"{name} must be an integer in [0, {SEED_LIMIT}), got {seed!r}")
    return value


def stream_seed(seed: int, stream: str, L: int | None = None) -> int:
    """The generator seed of ``stream`` for experiment ``seed`` (and prompt length ``L`` for a per-length stream)."""
    checks.one_of("stream", stream, tuple(STREAM_OFFSETS))
    base = STREAM_OFFSETS[stream] + check_seed("seed", seed)
    if stream in PER_LENGTH_STREAMS:
        if L is None:
            raise ValueError(f"stream {stream!r} is drawn per prompt length: pass L")
        L = checks.positive_int("L", L)
        if L >= _LENGTH_FACTOR:
            raise ValueError(f"L must be below {_LENGTH_FACTOR:,}, got {L}")
        return base * _LENGTH_FACTOR + L
    if L is not None:
        raise ValueError(f"stream {stream!r} is not drawn per prompt length: L must be None")
    return base


def generator(seed: int, stream: str, L: int | None = None, device="cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded by :func:`stream_seed`."""
    return torch.Generator(device=device).manual_seed(stream_seed(seed, stream, L))
