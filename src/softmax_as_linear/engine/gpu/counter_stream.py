r"""The counter-based prompt stream (Philox4x32-10) in plain torch: the prompts the GPU kernel draws, on any device.

Every random number of a prompt is a function of its coordinates: Philox4x32-10 (Salmon et al. 2011,
as in ``triton.language.random``) keyed by the stream seed of :mod:`~softmax_as_linear.core.seeding`
(``key = (seed_lo, seed_hi)``), at the 128-bit counter

=============  =========================  ========================================================
word           tokens (pair ``q``)        header (w, query input, query noise)
=============  =========================  ========================================================
``c0``         ``q * NC + k``             ``k``
``c1``         prompt index ``b``         ``b``
``c2``         step, low 32 bits          step, low 32 bits
``c3``         step, high 32 bits         step, high 32 bits, with the top bit set
=============  =========================  ========================================================

for calls ``k = 0 .. NC - 1``, ``NC = ceil(D / 2)``: each call gives four 32-bit words, so a pair of
tokens (positions ``2q`` and ``2q + 1``) and the header each get ``r_0 .. r_{2D-1}``. A word becomes a
uniform number as in Triton (``uint_to_uniform_float``), and a pair of words ``(r_{2m}, r_{2m+1})``
two standard normals by Box-Muller (Triton's ``pair_uniform_to_normal``): ``g_{2m}, g_{2m+1}``.

* Tokens of pair ``q``: inputs :math:`\xi_A = \ell(0..d-1)`, :math:`\xi_B = \ell(d..2d-1)`; label
  noise :math:`\varepsilon_A = g_{2d}`, :math:`\varepsilon_B = g_{2d+1}`.
* Header: :math:`w = \tau\, g_{0..d-1}`, :math:`\varepsilon_q = g_d`, :math:`\xi_q = \ell(n_q .. n_q + d - 1)`
  from word :math:`n_q` (:func:`query_input_word`): :math:`d + 1` for Gaussian covariates, whose words are all
  normals, and for the other laws the first word after the Box-Muller pairs of :math:`w` and :math:`\varepsilon_q`,
  :math:`2\lfloor d/2 \rfloor + 2` (:math:`d + 1` for odd ``d``, :math:`d + 2` for even ``d``, where the pair
  :math:`(r_d, r_{d+1})` makes :math:`\varepsilon_q`: an input read from :math:`r_{d+1}` would not be independent
  of it).

where :math:`\ell(n)` is the covariate law applied to word ``n``: ``"gaussian"`` :math:`g_n`,
``"uniform"`` :math:`\sqrt3 (2 U(r_n) - 1)`, ``"rademacher"`` :math:`\pm 1` from the sign bit of
:math:`r_n`; all three have mean 0 and variance 1. Then, with the prompt factor ``F`` and the query
factor ``Fq`` of :class:`~softmax_as_linear.theory.regression.RegressionTask` (``Fq = F`` for the paper's sampler,
``Fq = I`` for the published one): :math:`x = F\xi`, :math:`y = w^\top x + s\varepsilon` for tokens and
query alike. The prompt of a given (stream, seed, step, prompt index) is therefore the same whatever
the batch it is drawn in, the device, or the order of drawing; the token at position ``i`` does not
depend on the prompt's length (prefix-shared prompts), and resuming at step ``k`` draws step ``k``'s batch.

This module is the reference :mod:`~softmax_as_linear.engine.gpu.prompt_kernel` is tested against, and the data
path of ``rng="philox"`` wherever the kernel does not run (:class:`~softmax_as_linear.engine.data.CounterData`:
the tensor formulas then train on these prompts). Its integer arithmetic in int64 tensors is slow on a CPU
(about ten times torch's generator: ``benchmarks/README.md``), so ``rng="auto"`` keeps torch's generators there.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ...core import checks
from ...registry import COVARIATES

HEADER_TAG = 0x80000000
_M32 = 0xFFFFFFFF
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85
_ROUNDS = 10
_UNIFORM_SCALE = 4.6566127342e-10  # Triton's: the largest with (2^31 - 1) * scale < 1 in float32
_TWO_PI = 6.283185307179586
_SQRT3 = math.sqrt(3.0)


def calls_per_pair(D: int) -> int:
    """Philox calls per pair of tokens (and per header): four words each, ``2D`` words needed."""
    return (2 * D + 3) // 4


def _mulhilo(a: int, x: Tensor) -> tuple[Tensor, Tensor]:
    """High and low 32 bits of ``a * x`` for a constant ``a`` and words ``x`` held in int64 (no overflow)."""
    p_lo = a * (x & 0xFFFF)
    mid = a * (x >> 16) + (p_lo >> 16)
    return mid >> 16, ((mid & 0xFFFF) << 16) | (p_lo & 0xFFFF)


def philox(key: Tensor, c0: Tensor, c1: Tensor, c2: Tensor, c3: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Philox4x32-10 of counters ``(c0, c1, c2, c3)`` under 64-bit keys ``key`` (int64 tensors that broadcast;
    words in ``[0, 2^32)``). Returns four int64 tensors of words, as ``triton.language.philox``."""
    k0, k1 = key & _M32, (key >> 32) & _M32
    c0, c1, c2, c3 = (torch.as_tensor(c, dtype=torch.int64) & _M32 for c in (c0, c1, c2, c3))
    for _ in range(_ROUNDS):
        hi_b, lo_b = _mulhilo(_ROUND_B, c2)
        hi_a, lo_a = _mulhilo(_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _KEY_A) & _M32, (k1 + _KEY_B) & _M32
    return c0, c1, c2, c3


def uniform(words: Tensor) -> Tensor:
    """Triton's ``uint_to_uniform_float``: a word as a signed int32, folded to ``[0, 2^31)``, times 2^-31 (float32)."""
    signed = torch.where(words >= 2**31, words - 2**32, words)
    folded = torch.where(signed < 0, -signed - 1, signed)  # ~x
    return folded.to(torch.float32) * torch.tensor(_UNIFORM_SCALE, dtype=torch.float32)


def box_muller(r0: Tensor, r1: Tensor) -> tuple[Tensor, Tensor]:
    """Triton's ``pair_uniform_to_normal`` on two words: ``r cos(2 pi u2), r sin(2 pi u2)``,
    ``r = sqrt(-2 log max(1e-7, u1))``."""
    u1 = torch.clamp_min(uniform(r0), 1.0e-7)
    th = torch.tensor(_TWO_PI, dtype=torch.float32) * uniform(r1)
    radius = torch.sqrt(-2.0 * torch.log(u1))
    return radius * torch.cos(th), radius * torch.sin(th)


def query_input_word(d: int, covariates: str) -> int:
    """The first header word of the query's inputs (module docstring): ``d + 1`` for Gaussian covariates, else the
    first word after the Box-Muller pairs that make ``w`` and the query's noise, ``2 * (d // 2) + 2``."""
    return d + 1 if covariates == "gaussian" else 2 * (d // 2) + 2


def _words(key: Tensor, c0: Tensor, c1: Tensor, step: int, tag: int, D: int) -> list[Tensor]:
    """The ``2D`` words ``r_0 .. r_{2D-1}`` at counters ``(c0 + k, c1, step, tag | step >> 32)``."""
    words = []
    for k in range(calls_per_pair(D)):
        words.extend(philox(key, c0 + k, c1, step & _M32, tag | (step >> 32)))
    return words[: 2 * D]


def _normals(words: list[Tensor], pairs) -> dict[int, Tensor]:
    out = {}
    for m in pairs:
        out[2 * m], out[2 * m + 1] = box_muller(words[2 * m], words[2 * m + 1])
    return out


def _covariates(words: list[Tensor], normals: dict[int, Tensor], indices, covariates: str) -> Tensor:
    """Covariates from words ``indices`` under the covariate law ``covariates``, stacked on the last axis."""
    if covariates == "gaussian":
        values = [normals[n] for n in indices]
    elif covariates == "uniform":
        values = [uniform(words[n]) * torch.tensor(2 * _SQRT3, dtype=torch.float32)
                  - torch.tensor(_SQRT3, dtype=torch.float32) for n in indices]
    else:
        values = [torch.where(words[n] >= 2**31, -1.0, 1.0).to(torch.float32) for n in indices]
    return torch.stack(values, -1)


def draw(keys, step: int, n_prompts: int, L: int, *, d: int, factor: Tensor, query_factor: Tensor,
         task_var: float, noise_var: float, covariates: str = "gaussian", first_prompt: int = 0, device="cpu",
         dtype=torch.float32) -> tuple[Tensor, Tensor, Tensor]:
    """Prompts ``first_prompt .. first_prompt + n_prompts - 1`` of step ``step`` for every key in ``keys``.

    keys: stream seeds (ints), one per seed ``S``; factor, query_factor ``(d, d)``.
    Returns tokens ``(S, n, L, D)``, queries ``(S, n, D)`` (last entry 0) and targets ``(S, n)``, in ``dtype``
    (drawn in float32, then converted). ``L`` may be odd: the last pair's second token is dropped.
    """
    checks.one_of("covariates", covariates, COVARIATES)
    D = d + 1
    device = torch.device(device)
    key = torch.as_tensor(list(keys), dtype=torch.int64, device=device)[:, None, None]  # (S, 1, 1)
    b = torch.arange(first_prompt, first_prompt + n_prompts, dtype=torch.int64, device=device)[None, :, None]
    NC = calls_per_pair(D)
    F = torch.as_tensor(factor, dtype=torch.float32).to(device)
    Fq = torch.as_tensor(query_factor, dtype=torch.float32).to(device)
    tau, noise = math.sqrt(task_var), math.sqrt(noise_var)

    # header: w, the query's noise and input
    head = _words(key, torch.zeros((), dtype=torch.int64, device=device), b, step, HEADER_TAG, D)
    head = [h[..., 0] for h in head]  # (S, n)
    g = _normals(head, range(D) if covariates == "gaussian" else range(d // 2 + 1))
    w = torch.stack([g[j] for j in range(d)], -1) * tau  # (S, n, d)
    eps_q = g[d]
    first = query_input_word(d, covariates)
    xi_q = _covariates(head, g, range(first, first + d), covariates)
    # tokens, pair by pair
    Q = (L + 1) // 2
    q = torch.arange(Q, dtype=torch.int64, device=device)[None, None, :]
    words = _words(key, q * NC, b, step, 0, D)  # each (S, n, Q)
    normals = _normals(words, range(D) if covariates == "gaussian" else [d])
    xi_a = _covariates(words, normals, range(d), covariates)
    xi_b = _covariates(words, normals, range(d, 2 * d), covariates)
    xi = torch.stack([xi_a, xi_b], 3).reshape(*xi_a.shape[:2], 2 * Q, d)[:, :, :L]  # position 2q + half
    eps = torch.stack([normals[2 * d], normals[2 * d + 1]], -1).reshape(*xi_a.shape[:2], 2 * Q)[:, :, :L]

    tokens = torch.empty(*xi.shape[:3], D, dtype=torch.float32, device=device)
    tokens[..., :d] = _apply(F, xi)
    tokens[..., d] = _label(_apply(F.T, w)[:, :, None, :], xi, noise, eps)
    query = torch.zeros(*xi_q.shape[:2], D, dtype=torch.float32, device=device)
    query[..., :d] = _apply(Fq, xi_q)
    target = _label(_apply(Fq.T, w), xi_q, noise, eps_q)
    return tokens.to(dtype), query.to(dtype), target.to(dtype)


# Products summed term by term, left to right, as the kernel does: the numbers do not depend on the batch's shape.

def _apply(F: Tensor, xi: Tensor) -> Tensor:
    """``F xi`` over the last axis, each entry summed left to right."""
    out = []
    for i in range(F.shape[0]):
        acc = F[i, 0] * xi[..., 0]
        for j in range(1, F.shape[1]):
            acc = acc + F[i, j] * xi[..., j]
        out.append(acc)
    return torch.stack(out, -1)


def _label(a: Tensor, xi: Tensor, noise: float, eps: Tensor) -> Tensor:
    """``s eps + a . xi``, summed left to right."""
    y = torch.tensor(noise, dtype=torch.float32) * eps
    for j in range(xi.shape[-1]):
        y = y + a[..., j] * xi[..., j]
    return y


def task_factors(task) -> tuple[Tensor, Tensor]:
    """The prompt factor ``F`` and the query factor ``Fq`` ``(d, d)`` float64 of a
    :class:`~softmax_as_linear.theory.regression.RegressionTask` (prompt inputs ``F xi``, query inputs ``Fq xi``)."""
    return task.prompt_factor, task.query_factor
