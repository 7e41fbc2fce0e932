r"""Softmax attention of many runs over shared prompts in one fused GPU kernel (Triton), for the training step.

:class:`~softmax_as_linear.engine.batched.SoftmaxPrediction` needs, for every prompt ``b`` and run ``j`` with
score vector :math:`u` and value row :math:`v` attending to the first :math:`L_j` tokens,

.. math::
    a_i = \operatorname{softmax}_{i \le L_j}(z_i^\top u), \quad c_i = v^\top z_i, \quad
    \hat y = \sum_i a_i c_i, \\ \bar z = \sum_i a_i z_i, \quad
    \partial \hat y / \partial u = \sum_i a_i c_i z_i - \hat y\, \bar z .

Computed with tensor operations, this writes and reads a ``(prompts, runs, L)`` score tensor several
times. :func:`softmax_sums` does it in one pass over the tokens: one program per prompt and tile of a
few consecutive runs loads each block of token positions once, up to the tile's longest length only,
forms the scores and values of its runs from it, and keeps running sums with an online maximum (the
sums are rescaled when the maximum grows), so nothing of size ``L`` is ever written. With the token
dimension a handful, the products over it are plain sums, not matrix-unit products (which would pad
it to 16). Its speed against the tensor formulas is measured in
``benchmarks/README.md``.

It runs on CUDA float32 tensors when Triton is installed (it comes with PyTorch's CUDA builds);
:func:`available` says whether it applies. With ``TRITON_INTERPRET=1`` set before import, Triton
runs the same kernel on the CPU, which is how the tests check it against the tensor formulas.
"""
from __future__ import annotations

import os

import torch
from torch import Tensor

from . import fallback

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU build of PyTorch: the tensor formulas are used instead
    triton = None

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
BLOCK = 64  # token positions per iteration of the kernel (interpreted; on a GPU it is timed)
TILE = 4  # runs per program (interpreted; on a GPU it is timed)
#: False: the tensor formulas everywhere (the benchmark's baseline; environment ``SOFTMAX_AS_LINEAR_FUSED=0``).
ENABLED = os.environ.get("SOFTMAX_AS_LINEAR_FUSED", "1") != "0"
#: Calls that ran the kernel in this process (what :attr:`~softmax_as_linear.engine.stepper.Stepper.path` reads).
LAUNCHES = 0


def available(tokens_t: Tensor) -> bool:
    """Whether :func:`softmax_sums` runs for these tokens: enabled, Triton present, float32, and a CUDA
    device (or any device when Triton runs interpreted)."""
    return (ENABLED and triton is not None and tokens_t.dtype == torch.float32
            and (tokens_t.is_cuda or INTERPRETED))


if triton is not None:

    def _kernel(tokens_ptr, u_ptr, v_ptr, lengths_ptr, pred_ptr, mean_ptr, grad_u_ptr, n_runs, n_positions,
                stride_tb, stride_td, stride_tl, D: tl.constexpr, DIM: tl.constexpr, RUNS: tl.constexpr,
                BLOCK: tl.constexpr):
        b = tl.program_id(0)  # the prompt
        runs = tl.program_id(1) * RUNS + tl.arange(0, RUNS)  # this program's tile of runs
        dims = tl.arange(0, DIM)
        run_ok = runs < n_runs
        dim_ok = dims < D
        # u, v: (N, n_runs, D) contiguous, zero-padded to (RUNS, DIM)
        rd = b * n_runs * D + runs[:, None] * D + dims[None, :]
        rd_ok = run_ok[:, None] & dim_ok[None, :]
        u = tl.load(u_ptr + rd, mask=rd_ok, other=0.0)
        v = tl.load(v_ptr + rd, mask=rd_ok, other=0.0)
        lengths = tl.load(lengths_ptr + runs, mask=run_ok, other=0)
        longest = tl.minimum(tl.max(lengths, axis=0), n_positions)  # the tile reads no token past it

        top = tl.full((RUNS,), -1e30, tl.float32)  # running maximum of the scores
        norm = tl.zeros((RUNS,), tl.float32)  # sum e_i
        value = tl.zeros((RUNS,), tl.float32)  # sum e_i c_i
        token_sum = tl.zeros((RUNS, DIM), tl.float32)  # sum e_i z_i
        weighted_sum = tl.zeros((RUNS, DIM), tl.float32)  # sum e_i c_i z_i
        for start in range(0, longest, BLOCK):
            positions = start + tl.arange(0, BLOCK)
            z = tl.load(tokens_ptr + b * stride_tb + dims[:, None] * stride_td + positions[None, :] * stride_tl,
                        mask=dim_ok[:, None] & (positions[None, :] < longest), other=0.0)  # (DIM, BLOCK)
            # D is a handful: products summed over a small axis, no padding to a matrix unit's tile
            scores = tl.sum(u[:, :, None] * z[None, :, :], axis=1)  # (RUNS, BLOCK)
            values = tl.sum(v[:, :, None] * z[None, :, :], axis=1)
            inside = positions[None, :] < lengths[:, None]
            scores = tl.where(inside, scores, -1e30)
            new_top = tl.maximum(top, tl.max(scores, axis=1))
            rescale = tl.exp(top - new_top)
            e = tl.where(inside, tl.exp(scores - new_top[:, None]), 0.0)
            ec = e * values
            norm = norm * rescale + tl.sum(e, axis=1)
            value = value * rescale + tl.sum(ec, axis=1)
            token_sum = token_sum * rescale[:, None] + tl.sum(e[:, None, :] * z[None, :, :], axis=2)
            weighted_sum = weighted_sum * rescale[:, None] + tl.sum(ec[:, None, :] * z[None, :, :], axis=2)
            top = new_top
        norm = tl.where(run_ok, norm, 1.0)  # padding runs attend to nothing
        pred = value / norm
        mean = token_sum / norm[:, None]
        grad_u = weighted_sum / norm[:, None] - pred[:, None] * mean
        tl.store(pred_ptr + b * n_runs + runs, pred, mask=run_ok)
        tl.store(mean_ptr + rd, mean, mask=rd_ok)
        tl.store(grad_u_ptr + rd, grad_u, mask=rd_ok)

    if INTERPRETED:
        _softmax_sums_kernel = triton.jit(_kernel)
        _CONFIGS = None
    else:  # tile size, block and warps chosen by timing a few on the first call for each shape
        _CONFIGS = [triton.Config({"RUNS": runs, "BLOCK": block}, num_warps=warps)
                    for runs, block, warps in ((4, 64, 2), (4, 64, 4), (4, 128, 4), (8, 64, 4), (2, 64, 1),
                                               (2, 128, 2))]
        _softmax_sums_kernel = triton.autotune(_CONFIGS, key=["n_runs", "n_positions"])(triton.jit(_kernel))


def softmax_sums(tokens_t: Tensor, u: Tensor, v: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Predictions of many softmax-attention runs on shared prompts and the sums their gradients need.

    tokens_t ``(N, >= D, L)``: the tokens as columns (rows past ``D`` are ignored); u, v ``(N, n, D)``;
    lengths ``(n,)`` integers, run ``j`` attending to positions ``< lengths[j]`` (each at least 1)
    -> predictions :math:`\hat y` ``(N, n)``, mean tokens :math:`\bar z` ``(N, n, D)`` and
    :math:`\partial \hat y / \partial u` ``(N, n, D)``. Needs :func:`available`.

    Runs are taken in tiles of a few consecutive ones, each tile reading the tokens up to its longest
    length only: with increasing lengths (a sweep's), short runs cost little.
    """
    N, n, D = u.shape
    u, v = u.contiguous(), v.contiguous()
    lengths = lengths.to(device=u.device, dtype=torch.int32).contiguous()
    pred = u.new_empty(N, n)
    mean, grad_u = u.new_empty(N, n, D), u.new_empty(N, n, D)
    args = (tokens_t, u, v, lengths, pred, mean, grad_u, n, tokens_t.shape[-1],
            tokens_t.stride(0), tokens_t.stride(1), tokens_t.stride(2))
    dim = triton.next_power_of_2(D)
    if _CONFIGS is None:
        _softmax_sums_kernel[(N, triton.cdiv(n, TILE))](*args, D=D, DIM=dim, RUNS=TILE, BLOCK=BLOCK)
    else:
        _softmax_sums_kernel[lambda meta: (N, triton.cdiv(n, meta["RUNS"]))](*args, D=D, DIM=dim)
    return pred, mean, grad_u


def try_softmax_sums(tokens_t: Tensor, u: Tensor, v: Tensor, lengths: Tensor):
    """:func:`softmax_sums` where :func:`available`, else ``None`` (the caller uses the tensor formulas).

    Where the kernel cannot be compiled or launched on this GPU (:mod:`~softmax_as_linear.engine.gpu.fallback`), a
    warning says so once and the kernel is switched off (``None`` from then on), or, in strict mode, it raises.
    Any other exception is a bug and is raised. :data:`LAUNCHES` counts the calls that ran the kernel."""
    global ENABLED, LAUNCHES
    if not available(tokens_t):
        return None
    try:
        out = softmax_sums(tokens_t, u, v, lengths)
    except Exception as error:
        if not (isinstance(error, fallback.kernel_unavailable_errors()) or fallback.is_driver_error(error)):
            raise
        fallback.fall_back("the fused softmax kernel", error, "going on with the tensor formulas")
        ENABLED = False
        return None
    LAUNCHES += 1
    return out
