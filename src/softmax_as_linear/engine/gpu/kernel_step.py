"""The stepper of ``rng="philox"`` where the prompt kernel runs: the prompts drawn inside the kernel, no batch tensor.

SGD on the four matrices in float32 (the paper's setting) is two kernels: the prompt kernel's sums, then
:meth:`~softmax_as_linear.engine.gpu.prompt_kernel.PromptKernel.sgd_step`, which also keeps :math:`U` and :math:`v`
for the next step. Other settings (Adam, the ``uv`` parametrisation) hand the sums to autograd
(:class:`~softmax_as_linear.engine.gpu.prompt_kernel.KernelPrediction`) and take the engine's own
:func:`~softmax_as_linear.engine.stepper.sgd_update`. Batch ``k`` is a function of the step ``k``, read from a device
tensor: nothing in a step waits for the device, so it is captured as a CUDA graph, and a resumed run draws exactly
the batches of the uninterrupted one.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..batched import SweepModel
from ..stepper import load_optimiser_state, optimiser_state, sgd_update
from . import prompt_kernel
from .cuda_graph import cuda_graphed


class PromptKernelStepper:
    """:class:`~softmax_as_linear.engine.stepper.Stepper` of the prompt kernel (path ``"prompt_kernel"``, with
    ``"+graph"`` when ``graph`` and the capture ran). ``kernel_options`` go to
    :class:`~softmax_as_linear.engine.gpu.prompt_kernel.PromptKernel`."""

    graph_safe = True  # the step counter is a device tensor
    generators: list = []

    def __init__(self, sweep: SweepModel, optimizer: torch.optim.Optimizer, *, graph: bool = False, **kernel_options):
        cfg = sweep.cfg
        self.sweep, self.optimizer = sweep, optimizer
        self.alive = torch.ones(sweep.shape, dtype=torch.bool, device=sweep.device)
        self.diverged_at = torch.full(sweep.shape, -1, dtype=torch.long, device=sweep.device)
        self.step_count = torch.zeros((), dtype=torch.long, device=sweep.device)
        self.kernel = prompt_kernel.PromptKernel(cfg, sweep.device, covariates=cfg.covariates, **kernel_options)
        self.keys, self.held_out_keys = self.kernel.keys("train"), self.kernel.keys("held_out")
        self.threshold = cfg.blowup * sweep.zero_risk
        self.fused = cfg.optimizer == "sgd" and cfg.parametrisation == "four_matrix" and cfg.dtype == "float32"
        if self.fused:
            self.params = {n: p.detach() for n, p in sweep.params.items()}
            S, nL, nA = sweep.shape
            self.U = torch.empty(S, nL, nA, cfg.D, cfg.D, device=sweep.device)
            self.v = torch.empty(S, nL, nA, cfg.D, device=sweep.device)
            self.risk = torch.zeros(sweep.shape, device=sweep.device)
            self.kernel.uv(self.params, self.U, self.v)
        self.steps_taken = 0
        self._take = cuda_graphed(self._step, [self]) if graph else self._step

    @property
    def path(self) -> str:
        return "prompt_kernel" + ("+graph" if getattr(self._take, "captured", False) else "")

    def _step(self):
        if self.fused:
            out, query, target = self.kernel.grad_sums(self.U, self.v, self.alive, self.keys, self.step_count)
            self.kernel.sgd_step(out, query, target, self.params, self.U, self.v, self.alive, self.diverged_at,
                                 self.risk, self.step_count, self.sweep.cfg.lr, self.threshold)
            self.step_count.add_(1)
            return
        U, v = self.sweep.uv()
        pred, target = prompt_kernel.KernelPrediction.apply(U, v, self.kernel, self.alive, self.keys, self.step_count)
        risk = 0.5 * ((pred - target[:, None, None, :]) ** 2).mean(-1)
        sgd_update(self.sweep, self.optimizer, risk, self.alive, self.diverged_at, self.step_count, self.threshold)

    def step(self) -> None:
        self._take()
        self.steps_taken += 1

    def _uv(self):
        if self.fused:
            return self.U, self.v
        with torch.no_grad():
            U, v = self.sweep.uv()
            return U.contiguous(), v.contiguous()

    def batch_risk(self) -> Tensor:
        """The risk of batch ``step_count - 1`` (the last step's) with the current parameters; before the first
        step, of batch 0 (the one the first step takes)."""
        U, v = self._uv()
        mean, _ = self.kernel.risk_moments(U, v, torch.ones_like(self.alive), self.keys, self.sweep.cfg.batch_size,
                                           self.step_count, -1 if self.steps_taken else 0)
        return mean

    def held_out(self) -> tuple[Tensor, Tensor]:
        """The held-out risk and the standard deviation of its per-prompt losses; the held-out prompts are drawn
        again inside the kernel."""
        U, v = self._uv()
        return self.kernel.risk_moments(U, v, torch.ones_like(self.alive), self.held_out_keys,
                                        self.sweep.cfg.eval_prompts)

    def weights(self) -> dict[str, Tensor]:
        return {n: p.detach() for n, p in self.sweep.params.items()}

    def state(self) -> dict:
        return {**optimiser_state(self.sweep, self.optimizer, self.alive, self.diverged_at, self.steps_taken),
                "generators": []}

    def load_state(self, state: dict) -> None:
        load_optimiser_state(state, self.sweep, self.optimizer, self.alive, self.diverged_at, self.step_count)
        self.steps_taken = int(state["step"])
        if self.fused:
            self.kernel.uv(self.params, self.U, self.v)  # the one computation of U and v (bit for bit on resuming)

    def close(self) -> None:
        pass
