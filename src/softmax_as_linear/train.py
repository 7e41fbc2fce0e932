r"""The batched training engine: every run of a sweep trained together, in one computation per step.

A *sweep* (:class:`~softmax_as_linear.sweep.TrainConfig`) trains single-head attention on in-context
linear regression (the paper's Sections 5 and 6, Appendix A) for every
combination of prompt length ``L``, activation (``"softmax"``, ``"linear"``) and seed. All runs live
in stacked tensors of shape ``(S, nL, nA, ...)`` (seeds, lengths, activations) and one step updates
them all:

* **Paired runs.** Runs of one seed start from the same weights, whatever their ``L`` and
  activation, and see the same batches, as in the paper (seed fixed for both activations).
* **Prefix-shared prompts.** At each step every seed draws one batch of prompts of ``L_max`` tokens;
  the run of length ``L`` reads the first ``L`` tokens. Each run therefore sees exactly the i.i.d.
  prompts of its own length; runs of different ``L`` are positively correlated (common random
  numbers), which makes the *differences* between lengths less noisy, not biased.
* **Cheap linear attention.** Normalised linear attention only needs the prefix second moments
  :math:`M_L = \frac1L \sum_{i \le L} z_i z_i^\top` (one cumulative sum per batch, shared by all
  lengths): :math:`\hat y = v^\top M_L U z_q`.
* **Data on a spare core.** On a CPU with fewer compute threads than cores, the next batch is
  drawn on a second thread while the step computes (the same batches as drawing in turn).
* **Softmax by length buckets.** Scores of all softmax runs of similar length are one batched matrix
  product over the bucket's longest prefix, with the positions past each run's ``L`` masked. On a
  GPU, where arithmetic is cheap and kernel launches are not, all lengths form one bucket.
* **Softmax in one kernel on a GPU.** Where Triton is installed (PyTorch's CUDA builds bring it), the
  softmax runs of a bucket are one kernel in which each tile of a few runs reads the tokens once, up to
  its longest length, and never writes the scores (:mod:`~softmax_as_linear.fused_softmax`); elsewhere
  the two products above.
* **One graph per step on a GPU.** On CUDA the whole step (drawing the batch, forward, backward,
  divergence bookkeeping, optimiser) is captured once as a CUDA graph and replayed: the same
  kernels and random numbers as running it op by op, without launching some hundred kernels from
  Python at every step.

The objective is the paper's: mean squared error of the prediction (``MSE = 2R``). What is *recorded*
is the theory's risk :math:`R = \tfrac12 \mathrm{MSE}`, on the training batch and on a fixed held-out
set of prompts. With SGD at learning rate ``lr`` on the MSE, step ``k`` is gradient-flow time
:math:`t = 2\,\mathrm{lr}\,k` on :math:`R` (see :func:`~softmax_as_linear.dynamics.infinite_prompt_flow`).

A run whose risk becomes NaN, infinite or larger than ``blowup`` times the risk of predicting zero is
*diverged*: it stops updating, its later records are NaN, and :attr:`TrainResult.diverged` says so.
"""
from __future__ import annotations

import math
import os
import pathlib
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from . import _checks, fused_softmax, seeding
from .devices import resolve_device
from .icl import RegressionTask, block_init
from .models import AttentionModel, uv_from_weights
from .sweep import TrainConfig, TrainResult, load_checkpoint, save_checkpoint

__all__ = ["train", "TrainConfig", "TrainResult", "SweepModel", "SweepData", "make_step", "cuda_graphed",
           "held_out_risk", "SoftmaxPrediction"]


class SoftmaxPrediction(torch.autograd.Function):
    r"""Softmax-attention predictions of many runs on shared prompts, with their gradients formed in the forward pass.

    For run ``j`` of prompt ``b``: :math:`\hat y = \sum_i a_i c_i` with :math:`a = \operatorname{softmax}(z_i^\top u + m_i)`
    and :math:`c_i = v^\top z_i`. Its gradients are
    :math:`\partial \hat y / \partial v = \bar z = \sum_i a_i z_i` and
    :math:`\partial \hat y / \partial u = \sum_i a_i (c_i - \hat y) z_i = \sum_i a_i c_i z_i - \hat y \bar z`.
    With :math:`e_i = \exp(z_i^\top u + m_i - \max)`, two matrix products over the prompt give
    everything: ``[u; v]`` against the tokens (scores, values), then the tokens with a row of ones
    against ``[e; e * c]`` (:math:`\sum e_i z_i`, :math:`\sum e_i c_i z_i`, and the normalisers
    :math:`\sum e_i`, :math:`\sum e_i c_i` from the row of ones). The weights are never normalised
    over the prompt, and the backward pass touches no token.

    Token positions are the last axis (reductions over contiguous memory), and both products read
    the tokens in that one layout: a batched product with a transposed operand costs nothing extra.

    On a GPU the same sums come from one fused kernel (:mod:`~softmax_as_linear.fused_softmax`) that
    never writes the ``(N, n, L)`` scores.

    tokens_t ``(N, D + 1, L)``: the tokens as columns, then a row of ones; u and v ``(N, n, D)``;
    mask ``(n, L)`` (0, or -inf past a run's length) and lengths ``(n,)`` (the same, as run lengths)
    -> predictions ``(N, n)``.
    """

    @staticmethod
    def forward(ctx, tokens_t, u, v, mask, lengths):
        fused = fused_softmax.try_softmax_sums(tokens_t, u, v, lengths)
        if fused is not None:
            pred, mean_token, grad_u = fused
            if any(ctx.needs_input_grad):
                ctx.save_for_backward(grad_u, mean_token)
            return pred
        n, D = u.shape[1], u.shape[2]
        both = torch.cat([u, v], dim=1) @ tokens_t[:, :D]  # (N, 2n, L): scores, then values c_i
        e = both[:, :n].add_(mask)
        e.sub_(e.amax(-1, keepdim=True)).exp_()
        both[:, n:].mul_(e)  # e_i c_i
        sums = (tokens_t @ both.transpose(1, 2)).transpose(1, 2)  # (N, 2n, D + 1)
        norm = sums[:, :n, D:]  # sum e_i, (N, n, 1)
        pred = (sums[:, n:, D:] / norm).squeeze(-1)
        if any(ctx.needs_input_grad):
            mean_token = sums[:, :n, :D] / norm
            ctx.save_for_backward(sums[:, n:, :D] / norm - pred.unsqueeze(-1) * mean_token, mean_token)
        return pred

    @staticmethod
    def backward(ctx, grad):
        d_u, d_v = ctx.saved_tensors
        g = grad.unsqueeze(-1)
        return None, d_u * g, d_v * g, None, None


class SweepModel:
    """The batched model of a sweep: stacked parameters ``(S, nL, nA, ...)`` and the forward pass of every run at once.

    ``SweepModel(cfg, device, init_weights)`` builds the initial parameters of ``cfg`` (the
    ``"init"`` stream of :mod:`~softmax_as_linear.seeding`); :meth:`predict` and :meth:`risk` take a
    batch of :class:`SweepData`.
    """

    def __init__(self, cfg: TrainConfig, device: torch.device, init_weights: dict | None):
        self.cfg, self.device = cfg, device
        self.dtype = getattr(torch, cfg.dtype)
        self.task = cfg.task()
        self.shape = (len(cfg.seeds), len(cfg.lengths), len(cfg.activations))
        self.params = self._initial_params(init_weights)
        lengths = torch.tensor(cfg.lengths, device=device)
        self.length_divisor = lengths.to(self.dtype)[:, None, None]
        self.soft = cfg.activations.index("softmax") if "softmax" in cfg.activations else None
        self.lin = cfg.activations.index("linear") if "linear" in cfg.activations else None
        waste = 1.25 if device.type == "cpu" else math.inf
        # (slice of length indices, longest length): slices, because indexing by a list would copy it to the device
        self.buckets = [(slice(idx[0], idx[-1] + 1), cfg.lengths[idx[-1]]) for idx in _length_buckets(cfg.lengths, waste)]
        self.masks = [torch.where(torch.arange(Lb, device=device)[None, :] < lengths[sl][:, None], 0.0,
                                  float("-inf")).to(self.dtype) for sl, Lb in self.buckets]
        self.bucket_lengths = [lengths[sl].to(torch.int32) for sl, _ in self.buckets]
        self.zero_risk = self.task.zero_risk()

    def _initial_params(self, init_weights):
        cfg, S, D = self.cfg, len(self.cfg.seeds), self.cfg.D
        if cfg.init == "given":
            if not init_weights:
                raise ValueError("init_weights must be given when init == 'given'")
            names = ("U", "V") if cfg.parametrisation == "uv" else ("W_Q", "W_K", "W_V", "W_O")
            missing = [n for n in names if n not in init_weights]
            if missing:
                raise ValueError(f"init_weights lacks {missing} for parametrisation {cfg.parametrisation!r}")
            per_seed = {n: _checks.finite(f"init_weights[{n!r}]", torch.as_tensor(init_weights[n], dtype=torch.float64))
                        for n in names}
            for n, w in per_seed.items():
                expected = (1, D) if n == "W_O" else (D, D)
                if tuple(w.shape[-2:]) != expected:
                    raise ValueError(f"init_weights[{n!r}] must have shape {expected}, got {tuple(w.shape)}")
            per_seed = {n: w.expand(S, *w.shape[-2:]) if w.ndim == 2 else w for n, w in per_seed.items()}
        elif cfg.init == "block":
            U, V = block_init(self.task, cfg.alpha)
            per_seed = {"U": U.expand(S, D, D), "V": V.expand(S, D, D)}
        else:
            models = [AttentionModel(D, seed=seeding.stream_seed(seed, "init")) for seed in cfg.seeds]
            weights = {n: torch.stack([m.weights()[n].detach().double() for m in models]) * cfg.init_scale
                       for n in ("W_Q", "W_K", "W_V", "W_O")}
            if cfg.parametrisation == "uv":
                U, V = uv_from_weights(weights["W_Q"], weights["W_K"], weights["W_V"], weights["W_O"])
                per_seed = {"U": U, "V": V}
            else:
                per_seed = weights
        S_, nL, nA = S, len(cfg.lengths), len(cfg.activations)
        return {n: w[:, None, None].expand(S_, nL, nA, *w.shape[1:]).to(self.device, self.dtype).clone()
                .requires_grad_(True) for n, w in per_seed.items()}

    def uv(self) -> tuple[Tensor, Tensor]:
        """U ``(S, nL, nA, D, D)`` and the prediction row v ``(S, nL, nA, D)``."""
        p = self.params
        if "U" in p:
            return p["U"], p["V"][..., -1, :]
        U, V = uv_from_weights(p["W_Q"], p["W_K"], p["W_V"], p["W_O"])
        return U, V[..., -1, :]

    def predict(self, tokens: Tensor, query: Tensor) -> Tensor:
        """tokens ``(S, B, L_max, D)``, query ``(S, B, D)`` -> predictions ``(S, nL, nA, B)``."""
        U, v = self.uv()
        S, nL, nA = self.shape
        B, D = tokens.shape[1], tokens.shape[-1]
        u = torch.einsum("slaij,sbj->slabi", U, query)  # U z_q for every run and prompt
        out = tokens.new_zeros(S, nL, nA, B)
        columns = []
        flat_t = tokens.new_empty(S * B, D + 1, tokens.shape[2])  # tokens as columns, then a row of ones
        flat_t[:, :D] = tokens.reshape(S * B, -1, D).transpose(1, 2)
        flat_t[:, D] = 1.0
        if self.soft is not None:
            for (sl, Lb), mask, bucket_lengths in zip(self.buckets, self.masks, self.bucket_lengths):
                n = mask.shape[0]
                u_b = u[:, sl, self.soft].transpose(1, 2).reshape(S * B, n, D)
                v_b = v[:, None, sl, self.soft].expand(S, B, n, D).reshape(S * B, n, D)
                pred = SoftmaxPrediction.apply(flat_t[:, :, :Lb], u_b, v_b, mask, bucket_lengths)  # (S*B, n)
                columns.append((sl, self.soft, pred.reshape(S, B, n).transpose(1, 2)))
        if self.lin is not None:
            moments = _prefix_moments(flat_t[:, :D], self.cfg.lengths, self.length_divisor).reshape(S, B, nL, D, D)
            pred = torch.einsum("sld,sbldk,slbk->slb", v[:, :, self.lin], moments, u[:, :, self.lin])
            columns.append((slice(None), self.lin, pred))
        for idx, a, pred in columns:
            out[:, idx, a] = pred
        return out

    def risk(self, tokens: Tensor, query: Tensor, target: Tensor) -> Tensor:
        """Risk R = 1/2 MSE of every run, ``(S, nL, nA)``."""
        return 0.5 * ((self.predict(tokens, query) - target[:, None, None, :]) ** 2).mean(-1)


def _prefix_moments(tokens_t: Tensor, lengths: tuple[int, ...], divisor: Tensor) -> Tensor:
    r""":math:`M_L = \frac1L \sum_{i \le L} z_i z_i^\top` for every ``L``.

    tokens_t ``(N, D, L_max)``, divisor ``(nL, 1, 1)`` holding the lengths -> ``(N, nL, D, D)``: one
    batched product per segment between consecutive lengths, then a cumulative sum over segments.
    """
    bounds = (0, *lengths)
    segments = [tokens_t[:, :, a:b] for a, b in zip(bounds, bounds[1:])]
    sums = torch.stack([z @ z.transpose(1, 2) for z in segments], dim=1).cumsum(1)
    return sums / divisor


def _length_buckets(lengths: tuple[int, ...], waste: float = 1.25) -> list[list[int]]:
    """Group consecutive lengths while padding every group to its longest costs at most ``waste`` x."""
    buckets, current = [], []
    for i, L in enumerate(lengths):
        trial = current + [i]
        if current and L * len(trial) > waste * sum(lengths[j] for j in trial):
            buckets.append(current)
            trial = [i]
        current = trial
    buckets.append(current)
    return buckets


class SweepData:
    """Per-seed generators for training batches (stream ``"train"``) and the fixed held-out prompts
    (stream ``"held_out"``, :attr:`eval`), as tensors ``(S, B, L_max, D)``, ``(S, B, D)``, ``(S, B)``.
    Each seed's normal draws come from its own generator; the arithmetic that turns them into prompts
    is done once for all seeds (:meth:`~softmax_as_linear.icl.RegressionTask.sample_stacked`).

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
        return batch.tokens, batch.query, batch.target

    def batch(self):
        """Tokens ``(S, B, L_max, D)``, queries ``(S, B, D)``, targets ``(S, B)`` of the next step."""
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


def make_step(sweep: SweepModel, data: SweepData, optimizer: torch.optim.Optimizer, alive: Tensor, diverged_at: Tensor,
               step_count: Tensor) -> Callable[[], tuple[Tensor, Tensor, Tensor]]:
    """One optimisation step of every live run, as a function of the tensors it updates in place.

    It draws the batch, stops the runs that diverge on it (``alive``, ``diverged_at``: the value of
    ``step_count``), takes an optimiser step on the others, counts the step and returns the batch.
    Nothing in it waits for the device, so it can be captured as a CUDA graph.
    """
    params = list(sweep.params.values())
    threshold = sweep.cfg.blowup * sweep.zero_risk

    def step():
        tokens, query, target = data.batch()
        risk = sweep.risk(tokens, query, target)
        bad = ~torch.isfinite(risk) | (risk > threshold)
        diverged_at.copy_(torch.where(bad & alive, step_count, diverged_at))
        alive.logical_and_(~bad)
        loss = torch.where(alive, 2 * risk, torch.zeros_like(risk)).sum()  # MSE per run, summed over runs
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.grad.masked_fill_(~alive.view(*alive.shape, *([1] * (p.ndim - 3))), 0.0)
                p.grad.nan_to_num_(0.0)
        optimizer.step()
        step_count.add_(1)
        return tokens, query, target

    return step


def cuda_graphed(step: Callable, generators: list[torch.Generator], warmup: int = 3) -> Callable:
    """``step`` run eagerly ``warmup`` times on a side stream (so that every buffer exists), then
    captured once as a CUDA graph and replayed at every later call.

    Every call is a real step: capturing runs nothing, so the call that captures replays at once.
    The data generators are registered with the graph, so each replay draws what the eager step
    would have drawn and advances the generators as it would. Where capture fails (an old driver,
    say), a warning says so and the steps go on op by op.
    """
    calls, graph, out = 0, None, None
    side = torch.cuda.Stream()

    def run():
        nonlocal calls, graph, out
        if graph is False:
            return step()
        if graph is None and calls < warmup:
            calls += 1
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                result = step()
            torch.cuda.current_stream().wait_stream(side)
            return result
        if graph is None:
            try:
                graph = torch.cuda.CUDAGraph()
                for g in generators:
                    graph.register_generator_state(g)
                with torch.cuda.graph(graph):
                    out = step()
            except (RuntimeError, AttributeError) as error:
                warnings.warn(f"capturing the training step as a CUDA graph failed ({error}); going on op by op")
                graph = False
                return step()
        graph.replay()
        return out

    return run


def train(config: TrainConfig, *, init_weights: dict | None = None, device: str | torch.device = "auto",
          progress: bool = False, checkpoint: str | os.PathLike | None = None, checkpoint_every: int = 1000,
          checkpoint_seconds: float = 0.0, should_stop: Callable[[], bool] | None = None, cuda_graph: bool = True) -> TrainResult:
    """Train every run of ``config`` together and return their trajectories.

    Args:
        config: the sweep (see :class:`TrainConfig`).
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
    checkpoint_every = _checks.positive_int("checkpoint_every", checkpoint_every)
    checkpoint_seconds = _checks.positive_float("checkpoint_seconds", checkpoint_seconds, allow_zero=True)
    device = resolve_device(device)
    cfg = config
    sweep = SweepModel(cfg, device, init_weights)
    # With a core to spare (fewer compute threads than cores), the next batch is drawn on it during
    # the step; more threads than cores would slow both down.
    spare_core = (os.cpu_count() or 1) > torch.get_num_threads()
    data = SweepData(cfg, sweep.task, device, sweep.dtype, prefetch=device.type == "cpu" and spare_core)
    params = list(sweep.params.values())
    optimizer = (torch.optim.SGD(params, lr=cfg.lr) if cfg.optimizer == "sgd"
                 else torch.optim.Adam(params, lr=cfg.lr, capturable=device.type == "cuda"))
    records = cfg.record_steps()
    record_set = set(records)
    T = len(records)
    shape = sweep.shape
    train_risk = np.full((*shape, T), np.nan)
    eval_risk = np.full((*shape, T), np.nan)
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
        data.load_state([s.cpu() for s in state["generators"]])  # generator states live on the CPU
        alive.copy_(state["alive"])
        diverged_at.copy_(state["diverged_at"])
        train_risk, eval_risk, history = state["train_risk"], state["eval_risk"], state["history"]
        start_step, seconds = state["step"], state["seconds"]

    def save(step: int):
        if path is None:
            return
        state = {"config": cfg.as_dict(), "step": step, "seconds": seconds,
                 "params": {n: p.detach() for n, p in sweep.params.items()}, "optimizer": optimizer.state_dict(),
                 "generators": data.state(), "alive": alive, "diverged_at": diverged_at,
                 "train_risk": train_risk, "eval_risk": eval_risk, "history": history}
        save_checkpoint(path, state)

    def record(step: int, batch_risk: Tensor | None):
        k = records.index(step)
        dead = ~alive
        with torch.no_grad():
            if batch_risk is not None:
                train_risk[..., k] = batch_risk.masked_fill(dead, float("nan")).double().cpu().numpy()
            eval_risk[..., k] = held_out_risk(sweep, data.eval).masked_fill(dead, float("nan")).double().cpu().numpy()
            for n, p in sweep.params.items():
                value = p.detach().double().cpu().numpy().copy()
                value[dead.cpu().numpy()] = np.nan
                history[n][..., k, :, :] = value

    step_count = torch.tensor(start_step, device=device)
    take_step = make_step(sweep, data, optimizer, alive, diverged_at, step_count)
    if device.type == "cuda" and cuda_graph:
        take_step = cuda_graphed(take_step, data.generators)

    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=cfg.steps, initial=start_step, desc=f"training {int(np.prod(shape))} runs", unit="step")
    complete = True
    step = start_step
    clock = last_save = time.perf_counter()
    try:
        if step == 0 and 0 in records:
            tokens, query, target = data.batch()
            with torch.no_grad():
                first = sweep.risk(tokens, query, target)
            record(0, first)
        while step < cfg.steps:
            tokens, query, target = take_step()
            step += 1
            if bar is not None:
                bar.update(1)
            if step in record_set:
                with torch.no_grad():
                    record(step, sweep.risk(tokens, query, target))
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
        data.close()
        if bar is not None:
            bar.close()
    seconds += time.perf_counter() - clock
    save(step)
    kept = [k for k, s in enumerate(records) if s <= step]
    return TrainResult(cfg, np.array(records)[kept], train_risk[..., kept], eval_risk[..., kept],
                       {n: h[..., kept, :, :] for n, h in history.items()},
                       diverged_at.cpu().numpy(), seconds, complete)


def held_out_risk(sweep: SweepModel, held_out, chunk: int = 512) -> Tensor:
    """Risk ``(S, nL, nA)`` of every run on the held-out prompts ``(tokens, queries, targets)``, ``chunk`` prompts at a time."""
    tokens, query, target = held_out
    total = 0.0
    for start in range(0, tokens.shape[1], chunk):
        sl = slice(start, start + chunk)
        total = total + sweep.risk(tokens[:, sl], query[:, sl], target[:, sl]) * tokens[:, sl].shape[1]
    return total / tokens.shape[1]
