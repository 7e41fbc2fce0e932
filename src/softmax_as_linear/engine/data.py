"""The prompts of a sweep as tensors: the training batches and the fixed held-out set, from torch's per-seed
generators (:class:`SweepData`) or from the counter-based stream (:class:`CounterData`)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import torch

from ..core import seeding
from ..theory.regression import RegressionTask
from .gpu import counter_stream
from .sweep import TrainConfig


class SweepData:
    """Per-seed generators for training batches (stream ``"train"``) and the fixed held-out prompts
    (stream ``"held_out"``, attribute ``eval``), as tensors: tokens ``(S, B, L_max, D)``, queries ``(S, B, D)``,
    targets ``(S, B)`` and task vectors ``(S, B, d)`` (which the infinite-prompt models read).
    Each seed's normal draws come from its own generator; the arithmetic that turns them into prompts
    is done once for all seeds (:meth:`~softmax_as_linear.theory.regression.RegressionTask.sample_stacked`).

    With ``prefetch`` (on a CPU), the next batch is drawn on a second thread while the current
    step computes; batches and generator states are exactly those of drawing in turn, and
    :meth:`state` is the state after the batches handed out so far (what a checkpoint needs).
    ``prepare`` (for instance :meth:`~softmax_as_linear.engine.batched.SweepModel.prepare`) is applied to
    the tokens of every training batch as it is drawn, on that thread when there is one.

    Graph-safe: its generators live on the device and a CUDA graph registers them
    (:func:`~softmax_as_linear.engine.gpu.cuda_graph.cuda_graphed`), so each replay draws the next batch.
    """

    graph_safe = True

    def __init__(self, cfg: TrainConfig, task: RegressionTask, device: torch.device, dtype, prefetch: bool = False,
                 prepare: Callable[[torch.Tensor], object] | None = None):
        self.cfg, self.task, self.device, self.dtype, self.prepare = cfg, task, device, dtype, prepare
        self.L_max = max(cfg.lengths)
        self.generators = [seeding.generator(seed, "train", device=device) for seed in cfg.seeds]
        held_out = [seeding.generator(seed, "held_out", device=device) for seed in cfg.seeds]
        self.eval = self._draw(cfg.eval_prompts, held_out)
        # Batch 0 belongs to the record before the first step (as every result file of rng="torch" was computed):
        # drawn here, so that reading it moves nothing and step k trains on batch k + 1 however often it is read.
        self._first = self._draw_prepared()
        self._pool = ThreadPoolExecutor(max_workers=1) if prefetch else None
        self._pending = None  # (generator states before the batch, future of the batch)

    def _draw(self, n_prompts: int | None = None, generators=None):
        batch = self.task.sample_stacked(n_prompts or self.cfg.batch_size, self.L_max, generators or self.generators,
                                         self.dtype)
        return batch.tokens, batch.query, batch.target, batch.w

    def _draw_prepared(self):
        tokens, query, target, w = self._draw()
        return tokens, query, target, w, None if self.prepare is None else self.prepare(tokens)

    def batch(self):
        """Tokens ``(S, B, L_max, D)``, queries ``(S, B, D)``, targets ``(S, B)``, tasks ``(S, B, d)`` of the
        next step (batch 1 first: batch 0 is :meth:`first_record_batch`), and what ``prepare`` made of the tokens
        (None without it)."""
        if self._pool is None:
            return self._draw_prepared()
        current = self._draw_prepared() if self._pending is None else self._pending[1].result()
        self._pending = ([g.get_state() for g in self.generators], self._pool.submit(self._draw_prepared))
        return current

    def first_record_batch(self):
        """The batch the record before the first step reads: batch 0, drawn when the stream was made (as every
        result file of ``rng="torch"`` was computed), so step ``k`` trains on batch ``k + 1``. Reading it takes
        nothing from the stream."""
        return self._first

    def state(self):
        """The generators' states after the batches handed out so far (what a checkpoint needs)."""
        if self._pending is not None:
            return self._pending[0]
        return [g.get_state() for g in self.generators]

    def load_state(self, states):
        """Restore the generators to ``states`` (from :meth:`state`)."""
        self._discard_pending()
        for g, s in zip(self.generators, states):
            g.set_state(s.cpu())  # generator states live on the CPU

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


class CounterData:
    """The batches and held-out prompts of ``rng="philox"`` as tensors, from
    :func:`~softmax_as_linear.engine.gpu.counter_stream.draw` (where the training kernel does not run: a CPU, or
    float64): batch ``k`` is step ``k`` of stream ``"train"``, the held-out set is prompts
    ``0 .. eval_prompts - 1`` of step 0 of stream ``"held_out"``. The same interface as :class:`SweepData`;
    :meth:`state` is the number of batches handed out, and :meth:`peek` reads the next one without taking it.

    Not graph-safe: its position is a Python number, which a CUDA graph would bake in and replay the same batch for
    ever; :func:`~softmax_as_linear.engine.gpu.cuda_graph.cuda_graphed` refuses it.
    """

    graph_safe = False
    generators: list = []

    def __init__(self, cfg: TrainConfig, task: RegressionTask, device: torch.device, dtype):
        self.cfg, self.task, self.device, self.dtype = cfg, task, device, dtype
        self.L_max = max(cfg.lengths)
        self.factor, self.query_factor = counter_stream.task_factors(task)
        self.keys = [seeding.stream_seed(seed, "train") for seed in cfg.seeds]
        self.count = 0
        self.eval = self.draw([seeding.stream_seed(seed, "held_out") for seed in cfg.seeds], 0, cfg.eval_prompts)

    def draw(self, keys, step: int, n_prompts: int):
        """Prompts ``0 .. n_prompts - 1`` of ``step`` under ``keys``: tokens, queries, targets, and None for
        the tasks (the stream does not hand them out; no infinite-prompt model trains on it)."""
        return *counter_stream.draw(keys, step, n_prompts, self.L_max, d=self.cfg.d, factor=self.factor,
                                   query_factor=self.query_factor, task_var=self.task.task_var,
                                   noise_var=self.task.noise_var, covariates=self.cfg.covariates, device=self.device,
                                   dtype=self.dtype), None

    def peek(self):
        """The next batch, without taking it."""
        return self.draw(self.keys, self.count, self.cfg.batch_size)

    def first_record_batch(self):
        """The batch the record before the first step reads: batch 0, without taking it (step ``k`` trains on
        batch ``k``, as in the prompt kernel)."""
        return self.peek()

    def batch(self):
        """Tokens ``(S, B, L_max, D)``, queries ``(S, B, D)``, targets ``(S, B)`` of the next step (tasks None)."""
        out = self.peek()
        self.count += 1
        return out

    def state(self) -> int:
        """The number of batches handed out."""
        return self.count

    def load_state(self, state):
        """Continue after ``state`` batches (from :meth:`state`)."""
        self.count = int(state)

    def close(self):
        """Nothing to stop (no thread)."""
