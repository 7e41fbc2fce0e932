r"""The SGD step of the prompt kernel's sweep, and the kernel that forms :math:`U` and :math:`v` from the four matrices.

The step (Triton) goes from the prompt kernel's sums to the batch risk, the divergence bookkeeping, the gradients of
the four matrices and the update (:meth:`~softmax_as_linear.engine.gpu.prompt_kernel.PromptKernel.sgd_step`)."""
from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU build of PyTorch
    triton = None

if triton is not None:
    from .attention_sums import FLOAT_MAX

    FLOAT_MAX_C = tl.constexpr(FLOAT_MAX)

    @triton.jit
    def _nan_to_num(x):
        x = tl.where(x != x, 0.0, x)
        return tl.minimum(tl.maximum(x, -FLOAT_MAX_C), FLOAT_MAX_C)

    @triton.jit
    def _load_weights(wq_ptr, wk_ptr, wv_ptr, wo_ptr, run, D: tl.constexpr, DP: tl.constexpr):
        """The four matrices of run ``run``: W_Q, W_K, W_V ``(DP, DP)`` and W_O ``(DP,)``, zero-padded past ``D``;
        with the offsets ``sq2`` and masks ``in_dd``, ``in_d`` that store them back."""
        i = tl.arange(0, DP)
        in_d = i < D
        sq2 = i[:, None] * D + i[None, :]
        in_dd = in_d[:, None] & in_d[None, :]
        wq = tl.load(wq_ptr + run * D * D + sq2, mask=in_dd, other=0.0)
        wk = tl.load(wk_ptr + run * D * D + sq2, mask=in_dd, other=0.0)
        wv = tl.load(wv_ptr + run * D * D + sq2, mask=in_dd, other=0.0)
        wo = tl.load(wo_ptr + run * D + i, mask=in_d, other=0.0)
        return wq, wk, wv, wo, sq2, in_dd, in_d

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
        wq, wk, wv, wo, sq2, in_dd, in_d = _load_weights(wq_ptr, wk_ptr, wv_ptr, wo_ptr, run, D, DP)
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
        wq, wk, wv, wo, sq2, in_dd, in_d = _load_weights(wq_ptr, wk_ptr, wv_ptr, wo_ptr, run, D, DP)
        _store_uv(wq, wk, wv, wo, U_ptr + run * D * D + sq2, v_ptr + run * D + i, in_dd, in_d, inv_sqrt_D)

