"""Philox draws inside a Triton kernel: the counter-based stream of :mod:`~softmax_as_linear.engine.gpu.counter_stream`
(its words, Box-Muller normals and covariate laws), as device functions the prompt kernel calls."""
from __future__ import annotations

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # a CPU build of PyTorch
    triton = None

if triton is not None:

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
    def _covariates(words, normals, FIRST: tl.constexpr, COUNT: tl.constexpr, COVARIATES: tl.constexpr):
        """Covariates of words FIRST .. FIRST + COUNT - 1 under the law (normals: all 2D Gaussians, COVARIATES 0
        only)."""
        out = ()
        for j in tl.static_range(COUNT):
            if COVARIATES == 0:
                out = out + (normals[FIRST + j],)
            elif COVARIATES == 1:
                out = out + (tl.uint_to_uniform_float(words[FIRST + j]) * 3.4641016151377544 - 1.7320508075688772,)
            else:
                out = out + (tl.where(words[FIRST + j].to(tl.int32, bitcast=True) < 0, -1.0, 1.0),)
        return out
