r"""The training loop of a sweep: every run trained together, one computation per step.

A *sweep* (:class:`~softmax_as_linear.engine.sweep.TrainConfig`) trains single-head attention on
in-context linear regression (the paper's Sections 5 and 6, Appendix A) for every combination of prompt
length ``L``, activation (``"softmax"``, ``"linear"``) and seed; :func:`train` is plain SGD (or Adam)
on all of them at once:

* **Paired runs.** Runs of one seed start from the same weights, whatever their ``L`` and
  activation, and see the same batches, as in the paper (seed fixed for both activations).
* **Prefix-shared prompts.** At each step every seed draws one batch of prompts of ``L_max`` tokens
  (:mod:`~softmax_as_linear.engine.data`); the run of length ``L`` reads the first ``L`` tokens. Each run
  therefore sees exactly the i.i.d. prompts of its own length; runs of different ``L`` are positively
  correlated (common random numbers), which makes the *differences* between lengths less noisy, not biased.
* **All runs in one forward pass** (:mod:`~softmax_as_linear.engine.batched`).
* **Data on a spare core.** On a CPU with fewer compute threads than cores, the next batch is
  drawn on a second thread while the step computes (the same batches as drawing in turn).
* **One graph per step on a GPU** (:mod:`~softmax_as_linear.engine.cuda_graph`).
* **Prompts drawn inside the kernel on a GPU.** With ``rng="philox"`` (the default on CUDA) the prompts come
  from a counter-based stream, drawn inside the kernel that also forms every run's prediction and gradient
  sums (:mod:`~softmax_as_linear.engine.prompt_kernel`); a second kernel does the rest of the SGD step. Batch
  ``k`` is a function of the step ``k``: the record at step 0 reads batch 0 without taking it, and a resumed
  run draws exactly the batches of the uninterrupted one. Elsewhere the same stream is drawn as tensors
  (:class:`~softmax_as_linear.engine.data.CounterData`) for the tensor formulas.

The objective is the paper's: mean squared error of the prediction (``MSE = 2R``). What is *recorded*
is the theory's risk :math:`R = \tfrac12 \mathrm{MSE}`, on the training batch and on a fixed held-out
set of prompts (with the standard deviation of the per-prompt losses, so that its standard error is
measured, not assumed). With SGD at learning rate ``lr`` on the MSE, step ``k`` is gradient-flow time
:math:`t = 2\,\mathrm{lr}\,k` on :math:`R` (see :func:`~softmax_as_linear.theory.flow.infinite_prompt_flow`).

A run whose risk becomes NaN, infinite or larger than ``blowup`` times the risk of predicting zero is
*diverged*: it stops updating, its later records are NaN, and :attr:`TrainResult.diverged` says so.
"""
from __future__ import annotations

import os
import pathlib
import time
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from ..core import checks
from ..core.devices import resolve_device
from ..registry import LIMIT_MODELS
from . import prompt_kernel
from .batched import SweepModel
from .cuda_graph import cuda_graphed
from .data import CounterData, SweepData
from .sweep import TrainConfig, TrainResult, load_checkpoint, save_checkpoint


def resolved(config: TrainConfig, device) -> TrainConfig:
    """``config`` with ``rng="auto"`` replaced by the stream it means on ``device``: ``"philox"`` where the
    prompt kernel runs (CUDA with Triton, float32) and no infinite-prompt model is trained, ``"torch"`` elsewhere."""
    if config.rng != "auto":
        return config
    kernel = prompt_kernel.available(resolve_device(device), getattr(torch, config.dtype))
    limit = set(config.activations) & set(LIMIT_MODELS)
    return config.replace(rng="philox" if kernel and not limit else "torch")


class KernelStep:
    """The training step of ``rng="philox"`` where the prompt kernel runs, and the risks a record needs.

    SGD on the four matrices in float32 (the paper's setting) is two kernels: the prompt kernel's sums, then
    :meth:`~softmax_as_linear.engine.prompt_kernel.PromptKernel.sgd_step`, which also keeps :math:`U` and
    :math:`v` for the next step. Other settings (Adam, the ``uv`` parametrisation) hand the sums to autograd
    (:class:`~softmax_as_linear.engine.prompt_kernel.KernelPrediction`) and take the engine's own bookkeeping.
    Calling it takes one step; nothing in it waits for the device, so it can be captured as a CUDA graph.
    """

    def __init__(self, sweep: SweepModel, optimizer: torch.optim.Optimizer, alive: Tensor, diverged_at: Tensor,
                 step_count: Tensor, **kernel_options):
        cfg = sweep.cfg
        self.sweep, self.optimizer, self.alive, self.diverged_at, self.step_count = (
            sweep, optimizer, alive, diverged_at, step_count)
        self.kernel = prompt_kernel.PromptKernel(cfg, sweep.device, law=cfg.law, **kernel_options)
        self.keys, self.held_out_keys = self.kernel.keys("train"), self.kernel.keys("held_out")
        self.threshold = cfg.blowup * sweep.zero_risk
        self.fused = cfg.optimizer == "sgd" and cfg.parametrisation == "four_matrix" and cfg.dtype == "float32"
        if self.fused:
            self.weights = {n: p.detach() for n, p in sweep.params.items()}
            S, nL, nA = sweep.shape
            self.U = torch.empty(S, nL, nA, cfg.D, cfg.D, device=sweep.device)
            self.v = torch.empty(S, nL, nA, cfg.D, device=sweep.device)
            self.risk = torch.zeros(sweep.shape, device=sweep.device)
            self.kernel.uv(self.weights, self.U, self.v)

    def __call__(self):
        if self.fused:
            out, query, target = self.kernel.grad_sums(self.U, self.v, self.alive, self.keys, self.step_count)
            self.kernel.sgd_step(out, query, target, self.weights, self.U, self.v, self.alive, self.diverged_at,
                                 self.risk, self.step_count, self.sweep.cfg.lr, self.threshold)
            self.step_count.add_(1)
            return
        U, v = self.sweep.uv()
        pred, target = prompt_kernel.KernelPrediction.apply(U, v, self.kernel, self.alive, self.keys, self.step_count)
        risk = 0.5 * ((pred - target[:, None, None, :]) ** 2).mean(-1)
        _update(self.sweep, self.optimizer, risk, self.alive, self.diverged_at, self.step_count, self.threshold)

    def _uv(self):
        if self.fused:
            return self.U, self.v
        with torch.no_grad():
            U, v = self.sweep.uv()
            return U.contiguous(), v.contiguous()

    def batch_risk(self, offset: int) -> Tensor:
        """Risk ``(S, nL, nA)`` of the current parameters on the batch of step ``step_count + offset``."""
        U, v = self._uv()
        mean, _ = self.kernel.risk_moments(U, v, torch.ones_like(self.alive), self.keys, self.sweep.cfg.batch_size,
                                           self.step_count, offset)
        return mean

    def held_out(self) -> tuple[Tensor, Tensor]:
        """The held-out risk ``(S, nL, nA)`` and the standard deviation of its per-prompt losses, like
        :func:`held_out_risk`; the held-out prompts are drawn again inside the kernel."""
        U, v = self._uv()
        n = self.sweep.cfg.eval_prompts
        mean, squares = self.kernel.risk_moments(U, v, torch.ones_like(self.alive), self.held_out_keys, n)
        return mean, ((squares - n * mean**2).clamp_min(0) / max(n - 1, 1)).sqrt()


def _update(sweep: SweepModel, optimizer, risk: Tensor, alive: Tensor, diverged_at: Tensor, step_count: Tensor,
            threshold: float):
    """Stop the runs that diverge on this batch, take an optimiser step on the others, count the step."""
    bad = ~torch.isfinite(risk) | (risk > threshold)
    diverged_at.copy_(torch.where(bad & alive, step_count, diverged_at))
    alive.logical_and_(~bad)
    loss = torch.where(alive, 2 * risk, torch.zeros_like(risk)).sum()  # MSE per run, summed over runs
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    with torch.no_grad():
        for p in sweep.params.values():
            p.grad.masked_fill_(~alive.view(*alive.shape, *([1] * (p.ndim - 3))), 0.0)
            p.grad.nan_to_num_(0.0)
    optimizer.step()
    step_count.add_(1)


def make_step(sweep: SweepModel, data: SweepData, optimizer: torch.optim.Optimizer, alive: Tensor, diverged_at: Tensor,
               step_count: Tensor) -> Callable[[], tuple[Tensor, Tensor, Tensor]]:
    """One optimisation step of every live run, as a function of the tensors it updates in place.

    It draws the batch, stops the runs that diverge on it (``alive``, ``diverged_at``: the value of
    ``step_count``), takes an optimiser step on the others, counts the step and returns the batch.
    Nothing in it waits for the device, so it can be captured as a CUDA graph.
    """
    threshold = sweep.cfg.blowup * sweep.zero_risk

    def step():
        batch = data.batch()  # tokens, queries, targets, tasks (and, on a CPU, what sweep.prepare made of the tokens)
        _update(sweep, optimizer, sweep.risk(*batch), alive, diverged_at, step_count, threshold)
        return batch

    return step


def train(config: TrainConfig, *, init_weights: dict | None = None, device: str | torch.device = "auto",
          progress: bool = False, checkpoint: str | os.PathLike | None = None, checkpoint_every: int = 1000,
          checkpoint_seconds: float = 0.0, should_stop: Callable[[], bool] | None = None, cuda_graph: bool = True) -> TrainResult:
    """Train every run of ``config`` together and return their trajectories.

    Args:
        config: the sweep (see :class:`TrainConfig`); ``rng="auto"`` is resolved for ``device``
            (:func:`resolved`) and the result's config says which stream was used.
        init_weights: with ``config.init == "given"``, a dict of ``(D, D)`` tensors (``W_O`` is ``(1, D)``),
            or ``(S, D, D)`` for one per seed: ``W_Q, W_K, W_V, W_O`` or ``U, V``.
        device: ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda"``.
        progress: show a progress bar.
        checkpoint: file to resume from and to save to every ``checkpoint_every`` steps (atomically),
            and when interrupted. A finished run leaves its final state there.
        checkpoint_seconds: skip the periodic saves until this much training time has passed since
            the last one (0: every ``checkpoint_every`` steps).
        should_stop: called at every record step; returning True ends training early (the result is
            then marked incomplete).
        cuda_graph: on CUDA, replay each step as a captured graph (the same computation, launched
            at once); False runs it op by op. Ignored on a CPU.
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    checkpoint_every = checks.positive_int("checkpoint_every", checkpoint_every)
    checkpoint_seconds = checks.positive_float("checkpoint_seconds", checkpoint_seconds, allow_zero=True)
    device = resolve_device(device)
    cfg = resolved(config, device)
    sweep = SweepModel(cfg, device, init_weights)
    in_kernel = cfg.rng == "philox" and prompt_kernel.available(device, sweep.dtype)
    if in_kernel:
        data = None  # drawn inside the kernel
    elif cfg.rng == "philox":
        data = CounterData(cfg, sweep.task, device, sweep.dtype)
    else:
        # With a core to spare (fewer compute threads than cores), the next batch is drawn on it during
        # the step; more threads than cores would slow both down. On a CPU that thread also forms the
        # batch's column layout and prefix moments (sweep.prepare).
        spare_core = (os.cpu_count() or 1) > torch.get_num_threads()
        data = SweepData(cfg, sweep.task, device, sweep.dtype, prefetch=device.type == "cpu" and spare_core,
                         prepare=sweep.prepare if device.type == "cpu" else None)
    params = list(sweep.params.values())
    optimizer = (torch.optim.SGD(params, lr=cfg.lr) if cfg.optimizer == "sgd"
                 else torch.optim.Adam(params, lr=cfg.lr, capturable=device.type == "cuda"))
    records = cfg.record_steps()
    record_set = set(records)
    T = len(records)
    shape = sweep.shape
    train_risk = np.full((*shape, T), np.nan)
    eval_risk = np.full((*shape, T), np.nan)
    eval_sd = np.full((*shape, T), np.nan)
    history = {n: np.full((*shape, T, *p.shape[3:]), np.nan) for n, p in sweep.params.items()}
    alive = torch.ones(shape, dtype=torch.bool, device=device)
    diverged_at = torch.full(shape, -1, dtype=torch.long, device=device)
    start_step, seconds = 0, 0.0

    path = pathlib.Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        state = load_checkpoint(path, cfg, device)
        with torch.no_grad():
            for n, p in sweep.params.items():
                p.copy_(state["params"][n])
        optimizer.load_state_dict(state["optimizer"])
        if data is not None:
            data.load_state(state["generators"])
        alive.copy_(state["alive"])
        diverged_at.copy_(state["diverged_at"])
        train_risk, eval_risk, history = state["train_risk"], state["eval_risk"], state["history"]
        eval_sd = state.get("eval_sd", np.full_like(eval_risk, np.nan))  # checkpoints before 0.2 lack it
        start_step, seconds = state["step"], state["seconds"]

    def save(step: int):
        if path is None:
            return
        state = {"config": cfg.as_dict(), "step": step, "seconds": seconds,
                 "params": {n: p.detach() for n, p in sweep.params.items()}, "optimizer": optimizer.state_dict(),
                 "generators": [] if data is None else data.state(), "alive": alive, "diverged_at": diverged_at,
                 "train_risk": train_risk, "eval_risk": eval_risk, "eval_sd": eval_sd, "history": history}
        save_checkpoint(path, state)

    def record(step: int, batch_risk: Tensor | None):
        k = records.index(step)
        dead = ~alive
        with torch.no_grad():
            if batch_risk is not None:
                train_risk[..., k] = batch_risk.masked_fill(dead, float("nan")).double().cpu().numpy()
            mean, sd = held_out_risk(sweep, data.eval) if data is not None else take_step_kernel.held_out()
            eval_risk[..., k] = mean.masked_fill(dead, float("nan")).double().cpu().numpy()
            eval_sd[..., k] = sd.masked_fill(dead, float("nan")).double().cpu().numpy()
            for n, p in sweep.params.items():
                value = p.detach().double().cpu().numpy().copy()
                value[dead.cpu().numpy()] = np.nan
                history[n][..., k, :, :] = value

    step_count = torch.tensor(start_step, device=device)
    if in_kernel:
        take_step = take_step_kernel = KernelStep(sweep, optimizer, alive, diverged_at, step_count)
    else:
        take_step = make_step(sweep, data, optimizer, alive, diverged_at, step_count)
    if device.type == "cuda" and cuda_graph:
        take_step = cuda_graphed(take_step, [] if data is None else data.generators)

    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=cfg.steps, initial=start_step, desc=f"training {int(np.prod(shape))} runs", unit="step")
    complete = True
    step = start_step
    clock = last_save = time.perf_counter()
    try:
        if step == 0 and 0 in records:
            if in_kernel:
                first = take_step_kernel.batch_risk(0)
            else:  # torch's generators: the record takes batch 0 (as every earlier result file did); the
                # counter-based stream reads it without taking it (step k uses batch k)
                batch = data.peek() if cfg.rng == "philox" else data.batch()
                with torch.no_grad():
                    first = sweep.risk(*batch)
            record(0, first)
        while step < cfg.steps:
            batch = take_step()
            step += 1
            if bar is not None:
                bar.update(1)
            if step in record_set:
                with torch.no_grad():
                    # the risk of the batch just used, with the parameters after the update
                    record(step, take_step_kernel.batch_risk(-1) if in_kernel else sweep.risk(*batch))
                if bar is not None:
                    bar.set_postfix(diverged=int((~alive).sum()))
                if should_stop is not None and step < cfg.steps and should_stop():
                    complete = False
                    break
            if (step % checkpoint_every == 0 and step < cfg.steps
                    and time.perf_counter() - last_save >= checkpoint_seconds):
                seconds += time.perf_counter() - clock
                clock = last_save = time.perf_counter()
                save(step)
    except KeyboardInterrupt:
        seconds += time.perf_counter() - clock
        save(step)
        raise
    finally:
        if data is not None:
            data.close()
        if bar is not None:
            bar.close()
    seconds += time.perf_counter() - clock
    save(step)
    kept = [k for k, s in enumerate(records) if s <= step]
    return TrainResult(cfg, np.array(records)[kept], train_risk[..., kept], eval_risk[..., kept],
                       {n: h[..., kept, :, :] for n, h in history.items()},
                       diverged_at.cpu().numpy(), seconds, complete, eval_sd[..., kept])


def held_out_risk(sweep: SweepModel, held_out, chunk: int = 512) -> tuple[Tensor, Tensor]:
    """Risk ``(S, nL, nA)`` of every run on the held-out prompts ``(tokens, queries, targets, tasks)``, and the sample
    standard deviation ``(S, nL, nA)`` of its per-prompt losses (the risk's standard error is ``sd / sqrt(n)``),
    ``chunk`` prompts at a time (sums in float64)."""
    tokens, query, target, w = held_out
    n = tokens.shape[1]
    total, squares = 0.0, 0.0
    for start in range(0, n, chunk):
        sl = slice(start, start + chunk)
        losses = sweep.losses(tokens[:, sl], query[:, sl], target[:, sl], None if w is None else w[:, sl]).double()
        total = total + losses.sum(-1)
        squares = squares + (losses**2).sum(-1)
    mean = total / n
    sd = ((squares - n * mean**2).clamp_min(0) / max(n - 1, 1)).sqrt()
    return mean, sd
