r"""The prompt kernel's host side: the training step on a GPU with the prompts drawn inside the kernel (Triton), no
batch tensor ever formed.

The kernels are in :mod:`~softmax_as_linear.engine.gpu.philox` (the draws),
:mod:`~softmax_as_linear.engine.gpu.attention_sums` (the prompt kernel) and :mod:`~softmax_as_linear.engine.gpu.sgd`.

One program per prompt (seed ``s``, prompt ``b``) draws its prompt from the counter-based stream of
:mod:`~softmax_as_linear.engine.gpu.counter_stream` (the same numbers, to float32 rounding: the GPU uses the
hardware sine and cosine) and forms what every run of that seed needs, all lengths and both activations:

* softmax, with :math:`e_i = \exp(z_i^\top u - m)` over the first ``L`` tokens: :math:`\hat y = \sum e_i c_i / \sum e_i`
  (:math:`c_i = v^\top z_i`), :math:`\partial\hat y/\partial v = \bar z = \sum e_i z_i / \sum e_i`,
  :math:`\partial\hat y/\partial u = \sum e_i c_i z_i / \sum e_i - \hat y \bar z`;
* normalised linear attention: :math:`\hat y = \tfrac1L \sum (z_i^\top u)(v^\top z_i)`,
  :math:`\partial\hat y/\partial v = \tfrac1L\sum (z_i^\top u) z_i`,
  :math:`\partial\hat y/\partial u = \tfrac1L\sum (v^\top z_i) z_i`;

with :math:`u = U z_q` formed in the kernel from the run's :math:`U` and the drawn query. It writes these
``1 + 2D`` numbers per (seed, run, prompt), and the query and target per prompt. A second kernel
(:meth:`PromptKernel.sgd_step`) turns them into the batch risk, the divergence bookkeeping, the gradients of
the four matrices and the SGD step, and a third, tiny one writes :math:`U` and :math:`v` for the next step;
elsewhere (Adam, the ``uv`` parametrisation) :class:`KernelPrediction` hands the sums to autograd. A forward-only mode
gives the predictions alone, for the held-out risks: the held-out prompts are drawn again at every record.

How the work is laid out. A program first draws its prompt, two positions per lane, into a scratch row of
its own (``D x L_max`` floats, about 24 kB, read back through the cache: the prompts never go through a
tensor of the batch). Then it takes the lengths in tiles of a few (``per_tile``) and walks each tile's
positions once: between two consecutive lengths of a tile only the runs still active are updated, and only
the block that holds a length is masked, so no run works past its length. Each lane keeps its own partial
sums (no reduction in the loop); they are summed over lanes once per tile. The softmax maximum is not
followed token by token: ``m`` is the largest score of the first block, and a lane-wise record of how far
later scores exceed it triggers a second pass of the tile from the true maximum only where ``exp`` could
overflow (a score 64 binary orders above ``m``), so sharp attention stays exact and ordinary attention pays
one comparison per token. Nothing is accumulated with atomics: a step is the same bits run after run.

The step counter is read from a device tensor, so a captured CUDA graph replays step after step, and a run
resumed at step ``k`` draws step ``k``'s batch. The kernels run on CUDA float32 tensors where Triton is
installed; with ``TRITON_INTERPRET=1`` set before import they run on the CPU (how the tests check them).
"""

from __future__ import annotations

import math
import os

import torch
from torch import Tensor

from ...core import checks, seeding
from ...registry import COVARIATES
from ..moments import Moments
from . import counter_stream as reference

try:
    import triton

    from .attention_sums import _prompt_kernel
    from .sgd import _sgd_kernel, _uv_kernel
except ImportError:  # a CPU build of PyTorch
    triton = None

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
#: False: ``rng="auto"`` means torch's generators everywhere (environment ``SOFTMAX_AS_LINEAR_PROMPT_KERNEL=0``);
#: ``rng="philox"`` then draws the stream as tensors (:class:`~softmax_as_linear.engine.data.CounterData`).
ENABLED = os.environ.get("SOFTMAX_AS_LINEAR_PROMPT_KERNEL", "1") != "0"
#: The kernel's code of each covariate law (its index in :data:`~softmax_as_linear.registry.COVARIATES`).
COVARIATE_CODES = {name: code for code, name in enumerate(COVARIATES)}


def _structure(F: Tensor) -> int:
    """0: identity, 1: lower triangular, 2: full."""
    if torch.equal(F, torch.eye(F.shape[0], dtype=F.dtype)):
        return 0
    return 1 if bool((torch.triu(F, 1) == 0).all()) else 2


def tile_table(lengths, per_tile: int) -> list[list[int]]:
    """Length indices in tiles of ``per_tile``, from the longest down; a short tile is padded with -1 in front."""
    index = list(range(len(lengths)))
    tiles = []
    while index:
        tile, index = index[-per_tile:], index[:-per_tile]
        tiles.append([-1] * (per_tile - len(tile)) + tile)
    return tiles


class PromptKernel:
    """The kernels of one sweep: its task, lengths and activations fixed; stream keys per call.

    ``cfg`` a :class:`~softmax_as_linear.engine.sweep.TrainConfig`, ``covariates`` the covariate law (default the
    config's). ``per_tile`` / ``per_tile_eval``: lengths per tile in the training (gradients) and forward-only modes;
    ``pairs``: token pairs per block (a GPU lane each); ``warps``: warps per program.
    """

    def __init__(self, cfg, device, covariates: str | None = None, per_tile: int | None = None,
                 per_tile_eval: int | None = None,
                 pairs: int | None = None, warps: int = 1, fast: bool | None = None, max_programs: int = 8192,
                 task=None, max_registers: int | None = 192, max_registers_eval: int | None = 168):
        covariates = checks.one_of("covariates", cfg.covariates if covariates is None else covariates, COVARIATES)
        self.cfg, self.device, self.covariates = cfg, torch.device(device), covariates
        task = cfg.task() if task is None else task
        self.task = task
        self.d, self.D = cfg.d, cfg.D
        F, Fq = reference.task_factors(task)
        self.structure, self.query_structure = _structure(F), _structure(Fq)
        self.F = F.to(self.device, torch.float32).contiguous()
        self.Fq = Fq.to(self.device, torch.float32).contiguous()
        self.tau, self.noise_sd = math.sqrt(task.task_var), math.sqrt(task.noise_var)
        self.S, self.nL, self.nA = len(cfg.seeds), len(cfg.lengths), len(cfg.models)
        self.L_max = max(cfg.lengths)
        self.Q_max = (self.L_max + 1) // 2
        self.lengths = torch.tensor(cfg.lengths, dtype=torch.int32, device=self.device)
        self.per_tile = per_tile or 2
        self.per_tile_eval = per_tile_eval or 3
        self.tiles = torch.tensor(tile_table(cfg.lengths, self.per_tile), dtype=torch.int32, device=self.device)
        self.tiles_eval = torch.tensor(tile_table(cfg.lengths, self.per_tile_eval), dtype=torch.int32,
                                       device=self.device)
        self.warps = warps
        # registers per thread: 192 keeps 10 one-warp programs per SM (a ten-seed step in one wave on an H100)
        # without spills; the forward-only mode needs fewer
        self.max_registers, self.max_registers_eval = max_registers, max_registers_eval
        self.pairs = pairs or (8 if INTERPRETED else 32 * warps)  # interpreted: small blocks, fast tests
        self.fast = (not INTERPRETED) if fast is None else fast
        self.soft = cfg.models.index("softmax") if "softmax" in cfg.models else -1
        self.lin = cfg.models.index("linear") if "linear" in cfg.models else -1
        self.max_programs = max_programs
        self._buffers = {}
        self.zero_step = torch.zeros((), dtype=torch.int64, device=self.device)

    def keys(self, stream: str, L: int | None = None) -> Tensor:
        """The stream seeds ``(S,)`` int64 of the sweep's seeds: the Philox keys."""
        return torch.tensor([seeding.stream_seed(s, stream, L) for s in self.cfg.seeds], dtype=torch.int64,
                            device=self.device)

    def _buffer(self, name, shape, dtype=torch.float32):
        buf = self._buffers.get(name)
        if buf is None or tuple(buf.shape) != tuple(shape):
            buf = self._buffers[name] = torch.empty(shape, dtype=dtype, device=self.device)
        return buf

    def _launch(self, U, v, alive, keys, step, offset, n_prompts, first_prompt, grad: bool, tag: str):
        S, D = self.S, self.D
        nout = 1 + 2 * D if grad else 1
        out = self._buffer(f"out_{tag}", (S, self.nL, self.nA, nout, n_prompts))
        query = self._buffer(f"query_{tag}", (S, D, n_prompts))
        target = self._buffer(f"target_{tag}", (S, n_prompts))
        blocks = -(-self.Q_max // self.pairs)
        scratch = self._buffer(f"scratch_{tag}", (S * n_prompts, blocks, D, 2, self.pairs))
        tiles = self.tiles if grad else self.tiles_eval
        _prompt_kernel[(S * n_prompts,)](
            U, v, alive, self.lengths, tiles, keys, step, offset, self.F, self.Fq, self.tau, self.noise_sd,
            out, query, target, scratch, self.nL, tiles.shape[0], n_prompts, first_prompt, self.Q_max,
            D=D, NC=reference.calls_per_pair(D), COVARIATES=COVARIATE_CODES[self.covariates], STRUCT=self.structure,
            STRUCT_Q=self.query_structure, NA=self.nA, SOFT=self.soft, LIN=self.lin, LPT=tiles.shape[1],
            QB=self.pairs, GRAD=grad, FAST=self.fast, num_warps=self.warps,
            maxnreg=self.max_registers if grad else self.max_registers_eval)
        return out, query, target

    def grad_sums(self, U: Tensor, v: Tensor, alive: Tensor, keys: Tensor, step: Tensor, offset: int = 0):
        """The batch of step ``step + offset`` (``step`` an int64 device scalar): per (seed, length, activation,
        output, prompt) ``out (S, nL, nA, 1 + 2D, B)``: prediction, d/du, d/dv; queries ``(S, D, B)``; targets
        ``(S, B)``.
        U ``(S, nL, nA, D, D)``, v ``(S, nL, nA, D)`` float32 contiguous, alive ``(S, nL, nA)`` bool."""
        return self._launch(U, v, alive, keys, step, offset, self.cfg.batch_size, 0, True, "train")

    def predictions(self, U: Tensor, v: Tensor, alive: Tensor, keys: Tensor, n_prompts: int, step: Tensor | None = None,
                    offset: int = 0):
        """Forward only, prompts ``0 .. n_prompts - 1`` in chunks: yields
        ``(first, pred (S, nL, nA, n), target (S, n))``."""
        step = self.zero_step if step is None else step
        launches = -(-n_prompts * self.S // self.max_programs)  # at most max_programs programs (scratch rows) each
        chunk = -(-n_prompts // launches)
        for first in range(0, n_prompts, chunk):
            n = min(chunk, n_prompts - first)
            out, _, target = self._launch(U, v, alive, keys, step, offset, n, first, False, f"eval{n}")
            yield first, out[:, :, :, 0], target

    def risk_moments(self, U, v, alive, keys, n_prompts: int, step: Tensor | None = None, offset: int = 0):
        """Per run ``(S, nL, nA)``: the mean and the sample standard deviation (float64,
        :class:`~softmax_as_linear.engine.moments.Moments`) of the per-prompt losses ``(yhat - y)^2 / 2``."""
        moments = Moments()
        for _, pred, target in self.predictions(U, v, alive, keys, n_prompts, step, offset):
            moments.add(0.5 * (pred - target[:, None, None, :]) ** 2)
        return moments.mean, moments.sd

    def uv(self, params: dict, U: Tensor, v: Tensor):
        """Write U ``(S, nL, nA, D, D)`` and v ``(S, nL, nA, D)`` of the four matrices into ``U`` and ``v``: the one
        computation of them, after every SGD step and on resumption alike (so a resumed run replays the
        uninterrupted one bit for bit)."""
        D = self.D
        _uv_kernel[(self.S * self.nL * self.nA,)](params["W_Q"], params["W_K"], params["W_V"], params["W_O"], U, v,
                                                  1.0 / math.sqrt(D), D=D, DP=triton.next_power_of_2(D), num_warps=4)

    def sgd_step(self, out, query, target, params: dict, U: Tensor, v: Tensor, alive: Tensor, diverged_at: Tensor,
                 risk: Tensor, step: Tensor, lr: float, threshold: float):
        """Risk, divergence bookkeeping, gradients of the four matrices, SGD step (in place), next U and v."""
        D = self.D
        n_runs = self.S * self.nL * self.nA
        _sgd_kernel[(n_runs,)](out, query, target, params["W_Q"], params["W_K"], params["W_V"], params["W_O"],
                               alive, diverged_at, risk, step, out.shape[-1], self.nL * self.nA, lr, threshold,
                               1.0 / math.sqrt(D), D=D, DP=triton.next_power_of_2(D),
                               BB=min(128, triton.next_power_of_2(out.shape[-1])), num_warps=4)
        self.uv(params, U, v)


def available(device, dtype=torch.float32) -> bool:
    """Whether the kernels run here: Triton present, float32, and a CUDA device (or Triton interpreted)."""
    device = torch.device(device)
    return ENABLED and triton is not None and dtype == torch.float32 and (device.type == "cuda" or INTERPRETED)


class KernelPrediction(torch.autograd.Function):
    """Predictions ``(S, nL, nA, B)`` and targets ``(S, B)`` of the batch at ``step`` from the kernel, as a function
    of U ``(S, nL, nA, D, D)`` and v ``(S, nL, nA, D)``; the backward pass forms dL/dU and dL/dv from the sums
    the forward pass wrote (no token is read again)."""

    @staticmethod
    def forward(ctx, U, v, kernel, alive, keys, step):
        """The kernel's predictions ``(S, nL, nA, B)`` and targets ``(S, B)``; keeps the sums for the backward pass."""
        out, query, target = kernel.grad_sums(U.detach().contiguous(), v.detach().contiguous(), alive, keys, step)
        ctx.save_for_backward(out, query)
        ctx.D = kernel.D
        return out[:, :, :, 0].clone(), target.clone()

    @staticmethod
    def backward(ctx, grad, _):
        """dL/dU and dL/dv from the kept sums and ``grad``, the gradient of the predictions."""
        out, query = ctx.saved_tensors
        D = ctx.D
        grad_U = torch.einsum("slab,slaib,sjb->slaij", grad, out[:, :, :, 1:1 + D], query)
        grad_v = torch.einsum("slab,slaib->slai", grad, out[:, :, :, 1 + D:])
        return grad_U, grad_v, None, None, None, None
