r"""The prompt kernel proper (Triton): one program per prompt draws it and forms every run's prediction and gradient
sums.

See :mod:`~softmax_as_linear.engine.gpu.prompt_kernel` for what it computes and how the work is laid out; the host
side (buffers, launches) is :class:`~softmax_as_linear.engine.gpu.prompt_kernel.PromptKernel`.
"""
from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU build of PyTorch
    triton = None

LOG2E = 1.4426950408889634
OVERFLOW = 64.0  # binary orders a score may exceed the reference maximum before the tile is redone
FLOAT_MAX = 3.4028234663852886e38

if triton is not None:
    from .philox import _covariates, _normals, _words

    OVERFLOW_C = tl.constexpr(OVERFLOW)
    FLOAT_MAX_C = tl.constexpr(FLOAT_MAX)
    LOG2E_C = tl.constexpr(LOG2E)

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
                       D: tl.constexpr, NC: tl.constexpr, COVARIATES: tl.constexpr, STRUCT: tl.constexpr,
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
        if COVARIATES == 0:
            g = _normals(head, 0, D, FAST)
        else:
            g = _normals(head, 0, d // 2 + 1, FAST)
        w = ()
        for i in tl.static_range(d):
            w = w + (tau * g[i],)
        # the query's inputs from word counter_stream.query_input_word(d, law): past the pair that makes g[d]
        QUERY0: tl.constexpr = d + 1 if COVARIATES == 0 else 2 * (d // 2) + 2
        xi_q = _covariates(head, g, QUERY0, d, COVARIATES)
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
            if COVARIATES == 0:
                normals = _normals(words, 0, D, FAST)
                eps_a = normals[2 * d]
                eps_b = normals[2 * d + 1]
            else:
                normals = _normals(words, d, 1, FAST)
                eps_a = normals[0]
                eps_b = normals[1]
            xi_a = _covariates(words, normals, 0, d, COVARIATES)
            xi_b = _covariates(words, normals, d, d, COVARIATES)
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

