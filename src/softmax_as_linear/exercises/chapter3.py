r"""Chapter 3's coding exercises: the concentration rate from a log-log fit, and the softmax weights' effective size.

Shapes: ``lengths (n,)``, ``gaps (n,)`` -> a scalar for :func:`loglog_slope`, the least-squares slope :math:`b` of
:math:`\ln E_L = a + b \ln L` (reference :func:`~softmax_as_linear.core.stats.loglog_slope`); ``scores (Q, L)`` ->
``(Q,)`` for :func:`effective_sample_size`, :math:`(\sum_i w_i)^2 / \sum_i w_i^2` of the weights
:math:`w_i = e^{s_i}` of each row (reference :func:`~softmax_as_linear.theory.concentration.effective_sample_size`).
"""
from __future__ import annotations

import math

import torch

from ..core import stats
from ..theory import concentration
from .feedback import Case, Exercise, Mistake

_F64 = dict(dtype=torch.float64)


def _curve(g, lengths, constant, slope, noise):
    L = torch.tensor(lengths, **_F64)
    return L, constant * L**slope * torch.exp(noise * torch.randn(len(lengths), generator=g, **_F64))


def _slope_cases() -> list[Case]:
    g = torch.Generator().manual_seed(301)
    grid = [10, 30, 100, 300, 1_000, 3_000, 10_000]
    return [Case("a noisy curve of slope near -1", _curve(g, grid, 2.0, -1.0, 0.15)),
            Case("an exact power law 0.3 L^(-1/2)", _curve(g, grid, 0.3, -0.5, 0.0)),
            Case("a slow curve, slope near -1/8", _curve(g, grid[2:], 5.0, -0.125, 0.05)),
            Case("three lengths, not powers of ten", _curve(g, [7, 50, 400], 0.8, -0.9, 0.2)),
            Case("gaps above one", _curve(g, [2, 4, 8, 16, 32, 64], 300.0, -0.7, 0.1))]


def loglog_slope(lengths, gaps):
    r"""The least-squares slope of :math:`\ln(\text{gaps})` against :math:`\ln(\text{lengths})`: the reference."""
    return stats.loglog_slope(torch.as_tensor(lengths).numpy(), torch.as_tensor(gaps).numpy()).slope


def _fit(x, y):
    # least-squares line y = a + b x: (b, a)
    xc, yc = x - x.mean(), y - y.mean()
    b = (xc * yc).sum() / (xc * xc).sum()
    return b, y.mean() - b * x.mean()


def _ess_cases() -> list[Case]:
    g = torch.Generator().manual_seed(302)
    spread = torch.tensor([[0.3], [1.0], [2.0], [3.0]], **_F64)
    dominant = torch.randn(3, 40, generator=g, **_F64)
    dominant[:, 7] += 12.0
    huge = torch.randn(3, 30, generator=g, **_F64) * torch.tensor([[1.0], [5.0], [40.0]], **_F64)
    huge = huge + torch.tensor([[1_000.0], [-2_000.0], [3_000.0]], **_F64)
    return [Case("log-normal weights, 4 queries x 50 tokens", (spread * torch.randn(4, 50, generator=g, **_F64),)),
            Case("equal scores", (torch.full((2, 9), 0.7, **_F64),)),
            Case("one token (L = 1)", (torch.randn(3, 1, generator=g, **_F64),)),
            Case("one score far above the others", (dominant,)),
            Case("scores in the thousands", (huge,))]


def effective_sample_size(scores):
    r""":math:`(\sum_i e^{s_i})^2 / \sum_i e^{2 s_i}` along the last axis: the reference."""
    return concentration.effective_sample_size(torch.exp(scores - scores.amax(-1, keepdim=True)))


def _weights(scores):
    return torch.exp(scores - scores.amax(-1, keepdim=True))


SLOPE = Exercise(
    function="loglog_slope", chapter=3, reference=loglog_slope, cases=_slope_cases,
    mistakes=(
        Mistake("the axes are swapped: you regressed log L on log E_L. The exponent is the slope of log E_L against"
                " log L (swapping the axes gives 1/slope for an exact power law, and something else with noise).",
                lambda L, E: _fit(torch.log(E), torch.log(L))[0]),
        Mistake("the gaps are not logged: the slope of E_L against log L is not an exponent. Take the log of both"
                " axes.", lambda L, E: _fit(torch.log(L), E)[0]),
        Mistake("the lengths are not logged: the slope of log E_L against L is not an exponent. Take the log of both"
                " axes.", lambda L, E: _fit(L, torch.log(E))[0]),
        Mistake("this is the intercept, log of the constant c in E_L = c L^b: the exponent b is the slope.",
                lambda L, E: _fit(torch.log(L), torch.log(E))[1]),
        Mistake("the line is forced through the origin: a power law c L^b is log E_L = log c + b log L, so fit the"
                " intercept log c too (centre both axes, or use a column of ones).",
                lambda L, E: (torch.log(L) * torch.log(E)).sum() / (torch.log(L) ** 2).sum()),
        Mistake("the logs on the two axes have different bases: any base gives the same slope, but only if both"
                " axes use it (log10 on one and ln on the other multiplies the slope by ln 10 or 1/ln 10).",
                lambda L, E: _fit(torch.log(L), torch.log10(E))[0]),
        Mistake("the logs on the two axes have different bases: any base gives the same slope, but only if both"
                " axes use it (log10 on one and ln on the other multiplies the slope by ln 10 or 1/ln 10).",
                lambda L, E: _fit(torch.log10(L), torch.log(E))[0]),
        Mistake("it uses only the first and last points: fit a line through all of them by least squares, so the"
                " noise of one length does not set the slope.",
                lambda L, E: (math.log(E[-1]) - math.log(E[0])) / (math.log(L[-1]) - math.log(L[0]))),
    ))

ESS = Exercise(
    function="effective_sample_size", chapter=3, reference=effective_sample_size, cases=_ess_cases,
    mistakes=(
        Mistake("this is 1 / ESS: the effective sample size is (sum_i w_i)^2 / sum_i w_i^2, L for equal weights.",
                lambda s: (_weights(s) ** 2).sum(-1) / _weights(s).sum(-1) ** 2),
        Mistake("this is ESS / L, the fraction of effective tokens: (sum_i w_i)^2 / sum_i w_i^2 uses sums, not"
                " means.", lambda s: effective_sample_size(s) / s.shape[-1]),
        Mistake("the weights are w_i = e^{s_i}: yours uses the scores themselves as weights.",
                lambda s: s.sum(-1) ** 2 / (s**2).sum(-1)),
        Mistake("the sum of the weights is squared: (sum_i w_i)^2 / sum_i w_i^2, which does not change when every"
                " weight is multiplied by the same constant. Yours does.",
                lambda s: torch.exp(s).sum(-1) / (torch.exp(s) ** 2).sum(-1)),
    ),
    nonfinite=("exp of a score in the thousands overflows to infinity (or, far below zero, underflows to 0), and"
               " infinity / infinity or 0 / 0 is NaN; the effective sample size does not change when every weight of"
               " a row is multiplied by the same constant, so subtract each row's largest score first"))

EXERCISES = (SLOPE, ESS)
