r"""The step interface: one optimisation step of every run of a sweep at once, whatever code takes it.

Runs have shape ``(S, nL, nA)`` (seeds, prompt lengths, models). The training loop
(:func:`~softmax_as_linear.engine.train.run`) is written against :class:`Stepper` alone; the steppers are

* :class:`~softmax_as_linear.engine.tensor_step.TensorStepper`: batches as tensors and the sweep's batched forward
  pass (:mod:`~softmax_as_linear.engine.batched`) with autograd; path ``"cpu"`` on a CPU, ``"tensor"`` or
  ``"fused_softmax"`` on a GPU;
* :class:`~softmax_as_linear.engine.gpu.kernel_step.PromptKernelStepper`: the prompts drawn inside a GPU kernel
  (``rng="philox"``), path ``"prompt_kernel"``;

either one with ``"+graph"`` when its step is replayed as a CUDA graph. Each is an optimisation of the plain loop of
:mod:`~softmax_as_linear.engine.reference`, which ``tests/engine/test_paths.py`` checks them against.

Every stepper (these two, and Chapter 7's :class:`~softmax_as_linear.engine.deep.DeepStepper`) minimises one
objective, the mean squared error ``MSE = 2R`` of every live run (:func:`objective`), and applies one rule of
divergence (:func:`stop_diverged`): a run whose batch risk is not finite or exceeds ``blowup`` times the risk of the
zero predictor is *diverged* and stops updating.

Hand-written gradients. Four pieces of the engine form gradients without autograd's graph, each checked against
autograd or ``torch.autograd.gradcheck`` on its own:

* :class:`~softmax_as_linear.engine.batched.SoftmaxPrediction` (the tensor formulas, and the fused softmax kernel's
  sums): ``gradcheck`` in ``tests/engine/test_train.py::test_softmax_prediction_gradient``, the fused kernel's sums
  against the tensor formulas in ``tests/engine/test_fused_softmax.py``;
* :class:`~softmax_as_linear.engine.batched.SoftmaxSweep` (the CPU forward pass): ``gradcheck`` in
  ``tests/engine/test_train.py::test_cpu_softmax_gradient``;
* :class:`~softmax_as_linear.engine.gpu.prompt_kernel.KernelPrediction` (the prompt kernel's sums to dL/dU, dL/dv):
  float64 autograd of the prediction written out on the reference stream's prompts,
  ``tests/engine/prompt_kernel_interpreted.py::test_kernel_prediction_backward_is_autograd_of_the_prediction``, and the
  kernel's per-prompt sums against float64 autograd in the same suite;
* the Triton SGD kernel's chain rule to the four matrices (:mod:`~softmax_as_linear.engine.gpu.sgd`): against an
  autograd step, ``tests/engine/prompt_kernel_interpreted.py::test_sgd_kernel_is_the_autograd_step``.

Every path's weights are also checked step by step against the plain autograd loop of
:mod:`~softmax_as_linear.engine.reference` (``tests/engine/test_paths.py``).
"""
from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from .batched import SweepModel


class Stepper(Protocol):
    """Takes one optimisation step of every run of a sweep at once; runs have shape ``(S, nL, nA)``.

    The contract the loop (:func:`~softmax_as_linear.engine.train.run`) relies on, checked for every stepper by
    ``tests/engine/test_stepper_contract.py``:

    * :meth:`step` is the only method that moves anything: parameters, optimiser, the data stream's position, the
      bookkeeping of divergence and the step count. It draws its own batch.
    * :meth:`batch_risk`, :meth:`held_out` and :meth:`weights` are readings: they move nothing (a batch read before the
      first step is drawn from a copy of the stream, or was drawn when the stepper was made), so reading twice gives
      the same numbers, and a record, which reads, may be taken again.
    * :meth:`state` holds ``step`` (the steps taken, a host integer: reading it does not wait for the device),
      ``alive``, ``diverged_at``, ``generators`` (the data stream's position), ``optimizer`` and the parameters; its
      tensors may be the stepper's own (the loop copies them before a step, to save if an interrupt cuts it short).
      :meth:`load_state` on a fresh stepper of the same settings makes every later step and reading equal, bit for bit,
      to those of the stepper the state was taken from.
    * :attr:`path` names the code that takes the steps; :meth:`close` releases what the stepper holds.
    """

    #: The code path that runs, recorded in results (:data:`~softmax_as_linear.registry.ENGINE_PATHS`, ``+graph``).
    path: str
    #: bool ``(S, nL, nA)``: a diverged run stops updating.
    alive: Tensor
    #: long ``(S, nL, nA)``: the step at which the run diverged, -1 while alive.
    diverged_at: Tensor

    def step(self) -> None:
        """One step of every live run on :func:`objective` (it draws its own batch), with :func:`stop_diverged`."""

    def batch_risk(self) -> Tensor:
        """``(S, nL, nA)`` risk R = MSE/2 of the batch the last step used, with the parameters after that step.
        Before the first step: the risk of batch 0 of the stream (see each stepper for which batch the first step
        then takes), read without moving the stream."""

    def held_out(self) -> tuple[Tensor, Tensor]:
        """``(S, nL, nA)`` held-out risk and the sample standard deviation of its per-prompt losses (standard
        error = sd / sqrt(n))."""

    def weights(self) -> dict[str, Tensor]:
        """The current parameters by name, each ``(S, nL, nA, ...)``."""

    def state(self) -> dict:
        """Everything needed to resume (see the class docstring): ``step``, ``alive``, ``diverged_at``,
        ``generators``, ``optimizer`` and the parameters."""

    def load_state(self, state: dict) -> None:
        """Resume from :meth:`state` (or a checkpoint holding it)."""

    def close(self) -> None:
        """Release what the stepper holds (a data thread)."""


def make_optimizer(sweep: SweepModel) -> torch.optim.Optimizer:
    """SGD or Adam (``cfg.optimizer``) on every parameter of the sweep at the sweep's learning rate."""
    cfg, params = sweep.cfg, list(sweep.params.values())
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr)
    return torch.optim.Adam(params, lr=cfg.lr, capturable=sweep.device.type == "cuda")


def stop_diverged(risk: Tensor, alive: Tensor, diverged_at: Tensor, step, threshold: float) -> None:
    """The one rule of divergence, in place: a live run whose batch risk ``risk`` ``(S, nL, nA)`` is not finite or
    exceeds ``threshold`` (``blowup`` times the zero predictor's risk) stops, and ``diverged_at`` records ``step``;
    a run already stopped keeps its step. The Triton SGD kernel (:mod:`~softmax_as_linear.engine.gpu.sgd`) applies the
    same rule to the risk it forms."""
    bad = ~torch.isfinite(risk) | (risk > threshold)
    diverged_at.copy_(torch.where(bad & alive, step, diverged_at))
    alive.logical_and_(~bad)


def objective(risk: Tensor, alive: Tensor) -> Tensor:
    """The one objective every stepper minimises: the mean squared error (``MSE = 2R``) of every live run, summed over
    runs (runs share no parameter, so each run's gradient is that of its own MSE). With SGD at learning rate ``lr``,
    step ``k`` is gradient-flow time ``2 lr k`` on ``R``."""
    return torch.where(alive, 2 * risk, torch.zeros_like(risk)).sum()


def sgd_update(sweep: SweepModel, optimizer: torch.optim.Optimizer, risk: Tensor, alive: Tensor, diverged_at: Tensor,
               step_count: Tensor, threshold: float) -> None:
    """Stop the runs that diverge on this batch (:func:`stop_diverged`; ``risk`` ``(S, nL, nA)``, with the autograd
    graph), take an optimiser step on :func:`objective`, count the step. A stopped run does not move: its gradient is
    zero, and under Adam, whose momentum would move it anyway, its parameters are put back after the step. Nothing in
    it waits for the device (it can be captured as a CUDA graph)."""
    stop_diverged(risk, alive, diverged_at, step_count, threshold)
    optimizer.zero_grad(set_to_none=False)
    objective(risk, alive).backward()
    momentum = not isinstance(optimizer, torch.optim.SGD)
    with torch.no_grad():
        before = {n: p.clone() for n, p in sweep.params.items()} if momentum else None
        for p in sweep.params.values():
            p.grad.masked_fill_(~_runs(alive, p), 0.0)
            p.grad.nan_to_num_(0.0)
    optimizer.step()
    if momentum:
        with torch.no_grad():
            for n, p in sweep.params.items():
                p.copy_(torch.where(_runs(alive, p), p, before[n]))
    step_count.add_(1)


def _runs(alive: Tensor, p: Tensor) -> Tensor:
    """``alive`` ``(S, nL, nA)`` shaped to broadcast against a parameter ``(S, nL, nA, ...)``."""
    return alive.view(*alive.shape, *([1] * (p.ndim - 3)))


def optimiser_state(sweep: SweepModel, optimizer: torch.optim.Optimizer, alive: Tensor, diverged_at: Tensor,
                    steps_taken: int) -> dict:
    """The part of :meth:`Stepper.state` every stepper shares: parameters, optimiser, bookkeeping, step (the
    host's count, so that reading the state does not wait for the device). Tensors are the stepper's own, not
    copies."""
    return {"params": {n: p.detach() for n, p in sweep.params.items()}, "optimizer": optimizer.state_dict(),
            "alive": alive, "diverged_at": diverged_at, "step": int(steps_taken)}


def load_optimiser_state(state: dict, sweep: SweepModel, optimizer: torch.optim.Optimizer, alive: Tensor,
                         diverged_at: Tensor, step_count: Tensor) -> None:
    """Inverse of :func:`optimiser_state`, in place."""
    with torch.no_grad():
        for n, p in sweep.params.items():
            p.copy_(state["params"][n])
    optimizer.load_state_dict(state["optimizer"])
    alive.copy_(state["alive"])
    diverged_at.copy_(state["diverged_at"])
    step_count.fill_(int(state["step"]))
