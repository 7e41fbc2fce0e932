"""The prompts of a sweep: per-seed generators of the training batches and the fixed held-out set."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from ..core import seeding
from ..theory.regression import RegressionTask
from .sweep import TrainConfig


class SweepData:
    """Per-seed generators for training batches (stream ``"train"``) and the fixed held-out prompts
    (stream ``"held_out"``, :attr:`eval`), as tensors: tokens ``(S, B, L_max, D)``, queries ``(S, B, D)``,
    targets ``(S, B)`` and task vectors ``(S, B, d)`` (which the infinite-prompt models read).
    Each seed's normal draws come from its own generator; the arithmetic that turns them into prompts
    is done once for all seeds (:meth:`~softmax_as_linear.theory.regression.RegressionTask.sample_stacked`).

    With ``prefetch`` (on a CPU), the next batch is drawn on a second thread while the current
    step computes; batches and generator states are exactly those of drawing in turn, and
    :meth:`state` is the state after the batches handed out so far (what a checkpoint needs).
    """

    def __init__(self, cfg: TrainConfig, task: RegressionTask, device: torch.device, dtype, prefetch: bool = False):
        self.cfg, self.task, self.device, self.dtype = cfg, task, device, dtype
        self.L_max = max(cfg.lengths)
        self.generators = [seeding.generator(seed, "train", device=device) for seed in cfg.seeds]
        held_out = [seeding.generator(seed, "held_out", device=device) for seed in cfg.seeds]
        self.eval = self._draw(cfg.eval_prompts, held_out)
        self._pool = ThreadPoolExecutor(max_workers=1) if prefetch else None
        self._pending = None  # (generator states before the batch, future of the batch)

    def _draw(self, n_prompts: int | None = None, generators=None):
        batch = self.task.sample_stacked(n_prompts or self.cfg.batch_size, self.L_max, generators or self.generators,
                                         self.dtype)
        return batch.tokens, batch.query, batch.target, batch.w

    def batch(self):
        """Tokens ``(S, B, L_max, D)``, queries ``(S, B, D)``, targets ``(S, B)`` and tasks ``(S, B, d)`` of the next step."""
        if self._pool is None:
            return self._draw()
        current = self._draw() if self._pending is None else self._pending[1].result()
        self._pending = ([g.get_state() for g in self.generators], self._pool.submit(self._draw))
        return current

    def state(self):
        if self._pending is not None:
            return self._pending[0]
        return [g.get_state() for g in self.generators]

    def load_state(self, states):
        self._discard_pending()
        for g, s in zip(self.generators, states):
            g.set_state(s)

    def _discard_pending(self):
        if self._pending is not None:
            states, future = self._pending
            future.result()
            for g, s in zip(self.generators, states):
                g.set_state(s)
            self._pending = None

    def close(self):
        """Stop the prefetching thread; the generators are left as :meth:`state` says."""
        self._discard_pending()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
