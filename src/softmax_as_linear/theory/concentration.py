r"""Concentration of attention around its infinite-prompt limit (paper, Section 3): estimators only.

With prompt tokens :math:`z_1, \dots, z_L` i.i.d. from :math:`\mu` and a fresh query :math:`z \sim \nu`,
Proposition 3.1 bounds the output gap

.. math:: E_L = \mathbb{E}_{z_{1:L} \sim \mu^{\otimes L}} \mathbb{E}_{z \sim \nu}
    \big\| T[\hat\mu_L](z) - T[\mu](z) \big\|^2 ,

and Proposition 3.4 the same gap for the gradients with respect to :math:`U` and :math:`V`. This
module estimates both, with confidence intervals, for softmax and normalised linear attention, with
or without the query inside the measure (Remark 3.2).

Everything is computed from a few moments of the prompt seen from each query, accumulated over
chunks of tokens with a running maximum of the scores (a streaming logsumexp), so that memory does
not grow with :math:`L`: with weights :math:`w_i = e^{z_i^\top U z}` and
:math:`a_i = w_i / \sum_j w_j`,

- softmax attention is :math:`T[\hat\mu_L](z) = V \bar z` with the tilted mean :math:`\bar z = \sum_i a_i z_i`;
- its Jacobian in :math:`U` involves the tilted covariance :math:`C = \sum_i a_i z_i z_i^\top - \bar z \bar z^\top`:
  for a loss :math:`\ell` of the output with gradient :math:`g`,
  :math:`\nabla_U \ell = C V^\top g\, z^\top` and :math:`\nabla_V \ell = g\, \bar z^\top`;
- normalised linear attention is :math:`V \hat M U z` with :math:`\hat M = \frac1L \sum_i z_i z_i^\top`,
  and the same formulas hold with :math:`(\bar z, C)` replaced by :math:`(\hat M U z, \hat M)`.

The infinite-prompt limits replace the empirical moments by those of the tilted law
:math:`d\nu_z \propto e^{z'^\top U z} d\mu(z')`, which :meth:`TokenLaw.tilted_moments
<softmax_as_linear.theory.measures.TokenLaw.tilted_moments>` gives exactly for every
:class:`~softmax_as_linear.theory.measures.TokenLaw` (Lemma 2.1 for the Gaussian one): the reference limit
carries no Monte Carlo error, and the tests check it against long Monte Carlo prompts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from ..core import checks, devices, seeding
from ..core.stats import Estimate, SlopeDifference, estimate, loglog_slope, paired_slope_difference
from ..registry import ACTIVATIONS
from .measures import OutsideTiltDomain, TokenLaw

_CHUNK_ELEMENTS = 2**21  # entries of the largest temporary per chunk: 16 MB in float64
_CHUNK_FLOAT32 = 2048  # at most this many tokens per float32 chunk

Draw = Callable[[int], Tensor]
"""A source of prompt tokens: ``draw(k)`` returns the next ``k`` tokens of every prompt, ``(P, k, D)``."""


# ---------------------------------------------------------------------------------------------
# Streaming moments of a prompt
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PromptMoments:
    r"""Moments of ``P`` prompts seen from ``Q`` queries each (``n_tokens`` tokens per measure).

    tilted_mean ``(P, Q, D)``: :math:`\bar z = \sum_i a_i z_i`;
    tilted_cov ``(P, Q, D, D)`` or None: :math:`\sum_i a_i z_i z_i^\top - \bar z \bar z^\top`;
    score_mean ``(P, Q, D)``: :math:`\frac1n \sum_i (z_i^\top U z) z_i = \hat M U z`;
    second_moment ``(P, Q, D, D)`` or None: :math:`\hat M = \frac1n \sum_i z_i z_i^\top`;
    ess ``(P, Q)``: effective sample size :math:`(\sum_i w_i)^2 / \sum_i w_i^2` of the softmax weights.
    """

    tilted_mean: Tensor
    tilted_cov: Tensor | None
    score_mean: Tensor
    second_moment: Tensor | None
    ess: Tensor
    n_tokens: int

    def softmax_output(self, V: Tensor) -> Tensor:
        r""":math:`T[\hat\mu](z) = V \bar z`, shape ``(P, Q, D)``."""
        return self.tilted_mean @ V.transpose(-1, -2)

    def linear_output(self, V: Tensor) -> Tensor:
        r""":math:`T_{\mathrm{lin}}[\hat\mu](z) = V \hat M U z`, shape ``(P, Q, D)``."""
        return self.score_mean @ V.transpose(-1, -2)


def stream_moments(draw: Draw, L: int, queries: Tensor, U: Tensor, *, include_query: bool = False,
                   second_order: bool = False, chunk: int | None = None) -> PromptMoments:
    r"""Accumulate :class:`PromptMoments` of ``L`` tokens per prompt, ``chunk`` tokens at a time.

    The softmax sums are kept relative to the running maximum of the scores
    :math:`s_i = z_i^\top U z`, so no weight overflows however heavy its tail, and memory is
    ``O(P Q D^2 + P chunk max(Q, D^2))`` whatever ``L``. Chunks are computed in the dtype of the
    tokens and ``queries`` (float32 is two to four times faster on a CPU); the sums over chunks are float64.

    Args:
        draw: ``draw(k) -> (P, k, D)`` the next ``k`` tokens of each of the ``P`` prompts.
        L: prompt length.
        queries: ``(P, Q, D)`` the queries of each prompt.
        U: ``(D, D)``.
        include_query: put each query in its own measure, :math:`\frac{1}{L+1}(\sum_i \delta_{z_i} + \delta_z)`
            (Remark 3.2).
        second_order: also accumulate the second moments needed by the gradients.
        chunk: tokens per chunk (default: temporaries of about 16 MB, and at most 2048 tokens in float32).
    """
    L = checks.positive_int("L", L)
    if queries.ndim != 3:
        raise ValueError(f"queries must have shape (P, Q, D), got {tuple(queries.shape)}")
    P, Q, D = queries.shape
    if chunk is None:
        chunk = max(1, _CHUNK_ELEMENTS // (P * max(Q, min(Q, D) * D if second_order else D)))
        if queries.dtype != torch.float64:  # short float32 sums keep their rounding error near 1e-6
            chunk = min(chunk, _CHUNK_FLOAT32)
    chunk = checks.positive_int("chunk", chunk)
    u = queries @ U.to(queries).transpose(-1, -2)  # (P, Q, D), u = U z: the score of z' is z'^T u
    acc = _SoftmaxSums(P, Q, D, second_order, queries.device)
    score_sum = torch.zeros(P, Q, D, dtype=torch.float64, device=queries.device)  # sum_i s_i z_i
    second = torch.zeros(P, D, D, dtype=torch.float64, device=queries.device) if second_order else None
    done = 0
    while done < L:
        k = min(chunk, L - done)
        tokens = draw(k)
        if tokens.shape != (P, k, D):
            raise ValueError(f"draw({k}) must return tokens of shape {(P, k, D)}, got {tuple(tokens.shape)}")
        s = u @ tokens.transpose(-1, -2)  # (P, Q, k)
        acc.add_chunk(s, tokens)
        score_sum += s @ tokens
        if second_order:
            second += tokens.transpose(-1, -2) @ tokens
        done += k
    n = L
    if second_order:
        second = second.unsqueeze(1).expand(P, Q, D, D)
    if include_query:
        s_q = (queries * u).sum(-1)  # (P, Q)
        acc.add_own_query(s_q, queries)
        score_sum = score_sum + s_q.unsqueeze(-1) * queries
        if second_order:
            second = second + queries.unsqueeze(-1) * queries.unsqueeze(-2)
        n += 1
    mean, cov = acc.mean_and_cov()
    return PromptMoments(mean, cov, score_sum / n, None if second is None else second / n, acc.ess(), n)


class _SoftmaxSums:
    """Sums of w, w^2, w z (and w z z^T) relative to the running maximum score ``top`` of each (prompt, query)."""

    def __init__(self, P, Q, D, second_order, device):
        zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=device)  # noqa: E731
        self.top = torch.full((P, Q), -math.inf, dtype=torch.float64, device=device)
        self.w, self.w2, self.wz = zeros(P, Q), zeros(P, Q), zeros(P, Q, D)
        self.wzz = zeros(P, Q, D * D) if second_order else None

    def _merge(self, top, w, w2, wz, wzz):
        new_top = torch.maximum(self.top, top)
        old, fresh = torch.exp(self.top - new_top), torch.exp(top - new_top)
        self.w = self.w * old + w * fresh
        self.w2 = self.w2 * old**2 + w2 * fresh**2
        self.wz = self.wz * old.unsqueeze(-1) + wz * fresh.unsqueeze(-1)
        if self.wzz is not None:
            self.wzz = self.wzz * old.unsqueeze(-1) + wzz * fresh.unsqueeze(-1)
        self.top = new_top

    def add_chunk(self, s: Tensor, tokens: Tensor):
        """Scores ``s (P, Q, k)`` of tokens ``(P, k, D)``."""
        top = s.amax(-1)
        e = torch.exp(s - top.unsqueeze(-1))
        wzz = None
        if self.wzz is not None:  # sum_i e_iq z_i z_i^T as matrix products over the chunk
            P, k, D = tokens.shape
            if e.shape[1] < D:  # few queries: weight the tokens, (P, Q, D, k) @ (P, 1, k, D)
                wzz = ((e.unsqueeze(-1) * tokens.unsqueeze(1)).transpose(-1, -2) @ tokens.unsqueeze(1)).flatten(-2)
            else:  # many queries: weight the outer products, (P, Q, k) @ (P, k, D D)
                wzz = e @ (tokens.unsqueeze(-1) * tokens.unsqueeze(-2)).reshape(P, k, D * D)
        self._merge(top, e.sum(-1), e.square().sum(-1), e @ tokens, wzz)

    def add_own_query(self, s_q: Tensor, queries: Tensor):
        """Each query ``(P, Q, D)`` joins its own measure with score ``s_q (P, Q)``."""
        one = torch.ones_like(s_q)
        wzz = None
        if self.wzz is not None:
            wzz = (queries.unsqueeze(-1) * queries.unsqueeze(-2)).flatten(-2)
        self._merge(s_q, one, one, queries, wzz)

    def mean_and_cov(self):
        mean = self.wz / self.w.unsqueeze(-1)
        if self.wzz is None:
            return mean, None
        P, Q, D = mean.shape
        cov = self.wzz.reshape(P, Q, D, D) / self.w[..., None, None] - mean.unsqueeze(-1) * mean.unsqueeze(-2)
        return mean, cov

    def ess(self):
        return self.w**2 / self.w2


def effective_sample_size(weights, dim: int = -1) -> Tensor:
    r"""Effective sample size :math:`(\sum_i w_i)^2 / \sum_i w_i^2` of non-negative weights along ``dim``.

    It is :math:`L` for :math:`L` equal weights and tends to 1 when one weight dominates. For
    i.i.d. weights, :math:`\mathrm{ESS}/L \to (\mathbb{E} w)^2 / \mathbb{E} w^2`, which is
    :math:`e^{-\lambda^2}` for log-normal weights :math:`w = e^{s}`, :math:`s \sim N(0, \lambda^2)`.
    Scale invariant, so softmax weights and unnormalised weights give the same value.
    """
    weights = checks.finite("weights", checks.as_float_tensor("weights", weights))
    if weights.ndim == 0:
        raise ValueError("weights must have at least one dimension")
    if (weights < 0).any():
        raise ValueError("weights must be non-negative")
    total = weights.sum(dim)
    if (total <= 0).any():
        raise ValueError("weights must not all be zero")
    scaled = weights / weights.amax(dim, keepdim=True)  # avoids overflow of the squares
    return scaled.sum(dim) ** 2 / (scaled**2).sum(dim)


# ---------------------------------------------------------------------------------------------
# Sources of tokens
# ---------------------------------------------------------------------------------------------

def law_draw(law: TokenLaw, n_prompts: int, generator: torch.Generator | None = None,
             dtype=torch.float64) -> Draw:
    """Tokens i.i.d. from ``law`` for ``n_prompts`` independent prompts, drawn chunk by chunk."""
    return lambda k: law.sample((n_prompts, k), generator, dtype)


def tensor_draw(tokens: Tensor) -> Draw:
    """Hand out the tokens ``(P, L, D)`` of given prompts in consecutive chunks (for checks against direct code)."""
    position = [0]

    def draw(k: int) -> Tensor:
        start = position[0]
        position[0] += k
        return tokens[:, start:start + k]

    return draw


# ---------------------------------------------------------------------------------------------
# The infinite-prompt limit
# ---------------------------------------------------------------------------------------------

def _law_tilted_moments(law: TokenLaw, queries: Tensor, U: Tensor) -> tuple[Tensor, Tensor]:
    """:meth:`TokenLaw.tilted_moments` at :math:`u = U z` for queries ``(..., D)``, on the queries' device; the
    law's tensors live on the CPU. A Laplace law whose tilt diverges (infinite-mean weights) is a ``ValueError``."""
    if not isinstance(law, TokenLaw):
        raise ValueError(f"law must be a TokenLaw, got {type(law).__name__}")
    u = (queries.double() @ U.double().transpose(-1, -2)).cpu()
    try:
        mean, cov = law.tilted_moments(u)
    except OutsideTiltDomain as error:  # the same kind of error, so that a panel can say what to change
        raise OutsideTiltDomain(error.largest, "law: ", ". Softmax attention has no infinite-prompt limit for "
                                "such queries; Proposition 3.1 assumes sub-Gaussian tokens") from error
    return mean.to(queries.device), cov.to(queries.device)


def limit_moments(law: TokenLaw, queries: Tensor, U: Tensor, activation: str = "softmax",
                  second_order: bool = False) -> tuple[Tensor, Tensor | None]:
    r"""The infinite-prompt counterparts of the moments that :func:`gap_moments` compares.

    Softmax: (:math:`\mathbb{E}_{\nu_z} z'`, :math:`\operatorname{Cov}_{\nu_z}`); linear:
    (:math:`M_2 U z`, :math:`M_2`) with :math:`M_2 = \Gamma + m m^\top`. Shapes ``(..., D)`` and ``(..., D, D)``
    (the second is None unless ``second_order``). Including the query in the measure (Remark 3.2)
    does not change the limit.
    """
    checks.one_of("activation", activation, ACTIVATIONS)
    if activation == "softmax":
        mean, cov = _law_tilted_moments(law, queries, U)
        return mean, (cov if second_order else None)
    M2 = law.second_moment.to(dtype=queries.dtype, device=queries.device)
    first = queries @ (M2 @ U).transpose(-1, -2)
    return first, (M2.expand(*queries.shape, queries.shape[-1]) if second_order else None)


def gap_moments(moments: PromptMoments, activation: str) -> tuple[Tensor, Tensor | None]:
    r"""The finite-prompt moments :math:`(\bar z, C)` (softmax) or :math:`(\hat M U z, \hat M)` (linear)."""
    if activation == "softmax":
        return moments.tilted_mean, moments.tilted_cov
    return moments.score_mean, moments.second_moment


# ---------------------------------------------------------------------------------------------
# Gaps and their estimates
# ---------------------------------------------------------------------------------------------

def squared_gaps(first: Tensor, second: Tensor | None, first_inf: Tensor, second_inf: Tensor | None,
                 queries: Tensor, V: Tensor, loss: Callable[[Tensor], Tensor] | None = None) -> dict[str, Tensor]:
    r"""Squared gaps between finite- and infinite-prompt attention for each query, shape ``(...)``.

    ``output``: :math:`\|V(f - f_\infty)\|^2` where :math:`f` is the first moment of :func:`gap_moments`.
    With ``second`` given, also the gradient gaps in :math:`U` and :math:`V` (squared Frobenius norms),
    of a loss :math:`\ell` of the output with gradient :math:`g`
    (:math:`\nabla_U \ell = S V^\top g\, z^\top`, :math:`\nabla_V \ell = g f^\top`, :math:`S` the second
    moment), or, when ``loss`` is None, of the Jacobian of the output itself (every output coordinate
    in turn, Proposition 3.4): :math:`\|V(S - S_\infty)\|_F^2 \|z\|^2` and :math:`D\,\|f - f_\infty\|^2`.

    first, first_inf, queries ``(..., D)``; second, second_inf ``(..., D, D)``; V ``(D, D)``;
    ``loss(output (..., D)) -> (...)`` differentiable.
    """
    Vt = V.transpose(-1, -2)
    gaps = {"output": ((first - first_inf) @ Vt).square().sum(-1)}
    if second is None:
        return gaps
    if loss is None:  # the Jacobian: the sum over g = e_1, ..., e_D of the gradient gaps
        gaps["grad_U"] = ((second - second_inf) @ Vt).square().sum((-1, -2)) * queries.square().sum(-1)
        gaps["grad_V"] = V.shape[-1] * (first - first_inf).square().sum(-1)
        return gaps
    g, g_inf = _loss_gradient(loss, first @ Vt), _loss_gradient(loss, first_inf @ Vt)
    left = (second @ (g @ V).unsqueeze(-1)).squeeze(-1) - (second_inf @ (g_inf @ V).unsqueeze(-1)).squeeze(-1)
    gaps["grad_U"] = left.square().sum(-1) * queries.square().sum(-1)
    outer = g.unsqueeze(-1) * first.unsqueeze(-2) - g_inf.unsqueeze(-1) * first_inf.unsqueeze(-2)
    gaps["grad_V"] = outer.square().sum((-1, -2))
    return gaps


def _loss_gradient(loss, output: Tensor) -> Tensor:
    with torch.enable_grad():
        output = output.detach().requires_grad_(True)
        value = loss(output)
        if not isinstance(value, Tensor) or value.shape != output.shape[:-1]:
            raise ValueError(f"loss must map outputs (..., D) to one value per output (...), got "
                             f"{getattr(value, 'shape', type(value).__name__)}")
        (grad,) = torch.autograd.grad(value.sum(), output)
    return grad


@dataclass(frozen=True)
class GapCurve:
    r"""Estimated gaps against the prompt length.

    ``output`` estimates :math:`E_L`; ``grad_U`` and ``grad_V`` the mean squared gradient gaps (None
    unless asked for); ``ess`` the mean effective sample size of the softmax weights. ``rows`` keeps the
    per-prompt values behind them, ``{name: (n_lengths, n_prompts)}``: at one length every quantity is
    measured on the same prompts and queries, so two of them can be compared pairwise
    (:meth:`slope_difference`).
    """

    lengths: np.ndarray
    output: Estimate
    grad_U: Estimate | None
    grad_V: Estimate | None
    ess: Estimate
    settings: dict
    rows: dict = field(default_factory=dict, repr=False, compare=False)

    def slope(self, which: str = "output", min_length: int = 1) -> tuple[float, float]:
        """Least-squares log-log slope of the mean of ``which`` over lengths ``>= min_length``, and its standard
        error."""
        checks.one_of("which", which, ("output", "grad_U", "grad_V", "ess"))
        curve = getattr(self, which)
        if curve is None:
            raise ValueError(f"which={which!r} was not computed (pass gradients=True)")
        keep = self.lengths >= min_length
        if keep.sum() < 3:
            raise ValueError(f"min_length leaves {int(keep.sum())} lengths; the fit needs at least 3")
        return loglog_slope(self.lengths[keep], curve.mean[keep])

    def slope_difference(self, a: str = "grad_U", b: str = "output", min_length: int = 1, level: float = 0.95,
                         n_boot: int = 2000, seed: int = 0) -> SlopeDifference:
        """Log-log slope of ``a`` minus that of ``b`` over lengths ``>= min_length``, paired on the same prompts
        (:func:`~softmax_as_linear.core.stats.paired_slope_difference`): positive when ``a`` decays more slowly."""
        for name in (a, b):
            checks.one_of("a, b", name, ("output", "grad_U", "grad_V", "ess"))
            if name not in self.rows:
                raise ValueError(f"{name!r} has no per-prompt rows here (pass gradients=True for the gradient gaps)")
        keep = self.lengths >= min_length
        if keep.sum() < 3:
            raise ValueError(f"min_length leaves {int(keep.sum())} lengths; the fit needs at least 3")
        return paired_slope_difference(self.lengths[keep], self.rows[a][keep], self.rows[b][keep], level, n_boot, seed)

    def as_dict(self) -> dict:
        """The curve as plain lists and numbers (for a JSON file)."""
        out = {"lengths": self.lengths.tolist(), "settings": self.settings}
        for name in ("output", "grad_U", "grad_V", "ess"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value.as_dict()
        return out


def gap_curve(law: TokenLaw, U, V, lengths, *, activation: str = "softmax", include_query: bool = False,
              gradients: bool = False, loss: Callable[[Tensor], Tensor] | None = None, n_prompts: int = 64,
              n_queries: int = 16, query_law: TokenLaw | None = None, level: float = 0.95, seed: int = 0,
              chunk: int | None = None, device="cpu", dtype=torch.float64) -> GapCurve:
    r"""Estimate :math:`E_L` (and the gradient gaps) for every ``L`` in ``lengths``.

    For each ``L``, ``n_prompts`` independent prompts of ``L`` tokens from ``law`` each meet
    ``n_queries`` independent queries from ``query_law`` (default :math:`N(0, I_D)`); the squared gaps
    are averaged over the queries of a prompt, and the interval at ``level`` is the Student-t interval
    over the ``n_prompts`` independent prompt averages. The limit is exact (:func:`limit_moments`).

    Args:
        law: token law :math:`\mu` of dimension ``D``.
        U, V: ``(D, D)`` attention parameters.
        lengths: prompt lengths, integers >= 1.
        activation: ``"softmax"`` or ``"linear"`` (each compared with its own limit).
        include_query: the query joins the measure (Remark 3.2).
        gradients: also estimate the gradient gaps in U and V (see :func:`squared_gaps`).
        loss: a loss of the output for the gradient gaps; None means the Jacobian of the output.
        seed: data of length ``L`` come from stream ``"prompts"`` of :mod:`~softmax_as_linear.core.seeding` at
            ``(seed, L)``.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"``.
        dtype: of the tokens and the per-chunk arithmetic (``torch.float32`` is two to four times
            faster on a CPU, and leaves relative errors below 1e-3 on the gaps, far below their Monte
            Carlo error); sums over chunks, limits and gaps are float64.
    """
    if not isinstance(law, TokenLaw):
        raise ValueError(f"law must be a TokenLaw, got {type(law).__name__}")
    checks.one_of("activation", activation, ACTIVATIONS)
    if loss is not None and not callable(loss):
        raise ValueError("loss must be callable or None")
    query_law = TokenLaw.standard("gaussian", law.D) if query_law is None else query_law
    if not isinstance(query_law, TokenLaw) or query_law.D != law.D:
        raise ValueError(f"query_law must be a TokenLaw of dimension {law.D}")
    lengths = _lengths(lengths)
    P = checks.int_at_least("n_prompts", n_prompts, 2)
    Q = checks.positive_int("n_queries", n_queries)
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    dev = devices.resolve_device(device)
    U = checks.square("U", checks.as_float_tensor("U", U).to(device=dev, dtype=torch.float64), law.D)
    V = checks.square("V", checks.as_float_tensor("V", V).to(device=dev, dtype=torch.float64), law.D)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    rows = {"output": [], "grad_U": [], "grad_V": [], "ess": []}
    for L in lengths:
        g = seeding.generator(seed, "prompts", L, device=dev)
        queries = query_law.sample((P, Q), g, dtype)
        moments = stream_moments(law_draw(law, P, g, dtype), L, queries, U, include_query=include_query,
                                 second_order=gradients, chunk=chunk)
        queries = queries.double()
        first, second = gap_moments(moments, activation)
        first_inf, second_inf = limit_moments(law, queries, U, activation, second_order=gradients)
        gaps = squared_gaps(first, second, first_inf, second_inf, queries, V, loss)
        gaps["ess"] = moments.ess
        for name, value in gaps.items():
            rows[name].append(value.mean(-1).cpu().numpy())  # average over the queries of each prompt
    settings = dict(law=law.kind, D=law.D, activation=activation, include_query=include_query,
                    gradients=gradients, loss="jacobian" if loss is None else getattr(loss, "__name__", "custom"),
                    n_prompts=P, n_queries=Q, level=level, seed=seed, dtype=str(dtype).replace("torch.", ""))
    return GapCurve(np.array(lengths), estimate(rows["output"], level),
                    estimate(rows["grad_U"], level) if gradients else None,
                    estimate(rows["grad_V"], level) if gradients else None,
                    estimate(rows["ess"], level), settings,
                    {name: np.array(value) for name, value in rows.items() if value})


def gap_rate(scale: float, refined: bool = False) -> float:
    r"""Predicted asymptotic log-log slope of :math:`E_L` for tokens :math:`N(0, \sigma^2 I)`, queries
    :math:`N(0, I)` and :math:`U` a rotation times :math:`\|U\|`, as a function of ``scale`` :math:`= \sigma \|U\|`.

    With :math:`a = \sigma^2 \|U\|^2`, a query :math:`z` has log-normal weights with
    :math:`\lambda^2 = \sigma^2 \|Uz\|^2 = a \|z\|^2`; its squared gap is about
    :math:`\min(e^{\lambda^2}/L,\, O(\sigma^4 \|Uz\|^2))`, and averaging over :math:`\|z\|^2 \sim \chi^2_D`
    gives the slope :math:`-\min(1, 1/(2a))`. That estimate of the slow regime is an upper one; counting the
    rare large weights of the intermediate regime (:math:`e^{\lambda^2/2} < L < e^{3\lambda^2/2}`, where the
    squared gap is about :math:`e^{-(\ln L - \lambda^2/2)^2 / (2 \lambda^2)}`) gives, with ``refined``,
    :math:`-(\sqrt{1 + 4/a} - 1)/2` for :math:`a > 1/2` (and :math:`-1` below), a steeper slope. Both are
    asymptotic: corrections in powers of :math:`1/\ln L` remain at every reachable ``L``.
    """
    scale = checks.positive_float("scale", scale)
    a = scale**2
    if a <= 0.5:
        return -1.0
    return -(math.sqrt(1 + 4 / a) - 1) / 2 if refined else -1 / (2 * a)


def light_gap_constant(sigma: float, norm_U: float, D: int) -> float:
    r"""The limit of :math:`L E_L` when :math:`a = \sigma^2 \|U\|^2 < 1/2` (tokens :math:`N(0, \sigma^2 I_D)`,
    queries :math:`N(0, I_D)`, :math:`U` a rotation times :math:`\|U\|`, :math:`V = I`).

    The delta method gives
    :math:`L\,\mathbb{E}\|T[\hat\mu_L](z) - T[\mu](z)\|^2 \to e^{\lambda^2}(D\sigma^2 + \sigma^2\lambda^2)` for a fixed
    query (:math:`\lambda^2 = a\|z\|^2`), and with :math:`\mathbb{E}\,e^{a\chi^2_D} = (1-2a)^{-D/2}` the query average
    is :math:`D \sigma^2 (1 - a)(1 - 2a)^{-(D+2)/2}`, finite only for :math:`a < 1/2`.
    """
    sigma = checks.positive_float("sigma", sigma)
    norm_U = checks.positive_float("norm_U", norm_U)
    D = checks.positive_int("D", D)
    a = sigma**2 * norm_U**2
    if a >= 0.5:
        raise ValueError(f"sigma * norm_U must be below 1/sqrt(2) for a finite limit of L E_L, got {math.sqrt(a):.3g}")
    return D * sigma**2 * (1 - a) * (1 - 2 * a) ** (-(D + 2) / 2)


def _lengths(lengths) -> list[int]:
    try:
        values = list(lengths)
    except TypeError as error:
        raise ValueError(f"lengths must be a sequence of integers >= 1, got {lengths!r}") from error
    if not values:
        raise ValueError("lengths must hold at least one prompt length")
    return [checks.positive_int("lengths", L) for L in values]
