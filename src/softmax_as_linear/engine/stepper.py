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
zero predictor is *diverged* and stops updating. The steppers that draw each seed's prompts from a task on the host
(Chapter 7's :class:`~softmax_as_linear.engine.deep.DeepStepper`, Chapter 8's
:class:`~softmax_as_linear.engine.window_step.WindowStepper`) share their data streams, step, readings and state
(:class:`SeedStepper`).

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

import copy
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


class SeedStepper:
    """What the steppers that draw each seed's prompts from a task on the host share (Chapter 7's
    :class:`~softmax_as_linear.engine.deep.DeepStepper`, Chapter 8's
    :class:`~softmax_as_linear.engine.window_step.WindowStepper`): the data streams, the fixed held-out prompts, the
    step on :func:`objective` with :func:`stop_diverged` in which a stopped run does not move, the learning rate's
    decay, the batch risk, the state and its resumption. A subclass calls ``_start`` once its parameters exist,
    and says what they are (:meth:`parameters`), what a batch's per-prompt losses are (:meth:`losses`) and, where it
    has more of them, which gradients it cleans (``_clean_gradients``) and which entries never move
    (``_moves``)."""

    #: The step from which the learning rate is multiplied by ``decay_factor`` (None: never).
    decay_step: int | None = None
    decay_factor: float = 1.0

    def _start(self, task, seeds, max_length: int, batch_size: int, held_out_prompts: int, runs: tuple[int, ...],
               threshold: float) -> None:
        """The bookkeeping of ``runs`` ``(S, nL, nA)`` runs, each seed's ``"train"`` stream of batches of
        ``batch_size`` prompts of ``max_length`` tokens from ``task``, and its ``held_out_prompts`` fixed held-out
        prompts (stream ``"held_out"``); ``threshold``: the risk beyond which a run is diverged."""
        from ..core import seeding

        self.task, self.max_length, self.batch_size = task, int(max_length), int(batch_size)
        self.alive = torch.ones(*runs, dtype=torch.bool, device=self.device)
        self.diverged_at = torch.full(runs, -1, dtype=torch.long, device=self.device)
        self.step_count = 0
        self.threshold = threshold
        self.generators = [seeding.generator(seed, "train") for seed in seeds]
        self._held_out = self.prompts(held_out_prompts, [seeding.generator(seed, "held_out") for seed in seeds])
        self._last_batch = None

    # --------------------------------------------------------------------------------------------- data
    def _stack(self, batches) -> tuple[Tensor, ...]:
        """Per-seed batches -> tokens ``(S, B, L_max, D)``, query ``(S, B, D)``, target ``(S, B)`` on the device."""
        return tuple(torch.stack([getattr(b, name) for b in batches]).to(self.device, self.dtype)
                     for name in ("tokens", "query", "target"))

    def prompts(self, n: int, generators) -> tuple[Tensor, ...]:
        """``n`` prompts of the longest length from each of ``generators`` (one per seed), as the stepper reads a
        batch (``tokens`` ``(S, n, L_max, D)``, ``query`` ``(S, n, D)``, ``target`` ``(S, n)`` on its device), for
        :meth:`losses`: its batches, its held-out set, or a reading's fresh prompts. The generators move."""
        return self._stack([self.task.sample(n, self.max_length, g) for g in generators])

    def _draw(self, generators=None):
        return self.prompts(self.batch_size, generators or self.generators)

    # --------------------------------------------------------------------------------------------- model
    def parameters(self) -> dict[str, Tensor]:
        """The parameters by name (the stepper's own tensors, with their gradients)."""
        raise NotImplementedError

    def losses(self, tokens: Tensor, query: Tensor, target: Tensor) -> Tensor:
        """Per-prompt losses of every run, ``(S, nL, nA, B)``."""
        raise NotImplementedError

    def batch_losses(self, batch: tuple[Tensor, ...]) -> Tensor:
        """:meth:`losses` of a batch as the stepper draws it, with its weights: what a step, the batch risk and the
        held-out risk read."""
        return self.losses(*batch)

    def _clean_gradients(self) -> None:
        """Called before the optimiser's step, without autograd: what the gradients need (nothing by default)."""

    def _moves(self, name: str, p: Tensor) -> Tensor:
        """The entries of parameter ``name`` that the step may move, broadcast against it: those of the live runs."""
        return _runs(self.alive, p)

    def current_lr(self) -> float:
        """The learning rate of the next step: ``lr``, times ``decay_factor`` from step ``decay_step`` on."""
        decayed = self.decay_step is not None and self.step_count >= self.decay_step
        return self.lr * (self.decay_factor if decayed else 1.0)

    # --------------------------------------------------------------------------------------------- the interface
    def step(self) -> None:
        """One step of every live run on a fresh batch per seed at :meth:`current_lr`, on the engine's objective
        (:func:`objective`, the batch's ``MSE = 2R``) with its rule of divergence (:func:`stop_diverged`): a live run
        whose batch risk is not finite or exceeds the threshold stops and records this step in ``diverged_at``; a
        stopped run keeps its step and does not move (under Adam, whose momentum would move it, its parameters are
        put back after the optimiser's step)."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.current_lr()
        batch = self._draw()
        risk = self.batch_losses(batch).mean(-1)
        stop_diverged(risk, self.alive, self.diverged_at, self.step_count, self.threshold)
        params = self.parameters()
        before = {name: p.detach().clone() for name, p in params.items()}
        self.optimizer.zero_grad(set_to_none=False)
        objective(risk, self.alive).backward()
        with torch.no_grad():
            self._clean_gradients()
        self.optimizer.step()
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(torch.where(self._moves(name, p), p, before[name]))
        self.step_count += 1
        self._last_batch = batch

    def batch_risk(self) -> Tensor:
        """``(S, nL, nA)`` risk of the last step's batch with the parameters after that step; before the first step,
        of the batch the first step will draw (drawn from copies of the generators: a reading moves nothing)."""
        batch = self._last_batch
        if batch is None:
            batch = self._draw([torch.Generator().set_state(g.get_state()) for g in self.generators])
        with torch.no_grad():
            return self.batch_losses(batch).mean(-1)

    def held_out(self) -> tuple[Tensor, Tensor]:
        """``(S, nL, nA)`` risk on the fixed held-out prompts of each seed, and the sample sd of its per-prompt
        losses."""
        with torch.no_grad():
            losses = self.batch_losses(self._held_out).double()  # the mean and sd in float64, as the engine's records
        return losses.mean(-1), losses.std(-1)

    def weights(self) -> dict[str, Tensor]:
        """The parameters by name, detached copies."""
        return {name: p.detach().clone() for name, p in self.parameters().items()}

    def state(self) -> dict:
        """Everything needed to resume: parameters (by name), optimiser, data streams, step, alive, diverged_at."""
        return {**self.weights(), "optimizer": copy.deepcopy(self.optimizer.state_dict()),
                "generators": [g.get_state() for g in self.generators], "step": self.step_count,
                "alive": self.alive.clone(), "diverged_at": self.diverged_at.clone()}

    def load_state(self, state: dict) -> None:
        """Resume from :meth:`state` (or a checkpoint holding it)."""
        with torch.no_grad():
            for name, p in self.parameters().items():
                p.copy_(state[name])
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        for g, s in zip(self.generators, state["generators"]):
            g.set_state(s)
        self.step_count = int(state["step"])
        self.alive = state["alive"].clone()
        self.diverged_at = state["diverged_at"].clone()
        self._last_batch = None

    def close(self) -> None:
        """Nothing to release (the batches are drawn in turn)."""
