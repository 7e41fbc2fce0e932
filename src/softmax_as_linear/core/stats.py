"""Standard errors and confidence intervals that the claim cells compare against (no plotting).

- :func:`mean_se`: mean of i.i.d. samples and its standard error; :func:`mean_se_along`: the same along one axis of
  an array (diverged runs left out on request);
- :func:`mean_interval`: mean of i.i.d. samples and its Student-t interval;
- :func:`proportion_interval`: exact (Clopper-Pearson) interval for a share, e.g. of seeds in which a claim holds;
- :class:`Estimate`: such means and intervals, one per prompt length;
- :func:`loglog_slope`: least-squares slope of ``log y`` against ``log x``, its standard error and interval;
- :func:`paired_slope_difference`: the difference of two such slopes measured on the same samples, with intervals;
- :func:`variation_ratio`: how far a positive curve is from monotone (1 for a monotone curve);
- :func:`seed_summary`: mean, median and a quantile band over seeds of per-seed values, diverged runs (NaN) left out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def scipy_stats():
    """:mod:`scipy.stats`, imported on first use: importing it takes about half a second, which every command of
    the command line would otherwise pay before doing anything."""
    from scipy import stats

    return stats


@dataclass(frozen=True)
class Estimate:
    """Means over independent prompts with a two-sided confidence interval, one entry per prompt length."""

    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    level: float

    def as_dict(self) -> dict:
        """The estimate as plain lists and numbers (for a JSON file)."""
        return {"mean": self.mean.tolist(), "low": self.low.tolist(), "high": self.high.tolist(), "level": self.level}


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")


def mean_se(samples) -> tuple[float, float]:
    r"""Mean of i.i.d. ``samples`` (any shape, flattened) and its standard error :math:`s / \sqrt n`
    (:math:`s` the sample standard deviation): a Monte Carlo estimate and the yardstick of its claims."""
    x = np.asarray(samples.detach().cpu() if hasattr(samples, "detach") else samples, dtype=float).ravel()
    if x.size < 2:
        raise ValueError(f"samples must hold at least 2 values, got {x.size}")
    return float(x.mean()), float(scipy_stats().sem(x))


def mean_se_along(values, axis: int = -1, skip_nan: bool = False) -> tuple[np.ndarray, np.ndarray]:
    r"""Means of ``values`` (an array or tensor) along ``axis`` and their standard errors :math:`s / \sqrt n`
    (:math:`s` the sample standard deviation, :math:`n - 1` in its denominator), in float64: the one helper for a
    mean and its standard error over prompts or seeds. With ``skip_nan``, NaN entries (diverged runs) are left out and
    :math:`n` counts the others. A mean of fewer than two values has no standard error (NaN), of none no mean (NaN)."""
    x = np.asarray(values.detach().cpu() if hasattr(values, "detach") else values, dtype=float)
    kept = ~np.isnan(x) if skip_nan else np.ones(x.shape, dtype=bool)
    n = kept.sum(axis)
    filled = np.where(kept, x, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, filled.sum(axis) / n, np.nan)
        squares = np.where(kept, (x - np.expand_dims(mean, axis)) ** 2, 0.0).sum(axis)
        se = np.where(n > 1, np.sqrt(squares / (n - 1) / n), np.nan)
    return mean, se


def mean_interval(samples, level: float = 0.95) -> tuple[float, float, float]:
    r"""Mean of i.i.d. ``samples`` ``(n,)`` and its Student-t interval :math:`\bar x \pm t_{n-1} s / \sqrt n`
    (:func:`scipy.stats.t.interval`).

    The interval leans on the central limit theorem: squared gaps are skewed, and with heavy-tailed
    softmax weights very much so, and then it covers less often than ``level`` unless ``n`` is large
    (about 85% instead of 90% for 100 linear-attention prompts at L = 20; see the tests of
    :mod:`~softmax_as_linear.theory.concentration`).
    """
    x = np.asarray(samples, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"samples must be a vector of at least 2 values, got shape {x.shape}")
    _check_level(level)
    mean = float(x.mean())
    sem = float(scipy_stats().sem(x))
    if sem == 0:  # constant samples: SciPy's interval would be (nan, nan)
        return mean, mean, mean
    low, high = scipy_stats().t.interval(level, x.size - 1, loc=mean, scale=sem)
    return mean, float(low), float(high)


def proportion_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    r"""Clopper-Pearson interval for the probability :math:`p` behind ``successes`` out of ``n``
    independent trials (for instance the seeds in which a training claim holds): the :math:`p` that
    the binomial tails do not reject at ``1 - level`` (:meth:`scipy.stats.binomtest`'s ``proportion_ci``, method
    ``"exact"``). Exact, so never narrower than its level needs."""
    n, successes = int(n), int(successes)
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n] with n >= 1, got successes={successes!r}, n={n!r}")
    _check_level(level)
    interval = scipy_stats().binomtest(successes, n).proportion_ci(confidence_level=level, method="exact")
    return float(interval.low), float(interval.high)


def chance_of_at_least(count: int, n: int, p: float) -> float:
    r""":math:`P(X \ge \text{count})` for :math:`X \sim \mathrm{Binomial}(n, p)`: how likely ``count`` or more of ``n``
    independent tests, each a false alarm with probability at most ``p``, fire by chance alone (for instance runs
    flagged as still moving when none is, :func:`~softmax_as_linear.experiments.trajectory.read_risks` at its level)."""
    n, count = int(n), int(count)
    if n < 1 or not 0 <= count <= n:
        raise ValueError(f"count must lie in [0, n] with n >= 1, got count={count!r}, n={n!r}")
    if not 0 <= p <= 1:
        raise ValueError(f"p must lie in [0, 1], got {p!r}")
    return float(scipy_stats().binom.sf(count - 1, n, p))


def estimate(rows, level: float = 0.95) -> Estimate:
    """:class:`Estimate` of the rows of ``rows`` ``(n_lengths, n_samples)``, one :func:`mean_interval` per row."""
    mean, low, high = np.array([mean_interval(r, level) for r in rows]).T
    return Estimate(mean, low, high, level)


@dataclass(frozen=True)
class Slope:
    """A fitted log-log slope and its standard error; unpacks as ``slope, se = ...``."""

    slope: float
    se: float
    dof: int

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """Student-t interval :math:`\\hat b \\pm t_{n-2}\\, \\mathrm{se}` (exact for Gaussian residuals)."""
        _check_level(level)
        if self.se == 0:  # points exactly on a line: SciPy's interval would be (nan, nan)
            return self.slope, self.slope
        low, high = scipy_stats().t.interval(level, self.dof, loc=self.slope, scale=self.se)
        return float(low), float(high)

    def __iter__(self):
        # ``slope, se = loglog_slope(...)`` keeps working: the degrees of freedom are not unpacked.
        return iter((self.slope, self.se))


def loglog_slope(x, y) -> Slope:
    r"""Least-squares slope :math:`\hat b` of :math:`\log y = a + b \log x` over ``n >= 3`` points,
    its standard error :math:`\sqrt{\hat\sigma^2 [(A^\top A)^{-1}]_{00}}` with
    :math:`\hat\sigma^2 = \mathrm{RSS}/(n-2)`, and (:meth:`Slope.interval`) its Student-t interval. The same numbers as
    :func:`scipy.stats.linregress`, but from the residuals: linregress computes the error from :math:`1 - r^2`, which
    loses every digit for points
    close to a line (a closed-form curve gives an error of 1e-8 instead of 0)."""
    lx, ly = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    if lx.ndim != 1 or lx.shape != ly.shape:
        raise ValueError(f"x and y must be vectors of the same length, got shapes {lx.shape} and {ly.shape}")
    if lx.size < 3:
        raise ValueError("x and y need at least 3 points to fit a slope with an error")
    if np.all(lx == lx[0]):
        raise ValueError("x must hold at least 2 different values to fit a slope")
    A = np.stack([lx, np.ones_like(lx)], axis=1)
    coef, residuals, *_ = np.linalg.lstsq(A, ly, rcond=None)
    sigma2 = float(residuals[0]) / (lx.size - 2) if residuals.size else 0.0
    cov = sigma2 * np.linalg.inv(A.T @ A)
    return Slope(float(coef[0]), float(np.sqrt(cov[0, 0])), int(lx.size - 2))


@dataclass(frozen=True)
class SlopeDifference:
    """Difference of two log-log slopes fitted on paired samples, with a delta-method and a bootstrap interval."""

    difference: float
    delta: tuple[float, float]
    bootstrap: tuple[float, float]
    level: float


def paired_slope_difference(x, rows_a, rows_b, level: float = 0.95, n_boot: int = 2000,
                            seed: int = 0) -> SlopeDifference:
    r"""Slope of :math:`\log \bar a` minus slope of :math:`\log \bar b` against :math:`\log x`, where
    ``rows_a`` and ``rows_b`` ``(n_x, n)`` hold, at each ``x``, the same ``n`` independent samples seen through
    two quantities (for instance two gaps on the same prompts); samples at different ``x`` are independent.

    The difference of the two least-squares slopes is the slope of :math:`y = \log(\bar a / \bar b)`,
    :math:`\sum_x w_x y_x` with :math:`w_x = (\log x - m) / \sum (\log x - m)^2`. Its sampling variance is
    :math:`\sum_x w_x^2 \operatorname{Var}(y_x)` with, by the delta method on paired samples,
    :math:`\operatorname{Var}(y_x) \approx \operatorname{Var}(a_i/\bar a - b_i/\bar b)/n` (the covariance of
    ``a`` and ``b`` enters): a normal interval. The bootstrap interval resamples the samples within each
    ``x``, ``a`` and ``b`` together (``n_boot`` times, percentile). Both measure the sampling error only, not
    a departure of the curves from straight lines.
    """
    lx = np.log(np.asarray(x, dtype=float))
    a, b = np.asarray(rows_a, dtype=float), np.asarray(rows_b, dtype=float)
    if a.ndim != 2 or a.shape != b.shape or a.shape[0] != lx.size or lx.size < 2 or a.shape[1] < 2:
        raise ValueError(f"rows_a and rows_b must both have shape (len(x), n) with len(x) >= 2 and n >= 2, "
                         f"got {a.shape} and {b.shape} for {lx.size} values of x")
    if not (np.all(a > 0) and np.all(b > 0)):
        raise ValueError("rows_a and rows_b must be positive (their means' logarithms are taken)")
    _check_level(level)
    n_boot = int(n_boot)
    if n_boot < 100:
        raise ValueError(f"n_boot must be at least 100, got {n_boot!r}")
    w = (lx - lx.mean()) / ((lx - lx.mean()) ** 2).sum()
    a_mean, b_mean = a.mean(1), b.mean(1)
    difference = float(w @ np.log(a_mean / b_mean))
    var_y = (a / a_mean[:, None] - b / b_mean[:, None]).var(1, ddof=1) / a.shape[1]
    half = float(scipy_stats().norm.ppf(0.5 + level / 2) * np.sqrt((w**2 * var_y).sum()))
    rng = np.random.default_rng(seed)
    boots = np.empty(n_boot)
    for k in range(n_boot):
        pick = rng.integers(0, a.shape[1], size=a.shape)
        boots[k] = w @ np.log(np.take_along_axis(a, pick, 1).mean(1) / np.take_along_axis(b, pick, 1).mean(1))
    low, high = np.quantile(boots, [0.5 - level / 2, 0.5 + level / 2])
    return SlopeDifference(difference, (difference - half, difference + half), (float(low), float(high)), level)


def ratio_interval(numerator, denominator, level: float = 0.95) -> tuple[float, float, float]:
    r"""Ratio of means :math:`r = \bar x / \bar y` of paired i.i.d. samples ``(n,)`` and its delta-method interval.

    :math:`r \pm t_{n-1}\, s_{x - r y} / (\sqrt n\, |\bar y|)`, where :math:`s_{x - r y}` is the sample
    standard deviation of :math:`x_i - r y_i` (the linearisation of :math:`\bar x / \bar y` around its mean).
    """
    x, y = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or x.size < 2:
        raise ValueError(f"numerator and denominator must be vectors of the same length >= 2, got {x.shape} "
                         f"and {y.shape}")
    _check_level(level)
    if y.mean() == 0:
        raise ValueError("denominator must not have mean 0")
    ratio = float(x.mean() / y.mean())
    half = float(scipy_stats().t.ppf(0.5 + level / 2, x.size - 1) * (x - ratio * y).std(ddof=1)
                 / (math.sqrt(x.size) * abs(y.mean())))
    return ratio, ratio - half, ratio + half


def variation_ratio(curves, axis: int = -1) -> np.ndarray:
    r"""Total variation of :math:`\log c` along ``axis`` over its net change, for positive curves ``c``.

    :math:`\sum_k |\log c_{k+1} - \log c_k| \,/\, |\log c_K - \log c_0|`: 1 for a monotone curve, larger
    the more the curve goes back and forth (1 -> 6 -> 3 scores :math:`\log 12 / \log 3 = 2.26`).
    Scale-free, so curves of different sizes compare.
    ``curves`` of any shape; the result drops ``axis``.
    """
    values = np.asarray(curves, dtype=float)
    if values.shape[axis] < 2:
        raise ValueError(f"curves need at least 2 points along axis {axis}, got shape {values.shape}")
    if not np.all(values > 0):
        raise ValueError("curves must be positive (their logarithm is taken)")
    logs = np.log(values)
    steps = np.abs(np.diff(logs, axis=axis)).sum(axis=axis)
    net = np.abs(np.take(logs, -1, axis=axis) - np.take(logs, 0, axis=axis))
    return steps / net


def seed_summary(per_seed, quantiles: tuple[float, float] = (0.1, 0.9)) -> dict:
    """Mean, median and band over seeds (axis 0) of per-seed values, ignoring NaN (diverged runs).

    ``per_seed`` ``(S, ...)`` -> dict of ``mean``, ``median``, ``low`` and ``high`` (the ``quantiles`` over seeds,
    linearly interpolated; ``(0, 1)`` gives the range), each ``(...)`` and NaN where every seed is NaN, and
    ``count`` ``(...)``, the seeds that are not NaN.
    """
    low_q, high_q = (float(q) for q in quantiles)
    if not 0 <= low_q <= high_q <= 1:
        raise ValueError(f"quantiles must satisfy 0 <= low <= high <= 1, got {quantiles!r}")
    values = np.asarray(per_seed, dtype=float)
    if values.ndim < 1 or values.shape[0] < 1:
        raise ValueError(f"per_seed must have shape (S, ...) with S >= 1, got {values.shape}")
    count = np.sum(~np.isnan(values), axis=0)
    safe = np.where(count > 0, 0.0, np.nan)  # all-NaN columns stay NaN without a warning
    filled = np.where(np.isnan(values) & (count == 0), 0.0, values)
    return {"mean": np.nansum(filled, axis=0) / np.maximum(count, 1) + safe,
            "median": np.nanmedian(filled, axis=0) + safe, "low": np.nanquantile(filled, low_q, axis=0) + safe,
            "high": np.nanquantile(filled, high_q, axis=0) + safe, "count": count}
