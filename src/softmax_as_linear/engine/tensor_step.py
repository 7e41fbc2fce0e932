r"""The training step on batches drawn as tensors: the sweep's batched forward pass, autograd and the optimiser.

:class:`TensorStepper` is the :class:`~softmax_as_linear.engine.stepper.Stepper` of every sweep the prompt kernel does
not train: on a CPU (path ``"cpu"``: the CPU forward pass of :class:`~softmax_as_linear.engine.batched.SweepModel`,
the next batch drawn on a spare core), and on a GPU with torch's generators or with the counter-based stream drawn
as tensors (path ``"tensor"``, or ``"fused_softmax"`` where the softmax sums ran as one Triton kernel), replayed as
a CUDA graph where its data source allows it.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .batched import SweepModel
from .data import CounterData, SweepData
from .gpu import fused_softmax
from .gpu.cuda_graph import cuda_graphed
from .moments import Moments
from .stepper import load_optimiser_state, optimiser_state, sgd_update


class TensorStepper:
    """One step of every run: draw the batch, form the risks, stop the diverged runs, take the optimiser step.

    ``data`` a :class:`~softmax_as_linear.engine.data.SweepData` or :class:`~softmax_as_linear.engine.data.CounterData`;
    ``graph``: replay the step as a CUDA graph (CUDA only, and only a graph-safe data source; see
    :func:`~softmax_as_linear.engine.gpu.cuda_graph.cuda_graphed`).

    The record before the first step (:meth:`~softmax_as_linear.engine.stepper.Stepper.batch_risk` with no step
    taken) reads batch 0 and takes nothing from the stream: under torch's generators batch 0 is the record's and step
    ``k`` trains on batch ``k + 1``, as every result file written with ``rng="torch"`` was computed; under the
    counter-based stream step ``k`` trains on batch ``k``, like the prompt kernel.
    """

    def __init__(self, sweep: SweepModel, data: SweepData | CounterData, optimizer: torch.optim.Optimizer, *,
                 graph: bool = False):
        self.sweep, self.data, self.optimizer = sweep, data, optimizer
        self.alive = torch.ones(sweep.shape, dtype=torch.bool, device=sweep.device)
        self.diverged_at = torch.full(sweep.shape, -1, dtype=torch.long, device=sweep.device)
        self.step_count = torch.zeros((), dtype=torch.long, device=sweep.device)
        self.steps_taken = 0  # step_count, on the host (read without waiting for the device)
        self.threshold = sweep.cfg.blowup * sweep.zero_risk
        self._batch = None  # the batch of the last step (and, on a CPU, what sweep.prepare made of its tokens)
        self._held_out_prepared = None  # on a CPU, what sweep.prepare makes of the held-out prompts, formed once
        self._launches = fused_softmax.LAUNCHES
        self._take = cuda_graphed(self._step, [data]) if graph else self._step

    def _step(self):
        batch = self.data.batch()
        sgd_update(self.sweep, self.optimizer, self.sweep.risk(*batch), self.alive, self.diverged_at, self.step_count,
                   self.threshold)
        return batch

    @property
    def path(self) -> str:
        """``"cpu"`` (the CPU forward pass), ``"fused_softmax"`` where the fused kernel ran for this sweep's steps,
        ``"tensor"`` otherwise; ``"+graph"`` where the step was captured."""
        path = self.sweep.forward_path
        if path == "fused_softmax" and (fused_softmax.LAUNCHES == self._launches or not fused_softmax.ENABLED):
            path = "tensor"  # no softmax run, or the kernel was switched off (a warning said so)
        return path + ("+graph" if getattr(self._take, "captured", False) else "")

    def step(self) -> None:
        self._batch = self._take()
        self.steps_taken += 1

    def batch_risk(self) -> Tensor:
        with torch.no_grad():
            if self._batch is None:
                return self.sweep.risk(*self.data.first_record_batch())
            return self.sweep.risk(*self._batch)

    def held_out(self) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            if self._held_out_prepared is None and self.sweep.forward_path == "cpu":
                self._held_out_prepared = prepare_held_out(self.sweep, self.data.eval)
            return held_out_risk(self.sweep, self.data.eval, prepared=self._held_out_prepared)

    def weights(self) -> dict[str, Tensor]:
        return {n: p.detach() for n, p in self.sweep.params.items()}

    def state(self) -> dict:
        return {**optimiser_state(self.sweep, self.optimizer, self.alive, self.diverged_at, self.steps_taken),
                "generators": self.data.state()}

    def load_state(self, state: dict) -> None:
        load_optimiser_state(state, self.sweep, self.optimizer, self.alive, self.diverged_at, self.step_count)
        self.steps_taken = int(state["step"])
        self.data.load_state(state["generators"])

    def close(self) -> None:
        self.data.close()


#: Held-out prompts per evaluation of the held-out risk (:func:`held_out_risk`).
HELD_OUT_CHUNK = 512


def held_out_risk(sweep: SweepModel, held_out, chunk: int = HELD_OUT_CHUNK,
                  prepared: list | None = None) -> tuple[Tensor, Tensor]:
    """Risk ``(S, nL, nA)`` of every run on the held-out prompts ``(tokens, queries, targets, tasks)``, and the sample
    standard deviation ``(S, nL, nA)`` of its per-prompt losses (the risk's standard error is ``sd / sqrt(n)``),
    ``chunk`` prompts at a time (in float64, :class:`~softmax_as_linear.engine.moments.Moments`). ``prepared``: what
    :func:`prepare_held_out` made of these prompts with the same ``chunk`` (the CPU forward pass), or None."""
    tokens, query, target, w = held_out
    moments = Moments()
    for k, start in enumerate(range(0, tokens.shape[1], chunk)):
        sl = slice(start, start + chunk)
        moments.add(sweep.losses(tokens[:, sl], query[:, sl], target[:, sl], None if w is None else w[:, sl],
                                 None if prepared is None else prepared[k]))
    return moments.mean, moments.sd


def prepare_held_out(sweep: SweepModel, held_out, chunk: int = HELD_OUT_CHUNK) -> list:
    """:meth:`~softmax_as_linear.engine.batched.SweepModel.prepare` of the held-out tokens, ``chunk`` prompts at a
    time: they never change, so the CPU forward pass forms their column layout and prefix moments once for every
    record instead of at each (the same numbers; the column layout takes as much memory as the tokens)."""
    tokens = held_out[0]
    return [sweep.prepare(tokens[:, start:start + chunk]) for start in range(0, tokens.shape[1], chunk)]
