r"""The training step on a GPU with the prompts drawn inside the kernel (Triton): no batch tensor is ever formed.

One program per prompt (seed ``s``, prompt ``b``) draws its prompt from the counter-based stream of
:mod:`~softmax_as_linear.engine.counter_stream` (the same numbers, to float32 rounding: the GPU uses the
hardware sine and cosine) and forms what every run of that seed needs, all lengths and both activations:

* softmax, with :math:`e_i = \exp(z_i^\top u - m)` over the first ``L`` tokens: :math:`\hat y = \sum e_i c_i / \sum e_i`
  (:math:`c_i = v^\top z_i`), :math:`\partial\hat y/\partial v = \bar z = \sum e_i z_i / \sum e_i`,
  :math:`\partial\hat y/\partial u = \sum e_i c_i z_i / \sum e_i - \hat y \bar z`;
* normalised linear attention: :math:`\hat y = \tfrac1L \sum (z_i^\top u)(v^\top z_i)`,
  :math:`\partial\hat y/\partial v = \tfrac1L\sum (z_i^\top u) z_i`, :math:`\partial\hat y/\partial u = \tfrac1L\sum (v^\top z_i) z_i`;

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

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # a CPU build of PyTorch
    triton = None

from ..core import seeding
from . import counter_stream as reference

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
#: False: ``rng="auto"`` means torch's generators everywhere (environment ``SOFTMAX_AS_LINEAR_PROMPT_KERNEL=0``);
#: ``rng="philox"`` then draws the stream as tensors (:class:`~softmax_as_linear.engine.data.CounterData`).
ENABLED = os.environ.get("SOFTMAX_AS_LINEAR_PROMPT_KERNEL", "1") != "0"
LAW_CODES = {"gaussian": 0, "uniform": 1, "rademacher": 2}
LOG2E = 1.4426950408889634
OVERFLOW = 64.0  # binary orders a score may exceed the reference maximum before the tile is redone
FLOAT_MAX = 3.4028234663852886e38


if triton is not None:
    OVERFLOW_C = tl.constexpr(OVERFLOW)
    FLOAT_MAX_C = tl.constexpr(FLOAT_MAX)
    LOG2E_C = tl.constexpr(LOG2E)

    @triton.jit
    def _box_muller(r0, r1, FAST: tl.constexpr):
        """Triton's pair_uniform_to_normal; on a GPU with the hardware sine and cosine."""
        u1 = tl.maximum(1.0e-7, tl.uint_to_uniform_float(r0))
        th = 6.283185307179586 * tl.uint_to_uniform_float(r1)
        radius = tl.sqrt(-2.0 * tl.log(u1))
        if FAST:
            c = libdevice.fast_cosf(th)
            s = libdevice.fast_sinf(th)
        else:
            c = tl.cos(th)
            s = tl.sin(th)
        return radius * c, radius * s

    @triton.jit
    def _words(key, c0, c1, c2, c3, NC: tl.constexpr):
        """The 4 NC words of Philox calls at counters (c0 + k, c1, c2, c3), k < NC."""
        out = ()
        for k in tl.static_range(NC):
            r0, r1, r2, r3 = tl.philox(key, c0 + k, c1, c2, c3)
            out = out + (r0, r1, r2, r3)
        return out

    @triton.jit
    def _normals(words, FIRST: tl.constexpr, COUNT: tl.constexpr, FAST: tl.constexpr):
        """Box-Muller normals of word pairs FIRST .. FIRST + COUNT - 1 (2 COUNT values)."""
        out = ()
        for m in tl.static_range(FIRST, FIRST + COUNT):
            a, b = _box_muller(words[2 * m], words[2 * m + 1], FAST)
            out = out + (a, b)
        return out

    @triton.jit
    def _covariates(words, normals, FIRST: tl.constexpr, COUNT: tl.constexpr, LAW: tl.constexpr):
        """Covariates of words FIRST .. FIRST + COUNT - 1 under the law (normals: all 2D Gaussians, LAW 0 only)."""
        out = ()
        for j in tl.static_range(COUNT):
            if LAW == 0:
                out = out + (normals[FIRST + j],)
            elif LAW == 1:
                out = out + (tl.uint_to_uniform_float(words[FIRST + j]) * 3.4641016151377544 - 1.7320508075688772,)
            else:
                out = out + (tl.where(words[FIRST + j].to(tl.int32, bitcast=True) < 0, -1.0, 1.0),)
        return out

    @triton.jit
    def _apply(F, xi, STRUCT: tl.constexpr, d: tl.constexpr):
        """x = F xi (STRUCT 0: F = I, 1: lower triangular, 2: full); F a tuple of d*d scalars, row-major."""
        out = ()
        for i in tl.static_range(d):
            if STRUCT == 0:
                out = out + (xi[i],)
            else:
                acc = F[i * d] * xi[0]
                for j in tl.static_range(1, d):
                    if STRUCT == 2 or j <= i:
                        acc = acc + F[i * d + j] * xi[j]
                out = out + (acc,)
        return out

    @triton.jit
    def _label(a, xi, noise_sd, eps, d: tl.constexpr):
        """y = a . xi + s eps, with a = F^T w."""
        y = noise_sd * eps
        for j in tl.static_range(d):
            y = y + a[j] * xi[j]
        return y

    @triton.jit
    def _transpose_apply(F, w, STRUCT: tl.constexpr, d: tl.constexpr):
        """a = F^T w (scalars)."""
        out = ()
        for j in tl.static_range(d):
            if STRUCT == 0:
                out = out + (w[j],)
            else:
                acc = F[j] * w[0]
                for i in tl.static_range(1, d):
                    if STRUCT == 2 or j <= i:
                        acc = acc + F[i * d + j] * w[i]
                out = out + (acc,)
        return out

    @triton.jit
    def _dot(vec, K: tl.constexpr, z, D: tl.constexpr):
        """sum_c vec[K * D + c] z[c] (vec: scalars, z: a tuple of D tensors)."""
        acc = vec[K * D] * z[0]
        for c in tl.static_range(1, D):
            acc = acc + vec[K * D + c] * z[c]
        return acc

    @triton.jit
    def _slot_params(U_ptr, v_ptr, alive_ptr, run_base, rows, zq, scale, A: tl.constexpr, NA: tl.constexpr,
                     LPT: tl.constexpr, D: tl.constexpr):
        """u = scale * U zq and v of activation A for the tile's slots (zeros for empty slots and dead runs)."""
        us = ()
        vs = ()
        for k in tl.static_range(LPT):
            run = (run_base + tl.maximum(rows[k], 0)) * NA + A
            live = (tl.load(alive_ptr + run) != 0) & (rows[k] >= 0)
            for i in tl.static_range(D):
                acc = tl.load(U_ptr + run * D * D + i * D) * zq[0]
                for j in tl.static_range(1, D - 1):  # the query's last entry is 0
                    acc = acc + tl.load(U_ptr + run * D * D + i * D + j) * zq[j]
                # where, not a product: a dead run's parameters may be NaN
                us = us + (tl.where(live, acc * scale, 0.0),)
                vs = vs + (tl.where(live, tl.load(v_ptr + run * D + i), 0.0),)
        return us, vs

    @triton.jit
    def _zeros(N: tl.constexpr, QB: tl.constexpr):
        out = ()
        for _ in tl.static_range(N):
            out = out + (tl.zeros((QB,), tl.float32),)
        return out

    @triton.jit
    def _full(N: tl.constexpr, QB: tl.constexpr, value: tl.constexpr):
        out = ()
        for _ in tl.static_range(N):
            out = out + (tl.full((QB,), value, tl.float32),)
        return out

    @triton.jit
    def _block(row, blk, lanes, first_pass, Ls, us, vs, ul, vl, top, s_norm, s_val, s_exc, s_tok, s_wt, l_u, l_v,
               SEG: tl.constexpr, MASKED: tl.constexpr, D: tl.constexpr, QB: tl.constexpr, LPT: tl.constexpr,
               SOFT: tl.constexpr, LIN: tl.constexpr, GRAD: tl.constexpr):
        """One block of 2 QB positions (a pair per lane) for the slots SEG .. LPT - 1 still active; MASKED: the block
        holds a length, positions past each slot's length are dropped."""
        BLOCK_SIZE: tl.constexpr = 2 * D * QB
        pos_a = 2 * (blk * QB + lanes)
        pos_b = pos_a + 1
        cell = row + blk * BLOCK_SIZE
        z_a = ()
        z_b = ()
        for c in tl.static_range(D):
            z_a = z_a + (tl.load(cell + (2 * c) * QB),)
            z_b = z_b + (tl.load(cell + (2 * c + 1) * QB),)
        init = (blk == 0) & first_pass
        n_top = ()
        n_norm = ()
        n_val = ()
        n_exc = ()
        n_tok = ()
        n_wt = ()
        n_lu = ()
        n_lv = ()
        for k in tl.static_range(LPT):
            m_a = pos_a < Ls[k]
            m_b = pos_b < Ls[k]
            if SOFT >= 0:
                mk = top[k]
                if k >= SEG:
                    sc_a = _dot(us, k, z_a, D)
                    sc_b = _dot(us, k, z_b, D)
                    if init:  # the reference maximum: the first block's largest score
                        mk = tl.maximum(tl.max(tl.where(m_a, sc_a, float("-inf")), 0),
                                        tl.max(tl.where(m_b, sc_b, float("-inf")), 0))
                    if MASKED:
                        x_a = tl.where(m_a, sc_a - mk, float("-inf"))
                        x_b = tl.where(m_b, sc_b - mk, float("-inf"))
                    else:
                        x_a = sc_a - mk
                        x_b = sc_b - mk
                    e_a = tl.exp2(x_a)
                    e_b = tl.exp2(x_b)
                    ec_a = e_a * _dot(vs, k, z_a, D)
                    ec_b = e_b * _dot(vs, k, z_b, D)
                    n_exc = n_exc + (tl.maximum(s_exc[k], tl.maximum(x_a, x_b)),)
                    n_norm = n_norm + (s_norm[k] + e_a + e_b,)
                    n_val = n_val + (s_val[k] + ec_a + ec_b,)
                    if GRAD:
                        for c in tl.static_range(D):
                            n_tok = n_tok + (s_tok[k * D + c] + e_a * z_a[c] + e_b * z_b[c],)
                            n_wt = n_wt + (s_wt[k * D + c] + ec_a * z_a[c] + ec_b * z_b[c],)
                else:
                    n_exc = n_exc + (s_exc[k],)
                    n_norm = n_norm + (s_norm[k],)
                    n_val = n_val + (s_val[k],)
                    if GRAD:
                        for c in tl.static_range(D):
                            n_tok = n_tok + (s_tok[k * D + c],)
                            n_wt = n_wt + (s_wt[k * D + c],)
                n_top = n_top + (mk,)
            if LIN >= 0:
                if k >= SEG:
                    p_a = _dot(ul, k, z_a, D)
                    p_b = _dot(ul, k, z_b, D)
                    if MASKED:
                        p_a = tl.where(m_a, p_a, 0.0)
                        p_b = tl.where(m_b, p_b, 0.0)
                    if GRAD:
                        c_a = _dot(vl, k, z_a, D)
                        c_b = _dot(vl, k, z_b, D)
                        if MASKED:
                            c_a = tl.where(m_a, c_a, 0.0)
                            c_b = tl.where(m_b, c_b, 0.0)
                        for c in tl.static_range(D):
                            n_lu = n_lu + (l_u[k * D + c] + p_a * z_a[c] + p_b * z_b[c],)
                            n_lv = n_lv + (l_v[k * D + c] + c_a * z_a[c] + c_b * z_b[c],)
                    else:
                        n_lu = n_lu + (l_u[k] + p_a * _dot(vl, k, z_a, D) + p_b * _dot(vl, k, z_b, D),)
                else:
                    if GRAD:
                        for c in tl.static_range(D):
                            n_lu = n_lu + (l_u[k * D + c],)
                            n_lv = n_lv + (l_v[k * D + c],)
                    else:
                        n_lu = n_lu + (l_u[k],)
        if SOFT < 0:
            n_top = top
            n_norm = s_norm
            n_val = s_val
            n_exc = s_exc
            n_tok = s_tok
            n_wt = s_wt
        if LIN < 0:
            n_lu = l_u
            n_lv = l_v
        return n_top, n_norm, n_val, n_exc, n_tok, n_wt, n_lu, n_lv

    # sizes are not specialised on: one compilation serves every batch, chunk and step
    @triton.jit(do_not_specialize=["step_offset", "nL", "n_tiles", "n_prompts", "first_prompt", "Q_max"])
    def _prompt_kernel(U_ptr, v_ptr, alive_ptr, lengths_ptr, tiles_ptr, keys_ptr, step_ptr, step_offset,
                       F_ptr, Fq_ptr, tau, noise_sd, out_ptr, query_ptr, target_ptr, scratch_ptr,
                       nL, n_tiles, n_prompts, first_prompt, Q_max,
                       D: tl.constexpr, NC: tl.constexpr, LAW: tl.constexpr, STRUCT: tl.constexpr,
                       STRUCT_Q: tl.constexpr, NA: tl.constexpr, SOFT: tl.constexpr, LIN: tl.constexpr,
                       LPT: tl.constexpr, QB: tl.constexpr, GRAD: tl.constexpr, FAST: tl.constexpr):
        d: tl.constexpr = D - 1
        NOUT: tl.constexpr = 1 + 2 * D if GRAD else 1
        pid = tl.program_id(0)
        s = pid // n_prompts
        j = pid % n_prompts  # column of this launch's outputs
        key = tl.load(keys_ptr + s)
        step = tl.load(step_ptr) + step_offset
        c1 = (first_prompt + j).to(tl.uint32)
        c2 = (step & 0xFFFFFFFF).to(tl.uint32)
        c3 = (step >> 32).to(tl.uint32)
        c3_head = ((step >> 32) | 0x80000000).to(tl.uint32)

        F = ()
        Fq = ()
        for n in tl.static_range(d * d):
            if STRUCT != 0:
                F = F + (tl.load(F_ptr + n),)
            if STRUCT_Q != 0:
                Fq = Fq + (tl.load(Fq_ptr + n),)

        # header: w, query noise and query input
        head = _words(key, c1 * 0, c1, c2, c3_head, NC)
        if LAW == 0:
            g = _normals(head, 0, D, FAST)
        else:
            g = _normals(head, 0, d // 2 + 1, FAST)
        w = ()
        for i in tl.static_range(d):
            w = w + (tau * g[i],)
        xi_q = _covariates(head, g, d + 1, d, LAW)
        x_q = _apply(Fq, xi_q, STRUCT_Q, d)
        y_q = _label(_transpose_apply(Fq, w, STRUCT_Q, d), xi_q, noise_sd, g[d], d)
        zq = x_q + (0.0,)
        for c in tl.static_range(D):
            tl.store(query_ptr + (s * D + c) * n_prompts + j, zq[c])
        tl.store(target_ptr + s * n_prompts + j, y_q)
        a = _transpose_apply(F, w, STRUCT, d)

        # phase 1: the tokens, a pair of positions (2q, 2q + 1) per lane, into this program's scratch row
        # scratch row: blocks of QB pairs, each (D, 2, QB): offsets within a block are compile-time constants
        BLOCK_SIZE: tl.constexpr = 2 * D * QB
        n_blocks = tl.cdiv(Q_max, QB)
        lanes = tl.arange(0, QB)
        row = scratch_ptr + pid.to(tl.int64) * n_blocks * BLOCK_SIZE + lanes
        for blk in range(0, n_blocks):  # whole blocks: phase 2 reads past Q_max only where its masks drop the values
            q = blk * QB + lanes
            words = _words(key, (q * NC).to(tl.uint32), c1, c2, c3, NC)
            if LAW == 0:
                normals = _normals(words, 0, D, FAST)
                eps_a = normals[2 * d]
                eps_b = normals[2 * d + 1]
            else:
                normals = _normals(words, d, 1, FAST)
                eps_a = normals[0]
                eps_b = normals[1]
            xi_a = _covariates(words, normals, 0, d, LAW)
            xi_b = _covariates(words, normals, d, d, LAW)
            z_a = _apply(F, xi_a, STRUCT, d) + (_label(a, xi_a, noise_sd, eps_a, d),)
            z_b = _apply(F, xi_b, STRUCT, d) + (_label(a, xi_b, noise_sd, eps_b, d),)
            cell = row + blk * BLOCK_SIZE
            for c in tl.static_range(D):
                tl.store(cell + (2 * c) * QB, z_a[c])
                tl.store(cell + (2 * c + 1) * QB, z_b[c])
        tl.debug_barrier()  # phase 2 lanes read positions other lanes wrote

        # phase 2: tiles of LPT lengths; within a tile, segments between consecutive lengths
        for t in range(n_tiles):
            rows = ()
            Ls = ()
            for k in tl.static_range(LPT):
                li = tl.load(tiles_ptr + t * LPT + k)
                rows = rows + (li,)
                Ls = Ls + (tl.where(li >= 0, tl.load(lengths_ptr + tl.maximum(li, 0)), 0),)
            run_base = s * nL
            us = ()
            vs = ()
            ul = ()
            vl = ()
            if SOFT >= 0:
                us, vs = _slot_params(U_ptr, v_ptr, alive_ptr, run_base, rows, zq, LOG2E_C, SOFT, NA, LPT, D)
            if LIN >= 0:
                ul, vl = _slot_params(U_ptr, v_ptr, alive_ptr, run_base, rows, zq, 1.0, LIN, NA, LPT, D)
            top = ()
            for k in tl.static_range(LPT):
                top = top + (0.0,)
            again = True
            first_pass = True
            # per lane partial sums: softmax (norm, value, excess, token sums D, weighted sums D),
            # linear (GRAD: S_u D, S_v D; else the prediction's sum)
            s_norm = _zeros(LPT, QB)
            s_val = _zeros(LPT, QB)
            s_exc = _full(LPT, QB, float("-inf"))
            s_tok = _zeros(LPT * D if GRAD else 0, QB)
            s_wt = _zeros(LPT * D if GRAD else 0, QB)
            l_u = _zeros(LPT * D if GRAD else LPT, QB)
            l_v = _zeros(LPT * D if GRAD else 0, QB)
            # a second pass only where a score outgrew the first block's maximum; two always suffice (the
            # second pass starts from the true maximum). A for loop: scf.while with this many values trips
            # Triton 3.6-3.8's layout pass.
            for _pass in range(2):
                if again:
                    s_norm = _zeros(LPT, QB)
                    s_val = _zeros(LPT, QB)
                    s_exc = _full(LPT, QB, float("-inf"))
                    s_tok = _zeros(LPT * D if GRAD else 0, QB)
                    s_wt = _zeros(LPT * D if GRAD else 0, QB)
                    l_u = _zeros(LPT * D if GRAD else LPT, QB)
                    l_v = _zeros(LPT * D if GRAD else 0, QB)
                    for seg in tl.static_range(LPT):
                        if seg == 0:
                            b0 = 0
                        else:
                            b0 = tl.cdiv(Ls[seg - 1], 2 * QB)
                        b1 = tl.cdiv(Ls[seg], 2 * QB)
                        # blocks below Ls[seg] (so below every length still active): no masks
                        for blk in range(b0, b1 - 1):
                            top, s_norm, s_val, s_exc, s_tok, s_wt, l_u, l_v = _block(
                                row, blk, lanes, first_pass, Ls, us, vs, ul, vl, top, s_norm, s_val, s_exc, s_tok, s_wt,
                                l_u, l_v, seg, False, D, QB, LPT, SOFT, LIN, GRAD)
                        # the block that holds Ls[seg], if any
                        for blk in range(tl.maximum(b0, b1 - 1), b1):
                            top, s_norm, s_val, s_exc, s_tok, s_wt, l_u, l_v = _block(
                                row, blk, lanes, first_pass, Ls, us, vs, ul, vl, top, s_norm, s_val, s_exc, s_tok, s_wt,
                                l_u, l_v, seg, True, D, QB, LPT, SOFT, LIN, GRAD)
                    # a second pass where a score outgrew the reference maximum enough to overflow exp
                    again = False
                    if SOFT >= 0:
                        every = s_exc[0]
                        for k in tl.static_range(1, LPT):
                            every = tl.maximum(every, s_exc[k])
                        if tl.max(every, 0) > OVERFLOW_C:  # rare: one reduction per slot only then
                            n_top = ()
                            for k in tl.static_range(LPT):
                                worst = tl.max(s_exc[k], 0)
                                n_top = n_top + (tl.where(worst > OVERFLOW_C, top[k] + worst, top[k]),)
                            top = n_top
                            again = True
                    first_pass = False

            # this tile's outputs
            for k in tl.static_range(LPT):
                ok = rows[k] >= 0
                L = tl.maximum(Ls[k], 1).to(tl.float32)
                if SOFT >= 0:
                    run = (run_base + tl.maximum(rows[k], 0)) * NA + SOFT
                    base = out_ptr + run * NOUT * n_prompts + j
                    norm = tl.where(ok, tl.sum(s_norm[k], 0), 1.0)
                    pred = tl.sum(s_val[k], 0) / norm
                    tl.store(base, pred, mask=ok)
                    if GRAD:
                        for c in tl.static_range(D):
                            mean = tl.sum(s_tok[k * D + c], 0) / norm
                            tl.store(base + (1 + c) * n_prompts, tl.sum(s_wt[k * D + c], 0) / norm - pred * mean,
                                     mask=ok)
                            tl.store(base + (1 + D + c) * n_prompts, mean, mask=ok)
                if LIN >= 0:
                    run = (run_base + tl.maximum(rows[k], 0)) * NA + LIN
                    base = out_ptr + run * NOUT * n_prompts + j
                    if GRAD:
                        pred = 0.0
                        for c in tl.static_range(D):
                            su = tl.sum(l_u[k * D + c], 0) / L
                            pred = pred + vl[k * D + c] * su
                            tl.store(base + (1 + c) * n_prompts, tl.sum(l_v[k * D + c], 0) / L, mask=ok)
                            tl.store(base + (1 + D + c) * n_prompts, su, mask=ok)
                        tl.store(base, pred, mask=ok)
                    else:
                        tl.store(base, tl.sum(l_u[k], 0) / L, mask=ok)

    @triton.jit
    def _nan_to_num(x):
        x = tl.where(x != x, 0.0, x)
        return tl.minimum(tl.maximum(x, -FLOAT_MAX_C), FLOAT_MAX_C)

    @triton.jit(do_not_specialize=["n_prompts", "runs_per_seed"])
    def _sgd_kernel(out_ptr, query_ptr, target_ptr, wq_ptr, wk_ptr, wv_ptr, wo_ptr, alive_ptr,
                    diverged_ptr, risk_ptr, step_ptr, n_prompts, runs_per_seed, lr, threshold, inv_sqrt_D,
                    D: tl.constexpr, DP: tl.constexpr, BB: tl.constexpr):
        run = tl.program_id(0)
        s = run // runs_per_seed
        NOUT: tl.constexpr = 1 + 2 * D
        i = tl.arange(0, DP)
        in_d = i < D
        sq = tl.zeros((BB,), tl.float32)
        G = tl.zeros((DP, DP), tl.float32)
        gv = tl.zeros((DP,), tl.float32)
        for b0 in range(0, n_prompts, BB):
            bb = b0 + tl.arange(0, BB)
            in_b = bb < n_prompts
            r = (tl.load(out_ptr + run * NOUT * n_prompts + bb, mask=in_b, other=0.0)
                 - tl.load(target_ptr + s * n_prompts + bb, mask=in_b, other=0.0))
            sq += r * r
            both = in_b[:, None] & in_d[None, :]
            gu = tl.load(out_ptr + (run * NOUT + 1 + i[None, :]) * n_prompts + bb[:, None], mask=both, other=0.0)
            gval = tl.load(out_ptr + (run * NOUT + 1 + D + i[None, :]) * n_prompts + bb[:, None], mask=both, other=0.0)
            zq = tl.load(query_ptr + (s * D + i[None, :]) * n_prompts + bb[:, None], mask=both, other=0.0)
            ru = r[:, None] * gu
            G += tl.sum(ru[:, :, None] * zq[:, None, :], 0)
            gv += tl.sum(r[:, None] * gval, 0)
        risk = 0.5 * tl.sum(sq, 0) / n_prompts
        step = tl.load(step_ptr)
        alive = tl.load(alive_ptr + run) != 0
        bad = (risk != risk) | (tl.abs(risk) == float("inf")) | (risk > threshold)
        tl.store(diverged_ptr + run, step, mask=bad & alive)
        alive = alive & (~bad)
        tl.store(alive_ptr + run, alive)
        tl.store(risk_ptr + run, risk)
        scale = tl.where(alive, 2.0 / n_prompts, 0.0)
        G = G * scale
        gv = gv * scale
        sq2 = i[:, None] * D + i[None, :]
        in_dd = in_d[:, None] & in_d[None, :]
        wq = tl.load(wq_ptr + run * D * D + sq2, mask=in_dd, other=0.0)
        wk = tl.load(wk_ptr + run * D * D + sq2, mask=in_dd, other=0.0)
        wv = tl.load(wv_ptr + run * D * D + sq2, mask=in_dd, other=0.0)
        wo = tl.load(wo_ptr + run * D + i, mask=in_d, other=0.0)
        g_wq = _nan_to_num(tl.sum(wk[:, :, None] * G[None, :, :], 1) * inv_sqrt_D)  # W_K G / sqrt(D)
        g_wk = _nan_to_num(tl.sum(wq[:, None, :] * G[None, :, :], 2) * inv_sqrt_D)  # W_Q G^T / sqrt(D)
        g_wo = _nan_to_num(tl.sum(wv * gv[None, :], 1))  # W_V g_v
        g_wv = _nan_to_num(wo[:, None] * gv[None, :])  # W_O^T g_v^T
        wq = wq - lr * g_wq
        wk = wk - lr * g_wk
        wv = wv - lr * g_wv
        wo = wo - lr * g_wo
        tl.store(wq_ptr + run * D * D + sq2, wq, mask=in_dd)
        tl.store(wk_ptr + run * D * D + sq2, wk, mask=in_dd)
        tl.store(wv_ptr + run * D * D + sq2, wv, mask=in_dd)
        tl.store(wo_ptr + run * D + i, wo, mask=in_d)

    @triton.jit
    def _store_uv(wq, wk, wv, wo, U_ptrs, v_ptrs, in_dd, in_d, inv_sqrt_D):
        """U = W_K^T W_Q / sqrt(D) and v = (W_O W_V)^T."""
        U = tl.sum(wk[:, :, None] * wq[:, None, :], 0) * inv_sqrt_D
        v = tl.sum(wo[:, None] * wv, 0)
        tl.store(U_ptrs, U, mask=in_dd)
        tl.store(v_ptrs, v, mask=in_d)

    @triton.jit
    def _uv_kernel(wq_ptr, wk_ptr, wv_ptr, wo_ptr, U_ptr, v_ptr, inv_sqrt_D, D: tl.constexpr, DP: tl.constexpr):
        run = tl.program_id(0)
        i = tl.arange(0, DP)
        in_d = i < D
        sq2 = i[:, None] * D + i[None, :]
        in_dd = in_d[:, None] & in_d[None, :]
        wq = tl.load(wq_ptr + run * D * D + sq2, mask=in_dd, other=0.0)
        wk = tl.load(wk_ptr + run * D * D + sq2, mask=in_dd, other=0.0)
        wv = tl.load(wv_ptr + run * D * D + sq2, mask=in_dd, other=0.0)
        wo = tl.load(wo_ptr + run * D + i, mask=in_d, other=0.0)
        _store_uv(wq, wk, wv, wo, U_ptr + run * D * D + sq2, v_ptr + run * D + i, in_dd, in_d, inv_sqrt_D)


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

    ``cfg`` a :class:`~softmax_as_linear.sweep.TrainConfig`, ``law`` the covariate law.
    ``per_tile`` / ``per_tile_eval``: lengths per tile in the training (gradients) and forward-only modes;
    ``pairs``: token pairs per block (a GPU lane each); ``warps``: warps per program.
    """

    def __init__(self, cfg, device, law: str | None = None, per_tile: int | None = None, per_tile_eval: int | None = None,
                 pairs: int | None = None, warps: int = 1, fast: bool | None = None, max_programs: int = 8192,
                 task=None, max_registers: int | None = 192, max_registers_eval: int | None = 168):
        law = cfg.law if law is None else law
        if law not in LAW_CODES:
            raise ValueError(f"law must be one of {tuple(LAW_CODES)}, got {law!r}")
        self.cfg, self.device, self.law = cfg, torch.device(device), law
        task = cfg.task() if task is None else task
        self.task = task
        self.d, self.D = cfg.d, cfg.D
        F, Fq = reference.task_factors(task)
        self.structure, self.query_structure = _structure(F), _structure(Fq)
        self.F = F.to(self.device, torch.float32).contiguous()
        self.Fq = Fq.to(self.device, torch.float32).contiguous()
        self.tau, self.noise_sd = math.sqrt(task.task_var), math.sqrt(task.noise_var)
        self.S, self.nL, self.nA = len(cfg.seeds), len(cfg.lengths), len(cfg.activations)
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
        self.soft = cfg.activations.index("softmax") if "softmax" in cfg.activations else -1
        self.lin = cfg.activations.index("linear") if "linear" in cfg.activations else -1
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
            D=D, NC=reference.calls_per_pair(D), LAW=LAW_CODES[self.law], STRUCT=self.structure,
            STRUCT_Q=self.query_structure, NA=self.nA, SOFT=self.soft, LIN=self.lin, LPT=tiles.shape[1],
            QB=self.pairs, GRAD=grad, FAST=self.fast, num_warps=self.warps,
            maxnreg=self.max_registers if grad else self.max_registers_eval)
        return out, query, target

    def grad_sums(self, U: Tensor, v: Tensor, alive: Tensor, keys: Tensor, step: Tensor, offset: int = 0):
        """The batch of step ``step + offset`` (``step`` an int64 device scalar): per (seed, length, activation,
        output, prompt) ``out (S, nL, nA, 1 + 2D, B)``: prediction, d/du, d/dv; queries ``(S, D, B)``; targets ``(S, B)``.
        U ``(S, nL, nA, D, D)``, v ``(S, nL, nA, D)`` float32 contiguous, alive ``(S, nL, nA)`` bool."""
        return self._launch(U, v, alive, keys, step, offset, self.cfg.batch_size, 0, True, "train")

    def predictions(self, U: Tensor, v: Tensor, alive: Tensor, keys: Tensor, n_prompts: int, step: Tensor | None = None,
                    offset: int = 0):
        """Forward only, prompts ``0 .. n_prompts - 1`` in chunks: yields ``(first, pred (S, nL, nA, n), target (S, n))``."""
        step = self.zero_step if step is None else step
        launches = -(-n_prompts * self.S // self.max_programs)  # at most max_programs programs (scratch rows) each
        chunk = -(-n_prompts // launches)
        for first in range(0, n_prompts, chunk):
            n = min(chunk, n_prompts - first)
            out, _, target = self._launch(U, v, alive, keys, step, offset, n, first, False, f"eval{n}")
            yield first, out[:, :, :, 0], target

    def risk_moments(self, U, v, alive, keys, n_prompts: int, step: Tensor | None = None, offset: int = 0):
        """Per run: the mean and the sum of squares (float64) of the per-prompt losses ``(yhat - y)^2 / 2``."""
        total = torch.zeros(self.S, self.nL, self.nA, dtype=torch.float64, device=self.device)
        squares = torch.zeros_like(total)
        for _, pred, target in self.predictions(U, v, alive, keys, n_prompts, step, offset):
            loss = (0.5 * (pred - target[:, None, None, :]) ** 2).double()
            total += loss.sum(-1)
            squares += (loss**2).sum(-1)
        return total / n_prompts, squares

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
        out, query, target = kernel.grad_sums(U.detach().contiguous(), v.detach().contiguous(), alive, keys, step)
        ctx.save_for_backward(out, query)
        ctx.D = kernel.D
        return out[:, :, :, 0].clone(), target.clone()

    @staticmethod
    def backward(ctx, grad, _):
        out, query = ctx.saved_tensors
        D = ctx.D
        grad_U = torch.einsum("slab,slaib,sjb->slaij", grad, out[:, :, :, 1:1 + D], query)
        grad_v = torch.einsum("slab,slaib->slai", grad, out[:, :, :, 1 + D:])
        return grad_U, grad_v, None, None, None, None
