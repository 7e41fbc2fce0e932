r"""Whether a recorded run still moves at the end of training, and since when it has not: a trend test whose null
hypothesis is a stationary training process, with its error taken from the run's own scatter.

A trajectory file (Figures 4 and 8, Chapter 6's sweeps) holds, for every run, the held-out risk :math:`R_t` at every
record :math:`t = 0, \dots, T-1` (steps :math:`k_t`). Every record of a run is scored on the *same* held-out
prompts, so the Monte Carlo error of a record is nearly the same offset at every record of a settled run; what
changes from record to record is the parameters: SGD's own jitter, correlated from one record to the next. Two
SGD iterates of a stationary run have different risks, so a test of "these two records have equal risk" calls
stationary runs moving. This reader tests stationarity instead.

**The test (batch means).** Over the last ``fraction`` of training (default the last quarter) the window's
:math:`n` records are cut into :math:`m` consecutive batches of :math:`b = \lfloor n/m \rfloor` records (the
earliest :math:`n - mb` are left out, so the window ends at the last record), default :math:`m = 8`. A
least-squares line is fitted to the :math:`m` batch means :math:`\bar R_j` against their mean steps
:math:`\bar k_j`; the variance of a batch mean is estimated from successive differences,
:math:`\hat\sigma^2 = \sum_j (\bar R_{j+1} - \bar R_j)^2 / (2(m-1))`, which a smooth trend inflates far less than
the scatter about a line would (a decelerating fall leaves curved residuals), and
:math:`\mathrm{se}(\hat\beta) = \hat\sigma / (\sum_j (\bar k_j - \bar k)^2)^{1/2}`. The **fall** over the window
is :math:`-\hat\beta\,(k_{T-1} - k_{start})` (positive when the risk descends), and a run is **still moving** when
:math:`|\hat\beta| / \mathrm{se}(\hat\beta)` exceeds the :math:`1 - \ell` quantile of its law for independent
Gaussian batch means of one mean (a pivot, simulated once: :func:`critical_value`, 3.63 for :math:`m = 8` at
level :math:`\ell = 1\,\%`), ``descending`` or ``rising`` by its sign.

When the risk is stationary and the batches are long against the jitter's correlation time, the batch means are
nearly independent and Gaussian, and the test has its level: the false-alarm rate is :math:`\ell`. For jitter
that is AR(1) with lag-one correlation :math:`\rho` between records, the batches are long enough when
:math:`b \gtrsim 3\,(1 + \rho)/(1 - \rho)`; beyond, the rate grows (about 1.5 % at :math:`\rho = 0.5`, 2.2 % at
:math:`\rho = 0.7` for :math:`n = 76`). The tests of this module measure the rate by simulation (stationary white
and AR(1) jitter, a drop then flat) and the power on descents (a slow linear one, a decelerating one, a late
escape). The paper-scale files have :math:`n = 76` records in their last quarter (:math:`b = 9`) and jitter with
:math:`\rho` of about 0.2 to 0.5 between records after a line is removed.

**Resolution.** The smallest fall over the window that the test detects in a run is
:math:`c\,\mathrm{se}(\text{fall})` with :math:`c` the critical value (``resolution``): a steady fall of that size is
found about half the time (43 % in the tests' simulation), one of twice that size almost always (96 %), and a run
not called moving may still move by less than that. It is per run, set by that run's own jitter, and independent of the
Monte Carlo error of the records (a common offset of the shared held-out prompts).

**Settled since** :math:`k_{t^*}`: the records are cut, back from the end, into batches of the test window's size
:math:`b` (the :math:`T \bmod b` records left over at the start form a shorter first batch, its band widened for
its shorter mean); the run has settled since the first record of the earliest batch after which every batch mean lies
within :math:`q\,\hat\sigma\sqrt{1 + 1/m}` of the test window's mean, with :math:`\hat\sigma` the test window's
batch-mean scatter above and :math:`q` the Student-t quantile (:math:`m - 1` degrees of freedom) at
:math:`\ell / (2N)` for :math:`N` batches (Bonferroni): an earlier batch outside that band was at another level.
A run still moving at the end has not settled (``settled_index`` :math:`-1`, ``settled_at`` NaN). A run whose
risk is not finite at some record (diverged) has NaN everywhere and ``diverged`` set.

:func:`false_alarm_rate` measures the rate for any design (records, window, batches) by simulation.

:func:`read_risks` reads arrays ``(..., T)`` of any leading shape; :func:`read_trajectories` reads a trajectory
file for every (seed, ``L``, activation); both return a :class:`TrajectoryReading`. Risks are
:math:`R = \tfrac12 \mathrm{MSE}`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..core import checks, stats
from ..registry import ACTIVATIONS
from . import uncertainty
from .uncertainty import WINDOWS  # the fractions over which the raw fall R_start - R_{T-1} is reported

#: Draws and seed of the simulation that gives :func:`critical_value`.
NULL_DRAWS, NULL_SEED = 400_000, 20251211


@functools.lru_cache(maxsize=None)
def _null_statistics(batches: int) -> np.ndarray:
    """The statistic of :func:`trend` on ``NULL_DRAWS`` draws of ``batches`` independent standard normal batch
    means, sorted by absolute value (its law is free of the mean and the variance: a pivot)."""
    means = np.random.default_rng(NULL_SEED).standard_normal((NULL_DRAWS, batches))
    slope, se = trend(np.arange(batches), means, batches)
    return np.sort(np.abs(slope / se))


def critical_value(level: float = 0.01, batches: int = 8) -> float:
    r"""The value that :math:`|\hat\beta| / \mathrm{se}(\hat\beta)` of :func:`trend` exceeds with probability ``level``
    when the ``batches`` batch means are independent and Gaussian with one mean: the ``1 - level`` quantile of its
    law, by simulation (``NULL_DRAWS`` seeded draws; 3.63 for 8 batches at 1 %)."""
    level = checks.positive_float("level", level)
    if not level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    batches = checks.positive_int("batches", batches)
    if batches < 4:
        raise ValueError(f"batches must be at least 4, got {batches}")
    return float(np.quantile(_null_statistics(batches), 1 - level))


def trend(steps, risk, batches: int = 8) -> tuple[np.ndarray, np.ndarray]:
    r"""Least-squares slope of the batch means of ``risk`` ``(..., n)`` against their mean ``steps`` ``(n,)``, and
    its standard error with the batch means' variance from their successive differences,
    :math:`\hat\sigma^2 = \sum_j (\bar R_{j+1} - \bar R_j)^2 / (2(m - 1))`: ``(slope, se)``, each ``(...)``. The
    earliest ``n mod batches`` records are left out."""
    steps, risk = np.asarray(steps, dtype=float), np.asarray(risk, dtype=float)
    n = steps.size
    size = n // batches
    if size < 1 or (size < 2 and n != batches):
        raise ValueError(f"a window of {n} records cannot be cut into {batches} batches of at least 2 records:"
                         " widen the window (fraction) or use fewer batches")
    keep = slice(n - size * batches, n)
    x = steps[keep].reshape(batches, size).mean(-1)
    y = risk[..., keep].reshape(*risk.shape[:-1], batches, size).mean(-1)
    x = x - x.mean()
    slope = (y @ x) / (x @ x)
    variance = (np.diff(y, axis=-1) ** 2).sum(-1) / (2 * (batches - 1))
    return slope, np.sqrt(variance / (x @ x))


@dataclass(frozen=True)
class TrajectoryReading:
    r"""Each run of a trajectory read as a whole. Arrays have the leading shape ``shape`` (for a file: seed,
    ``L``, activation).

    - ``steps`` ``(T,)``; ``level``, ``batches``, ``critical`` (:func:`critical_value`); ``fraction`` and
      ``window`` (the test window's start step);
    - ``fall``, ``fall_se``, ``resolution``: the fitted fall over the test window (positive when the risk
      descends), its standard error, and the smallest fall the test resolves, ``critical * fall_se``;
    - ``moving``, ``descending``, ``rising``, ``diverged``: booleans (the first three False for a diverged run);
    - ``settled_index`` (``-1`` when still moving or diverged) and ``settled_at`` (step, NaN then);
    - ``raw_fall``: ``{window: R_start - R_end}`` over the last half, quarter and tenth
      (:data:`~softmax_as_linear.experiments.uncertainty.WINDOWS`, descriptive);
    - ``final``, ``final_se``: the last record's risk and its Monte Carlo standard error;
    - ``method``: how the records' standard errors were had.
    """

    steps: np.ndarray
    level: float
    batches: int
    critical: float
    fraction: float
    window: int
    fall: np.ndarray
    fall_se: np.ndarray
    resolution: np.ndarray
    moving: np.ndarray
    descending: np.ndarray
    rising: np.ndarray
    diverged: np.ndarray
    settled_index: np.ndarray
    settled_at: np.ndarray
    raw_fall: dict
    final: np.ndarray
    final_se: np.ndarray
    method: str
    seeds: list | None = None
    lengths: list | None = None
    activations: list | None = None

    @property
    def shape(self) -> tuple:
        """The shape of the runs read, ``(S, nL, nA)`` for a file."""
        return self.moving.shape

    @property
    def t(self) -> np.ndarray:
        """The fitted fall over the test window in its standard errors (NaN for a diverged run)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.fall / self.fall_se

    def index(self, seed=None, L=None, activation=None) -> tuple:
        """The array index of one run of a file reading (seed, ``L``, activation), a ``ValueError`` naming a
        missing one."""
        if self.seeds is None:
            raise ValueError("this reading has no seeds, lengths and activations: index its arrays directly")
        out = []
        for name, value, values in (("seed", seed, self.seeds), ("L", L, self.lengths),
                                    ("activation", activation, self.activations)):
            if value not in values:
                raise ValueError(f"{name}={value!r} is not in the reading (it has {values})")
            out.append(values.index(value))
        return tuple(out)

    def run(self, seed, L, activation) -> dict:
        """One run's reading as plain numbers."""
        i = self.index(seed, L, activation)
        return {"seed": seed, "L": L, "activation": activation, "diverged": bool(self.diverged[i]),
                "moving": bool(self.moving[i]), "descending": bool(self.descending[i]),
                "rising": bool(self.rising[i]), "fall": float(self.fall[i]), "fall_se": float(self.fall_se[i]),
                "t": float(self.t[i]), "resolution": float(self.resolution[i]),
                "settled_at": float(self.settled_at[i]), "final": float(self.final[i]),
                "final_se": float(self.final_se[i]), "raw_fall": {w: float(v[i]) for w, v in self.raw_fall.items()}}

    def flag(self, index: tuple) -> str:
        """``v`` descending, ``^`` rising, ``.`` not moving, ``x`` diverged."""
        return ("x" if self.diverged[index] else "v" if self.descending[index] else "^" if self.rising[index]
                else ".")

    def line(self, index: tuple) -> str:
        """One run, in words: its fitted fall over the test window with its standard error, and since when it
        has settled."""
        name = (f"seed {self.seeds[index[0]]}, L = {self.lengths[index[1]]}, {self.activations[index[2]]}"
                if self.seeds is not None else f"run {index}")
        if self.diverged[index]:
            return f"{name}: diverged"
        state = ("still descending" if self.descending[index] else "still rising" if self.rising[index]
                 else f"settled since step {self.settled_at[index]:,.0f}")
        return (f"{name}: fall over the last {self.fraction:g} of training {self.fall[index]:+.2e}"
                f" ({self.t[index]:+.1f} s.e.; resolves {self.resolution[index]:.1e}): {state}")

    def table(self, seed, activations=None) -> str:
        """One seed of a file reading as a table over ``L``: per activation, the fitted fall over the test window
        (in units of :math:`10^{-4}`), its :math:`t`, the resolution (:math:`10^{-4}`), the flag (:meth:`flag`) and
        the step since which the run has settled."""
        activations = self.activations if activations is None else list(activations)
        width = max(8, len(f"{self.steps[-1]:,.0f}") + 2)
        head = (f"seed {seed} (last {self.fraction:g}, level {self.level:g})".ljust(36)
                + "".join(f"{L:>{width}}" for L in self.lengths))
        rows = [head]
        for a in activations:
            idx = [self.index(seed, L, a) for L in self.lengths]
            settled = lambda i: "-" if np.isnan(self.settled_at[i]) else f"{self.settled_at[i]:,.0f}"  # noqa: E731
            rows += [f"  {a:13s} fall (1e-4)".ljust(36) + "".join(f"{1e4 * self.fall[i]:+{width}.1f}" for i in idx),
                     "                t (s.e.)".ljust(36) + "".join(f"{self.t[i]:+{width}.1f}" for i in idx),
                     "                resolves (1e-4)".ljust(36)
                     + "".join(f"{1e4 * self.resolution[i]:{width}.1f}" for i in idx),
                     "                moving at the end".ljust(36) + "".join(f"{self.flag(i):>{width}}" for i in idx),
                     "                settled since step".ljust(36) + "".join(f"{settled(i):>{width}}" for i in idx)]
        return "\n".join(rows)

    def methods(self) -> str:
        """The test, in one sentence."""
        return (f"(trend of {self.batches} batch means over the last {self.fraction:g} of training, from step"
                f" {self.window:,}, its error from their successive differences; moving beyond {self.critical:.2f}"
                f" s.e., the level-{self.level:g} quantile for a stationary run)")

    def summary(self, seeds=None, lengths=None, activations=None) -> str:
        """One :meth:`line` per run (of a file reading: the chosen seeds, lengths and activations), then the
        method."""
        if self.seeds is None:
            indices = list(np.ndindex(self.shape))
        else:
            pick = lambda chosen, values: values if chosen is None else list(chosen)  # noqa: E731
            indices = [self.index(s, L, a) for s in pick(seeds, self.seeds) for L in pick(lengths, self.lengths)
                       for a in pick(activations, self.activations)]
        return "\n".join([self.line(i) for i in indices] + [self.methods()])


def _resolved(steps, risk, start: int, batches: int, critical: float) -> tuple:
    """Fall, its s.e. and whether it is resolved, over the records from index ``start`` to the end."""
    slope, se = trend(steps[start:], risk[..., start:], batches)
    span = steps[-1] - steps[start]
    with np.errstate(divide="ignore", invalid="ignore"):
        resolved = np.abs(slope) > critical * se
    return -slope * span, se * span, resolved


def _settled_index(risk, window: int, batches: int, level: float) -> np.ndarray:
    """Index of the first record of the earliest batch (batches of the test window's size, counted back from the
    end; the records left over at the start form a shorter first batch) from which every batch mean lies within the
    stationary band of the test window: ``(...)``."""
    size = window // batches
    count, extra = divmod(risk.shape[-1], size)
    means = risk[..., extra:].reshape(*risk.shape[:-1], count, size).mean(-1)
    tail = means[..., -batches:]
    centre = tail.mean(-1, keepdims=True)
    sigma = np.sqrt((np.diff(tail, axis=-1) ** 2).sum(-1) / (2 * (batches - 1)))[..., None]
    quantile = stats.scipy_stats().t.isf(level / (2 * (count + (extra > 0))), batches - 1)
    outside = np.abs(means - centre) > quantile * sigma * np.sqrt(1 + 1 / batches)
    last_out = np.where(outside.any(-1), count - 1 - np.argmax(outside[..., ::-1], axis=-1), -1)
    first = np.where(last_out < 0, 0, extra + (last_out + 1) * size)
    if extra:  # a mean of `extra` records: its variance `size / extra` times a batch mean's
        lead = risk[..., :extra].mean(-1, keepdims=True)
        lead_out = (np.abs(lead - centre) > quantile * sigma * np.sqrt(size / extra + 1 / batches))[..., 0]
        first = np.where((last_out < 0) & lead_out, extra, first)
    return first


def read_risks(steps, risk, se=None, level: float = 0.01, fraction: float = 0.25, batches: int = 8,
               method: str = "given", **labels) -> TrajectoryReading:
    r"""Read trajectories ``risk`` ``(..., T)`` recorded at ``steps`` ``(T,)``: the trend test over the last
    ``fraction`` of training (module docstring) at two-sided ``level`` with ``batches`` batch means. ``se``
    ``(..., T)`` (optional): the records' Monte Carlo standard errors, reported for the final record only.
    ``labels``: ``seeds``, ``lengths``, ``activations`` of a file's axes."""
    critical = critical_value(level, batches)
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
    steps = np.asarray(steps, dtype=float)
    risk = np.asarray(risk, dtype=float)
    if steps.ndim != 1 or risk.shape[-1:] != steps.shape or np.any(np.diff(steps) <= 0):
        raise ValueError(f"steps must be increasing with one entry per record, got {steps.shape} for risk {risk.shape}")
    se = np.full(risk.shape, np.nan) if se is None else np.asarray(se, dtype=float)
    if se.shape != risk.shape:
        raise ValueError(f"se must have the shape of risk {risk.shape}, got {se.shape}")
    diverged = ~np.isfinite(risk).all(-1)
    clean = np.where(diverged[..., None], 0.0, risk)
    start_of = lambda f: int(np.flatnonzero(steps == uncertainty.window_start(steps, f))[0])  # noqa: E731
    t0 = start_of(fraction)
    T = steps.size
    fall, fall_se, moving = _resolved(steps, clean, t0, batches, critical)
    moving = moving & ~diverged
    first = _settled_index(clean, T - t0, batches, level)
    first = np.where(diverged | moving, -1, first)
    nan = lambda a: np.where(diverged, np.nan, a)          # noqa: E731
    raw = {name: nan(risk[..., start_of(f)] - risk[..., -1]) for name, f in WINDOWS.items()}
    return TrajectoryReading(
        steps=steps, level=float(level), batches=int(batches), critical=critical, fraction=float(fraction),
        window=int(steps[t0]), fall=nan(fall), fall_se=nan(fall_se), resolution=nan(critical * fall_se),
        moving=moving, descending=moving & (fall > 0), rising=moving & (fall < 0), diverged=diverged,
        settled_index=first, settled_at=np.where(first < 0, np.nan, steps[np.maximum(first, 0)]),
        raw_fall=raw, final=nan(risk[..., -1]), final_se=nan(se[..., -1]), method=method, **labels)


def read_trajectories(trajectories: dict, final: dict | None = None, level: float = 0.01, fraction: float = 0.25,
                      batches: int = 8, activations=None) -> TrajectoryReading:
    r"""Read every run of a trajectory file (Figures 4 and 8): arrays ``(S, nL, nA)`` over its seeds, its lengths
    and ``activations`` (default: those the file holds, softmax first), with :func:`read_risks`.

    ``final``: the same sweep's final-risk file (Figures 2 and 6), needed only when the trajectory file does not
    record its standard errors (they are then inferred,
    :func:`~softmax_as_linear.experiments.uncertainty.held_out_se`; they do not enter the test).
    """
    if activations is None:
        activations = [a for a in ACTIVATIONS if f"{a}_per_seed" in trajectories]
    activations = [checks.one_of("activations", a, ACTIVATIONS) for a in activations]
    if not activations:
        raise ValueError("trajectories: the file holds no '<activation>_per_seed' risks")
    risks, ses, how = [], [], "given"
    for activation in activations:
        risks.append(np.asarray(trajectories[f"{activation}_per_seed"], dtype=float))
        se, how = uncertainty.held_out_se(trajectories, activation, final)
        ses.append(se)
    return read_risks(trajectories["steps"], np.stack(risks, 2), np.stack(ses, 2), level, fraction, batches, how,
                      seeds=list(trajectories["seeds"]), lengths=list(trajectories["lengths"]),
                      activations=activations)


def stationary_jitter(runs: int, records: int, rho: float, seed: int = NULL_SEED) -> np.ndarray:
    r"""``runs`` stationary trajectories of ``records`` records ``(runs, records)``: AR(1) jitter of unit variance with
    lag-one correlation ``rho`` between records, :math:`x_t = \rho x_{t-1} + (1 - \rho^2)^{1/2}\varepsilon_t`,
    seeded by ``seed``."""
    if not -1 < rho < 1:
        raise ValueError(f"rho must lie in (-1, 1), got {rho!r}")
    e = np.random.default_rng(seed).standard_normal((checks.positive_int("runs", runs),
                                                     checks.positive_int("records", records)))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, records):
        x[:, t] = rho * x[:, t - 1] + math.sqrt(1 - rho ** 2) * e[:, t]
    return x


def false_alarm_rate(steps, rho: float, level: float = 0.01, fraction: float = 0.25, batches: int = 8,
                     runs: int = 10_000, seed: int = NULL_SEED) -> float:
    """The share of ``runs`` stationary runs recorded at ``steps`` (:func:`stationary_jitter` with lag-one
    correlation ``rho``) that :func:`read_risks` with these settings calls moving: the test's false-alarm rate for
    this design, ``level`` when the batch means are independent, more when the records' correlation outlasts a
    batch."""
    steps = np.asarray(steps, dtype=float)
    risk = stationary_jitter(runs, steps.size, rho, seed)
    return float(read_risks(steps, risk, level=level, fraction=fraction, batches=batches).moving.mean())


__all__ = ["TrajectoryReading", "WINDOWS", "critical_value", "false_alarm_rate", "read_risks", "read_trajectories",
           "stationary_jitter", "trend"]
