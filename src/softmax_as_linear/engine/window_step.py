r"""Training Chapter 8's softmax layer with its window on a log scale: a stepper for runs of shape (seeds, lengths, 1).

Each run is the one-layer softmax layer of :mod:`~softmax_as_linear.theory.attention_optimum` in the weights it
optimises, :math:`\theta = (\log w, B, u_y, v)` with the score's input block :math:`U_{xx} = w(I + B)`,
:math:`\operatorname{tr} B = 0` (every weight of the layer that reaches the prediction, the window
:math:`w = \operatorname{tr}(U_{xx})/d` on a log scale). Why the log scale: a window that is a product of weights (the
four-matrix layer of Chapter 8's sweep) grows by additive steps, which slow down, and 1,500 steps leave it near 72 at
every :math:`L \ge 100`, where the layer's own optimum is at 78 to 314. On :math:`\log w` an Adam step of size about
the learning rate multiplies the window by about :math:`e^{\pm\,\mathrm{lr}}`, so the window reaches the scale the
task asks for in a few hundred steps and then fluctuates around it; the learning rate is divided by ``decay_factor``
at ``decay_step`` so that it settles.

Every run starts from :math:`w` = ``init_window``, :math:`B = 0`, :math:`u_y = 0`, :math:`v = 0` (the zero predictor,
with a near-uniform window). A seed's batches come from its stream ``"train"``, prompts of the longest length of which
the run of length :math:`L` reads the first :math:`L` tokens, so that the runs of one seed are paired across lengths;
its held-out prompts from stream ``"held_out"``. The stepper implements the engine's step interface
(:class:`~softmax_as_linear.engine.stepper.Stepper`, ``path = "window"``), so the engine's one loop
(:func:`~softmax_as_linear.engine.train.run`) trains, records, checkpoints and resumes it.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core import checks, seeding
from ..theory.attention_optimum import parameter_count, softmax_prediction_unchecked
from .stepper import SeedStepper


def check_settings(seeds, lengths, batch_size, lr, decay_factor, init_window, held_out_prompts,
                   blowup) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The settings of a :class:`WindowStepper` checked (a ``ValueError`` names the first that is not right), without
    building it; returns the seeds and lengths as tuples."""
    seeds = tuple(seeding.check_seed("seeds", s) for s in seeds)
    lengths = tuple(checks.positive_int("lengths", L) for L in lengths)
    if not seeds or not lengths:
        raise ValueError("seeds and lengths must each hold at least one entry")
    if list(lengths) != sorted(set(lengths)):
        raise ValueError(f"lengths must be increasing, got {lengths!r}")
    checks.positive_int("batch_size", batch_size)
    checks.positive_float("lr", lr)
    checks.positive_float("decay_factor", decay_factor)
    checks.positive_float("init_window", init_window)
    checks.int_at_least("held_out_prompts", held_out_prompts, 2)
    checks.positive_float("blowup", blowup)
    return seeds, lengths


class WindowStepper(SeedStepper):
    """One Adam step of every run at once; runs ``(S, nL, 1)``, weights ``theta`` ``(S, nL, 1, p)``. The data
    streams, the step (on the engine's objective, with its rule of divergence: a stopped run does not move), the decay,
    the readings and the state are :class:`~softmax_as_linear.engine.stepper.SeedStepper`'s.

    Args:
        task: the prompts' law (a :class:`~softmax_as_linear.theory.cosine_task.CosineTask`, or any task with
            ``sample``, ``zero_risk``, ``d`` and ``D``).
        seeds: one run per seed and length.
        lengths: the prompt lengths, increasing.
        batch_size: fresh prompts per step and seed.
        lr: Adam's learning rate until ``decay_step``, then multiplied by ``decay_factor``.
        init_window: the starting window.
        held_out_prompts: the fixed held-out set per seed.
        blowup: the divergence threshold in units of the zero predictor's risk (the engine's one rule).
    """

    path = "window"

    def __init__(self, task, seeds, lengths, batch_size: int = 64, lr: float = 0.05, decay_step: int | None = None,
                 decay_factor: float = 0.1, init_window: float = 1.0, held_out_prompts: int = 512,
                 blowup: float = 1e3, device: torch.device | str = "cpu", dtype=torch.float32):
        self.seeds, self.lengths = check_settings(seeds, lengths, batch_size, lr, decay_factor, init_window,
                                                  held_out_prompts, blowup)
        self.device, self.dtype = torch.device(device), dtype
        self.lr, self.decay_factor = float(lr), float(decay_factor)
        self.decay_step = None if decay_step is None else checks.int_at_least("decay_step", decay_step, 0)
        S, nL, p = len(self.seeds), len(self.lengths), parameter_count("softmax", task.d)
        theta = torch.zeros(S, nL, 1, p, dtype=dtype, device=self.device)
        theta[..., 0] = math.log(init_window)
        self.theta = theta.requires_grad_(True)
        self.optimizer = torch.optim.Adam([self.theta], lr=self.lr)
        self._start(task, self.seeds, self.lengths[-1], batch_size, held_out_prompts, (S, nL, 1),
                    blowup * task.zero_risk())

    # --------------------------------------------------------------------------------------------- model
    def parameters(self) -> dict[str, Tensor]:
        r"""``theta`` ``(S, nL, 1, p)`` (:math:`\log w, B, u_y, v`)."""
        return {"theta": self.theta}

    def losses(self, tokens: Tensor, query: Tensor, target: Tensor, theta: Tensor | None = None) -> Tensor:
        r"""Per-prompt losses :math:`\tfrac12(\hat y - y_q)^2` of every run, ``(S, nL, 1, n)``, on prompts of the
        longest length ``tokens`` ``(S, n, L_max, D)`` (the run of length :math:`L` reads the first :math:`L`), at the
        stepper's weights or at ``theta`` ``(S, nL, 1, p)``."""
        theta = self.theta if theta is None else theta.to(self.theta)
        # seed by seed: a product batched over the seeds may round differently for another number of seeds (shards)
        rows = [torch.cat([softmax_prediction_unchecked(theta[s:s + 1, i, 0], tokens[s:s + 1, :, :L],
                                                        query[s:s + 1])
                           for s in range(theta.shape[0])]) for i, L in enumerate(self.lengths)]
        return (0.5 * (torch.stack(rows, 1) - target[:, None]) ** 2).unsqueeze(2)

    def _clean_gradients(self) -> None:
        """A non-finite gradient entry (of a run that overflowed) is zero."""
        self.theta.grad.nan_to_num_(0.0)

    def held_out(self) -> tuple[Tensor, Tensor]:
        """``(S, nL, 1)`` risk on each seed's fixed held-out prompts and the sample sd of its per-prompt losses."""
        with torch.no_grad():
            losses = self.losses(*self._held_out).double()
        # seed by seed: a reduction over a (S, ...) tensor may round differently for another S (shards)
        return (torch.stack([row.mean(-1) for row in losses]), torch.stack([row.std(-1) for row in losses]))
