r"""How likely a count of runs called still moving is from false alarms alone, at the stationarity test's simulated
false-alarm rate for the design that read them.

The trend test of :mod:`~softmax_as_linear.experiments.trajectory` has its nominal level :math:`\ell` only when its
batch means are independent; SGD's jitter is correlated from one record to the next, and then the test calls more
stationary runs moving than :math:`\ell` (its module says by how much). So the chance that :math:`k` or more of
:math:`n` stationary runs are flagged is taken here at the rate :func:`~.trajectory.false_alarm_rate` simulates for
the reading's own design (records, window, batches, level), for stationary AR(1) jitter with each lag-one correlation
:math:`\rho` of :data:`CORRELATIONS` (0, and the 0.3 to 0.5 that the paper-scale files show after a line is
removed): :math:`P(\mathrm{Bin}(n, p_\rho) \ge k)` per :math:`\rho`. A claim that runs have not converged uses the
largest of these chances.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import stats
from .trajectory import false_alarm_rate

#: The lag-one correlations between records at which the false-alarm rate is simulated.
CORRELATIONS = (0.0, 0.3, 0.5)


@dataclass(frozen=True)
class FalseAlarms:
    """``flagged`` of ``runs`` runs called moving; ``rates[i]``: the design's simulated false-alarm rate for jitter
    with lag-one correlation ``correlations[i]``; ``chances[i]``: the chance of ``flagged`` or more false alarms at
    that rate."""

    flagged: int
    runs: int
    level: float
    correlations: tuple
    rates: tuple
    chances: tuple

    @property
    def largest_chance(self) -> float:
        """The largest chance over the correlations, which a claim "more than false alarms explain" is held to."""
        return max(self.chances)

    @property
    def expected(self) -> tuple:
        """How many false alarms each rate expects among ``runs`` stationary runs."""
        return tuple(self.runs * r for r in self.rates)

    def text(self) -> str:
        """The simulated rates and the chances, per correlation, on one line."""
        return (f"this design's false-alarm rate at level {self.level:g} (simulated, stationary jitter with lag-one"
                " correlation " + " / ".join(f"{c:g}" for c in self.correlations) + " between records): "
                + " / ".join(f"{r:.1%}" for r in self.rates) + f"; chance of {self.flagged} or more false alarms in"
                f" {self.runs} runs " + " / ".join(_chance(c) for c in self.chances))


def _chance(chance: float) -> str:
    """A chance as printed: two decimals down to 0.01, one digit below, and a bound below 1e-12."""
    if chance >= 0.01:
        return f"{chance:.2f}"
    return f"{chance:.0e}" if chance >= 1e-12 else "< 1e-12"


def false_alarms(reading, moving=None, steps=None, correlations=CORRELATIONS, simulated: int = 10_000) -> FalseAlarms:
    """The chance of as many runs called moving as ``moving`` holds (default: every run of ``reading``, a
    :class:`~.trajectory.TrajectoryReading`) from false alarms alone, at the false-alarm rate that
    :func:`~.trajectory.false_alarm_rate` simulates (``simulated`` stationary runs) for the reading's design (its
    ``steps`` unless given, ``level``, ``fraction``, ``batches``) and each lag-one correlation of ``correlations``."""
    moving = np.asarray(reading.moving if moving is None else moving, dtype=bool)
    steps = reading.steps if steps is None else steps
    flagged, runs = int(moving.sum()), int(moving.size)
    if runs == 0:
        raise ValueError("moving: no runs to count")
    rates = tuple(false_alarm_rate(steps, rho, reading.level, reading.fraction, reading.batches, runs=simulated)
                  for rho in correlations)
    chances = tuple(stats.chance_of_at_least(flagged, runs, r) for r in rates)
    return FalseAlarms(flagged, runs, reading.level, tuple(correlations), rates, chances)


__all__ = ["CORRELATIONS", "FalseAlarms", "false_alarms"]
