"""The chance of as many runs called moving from false alarms alone: at the simulated rate of the reading's own
design per correlation (not the nominal level), the binomial tail at that rate, and how it is printed."""

import numpy as np
import pytest
from scipy import stats as scipy_stats

from softmax_as_linear.experiments import false_alarms, trajectory

STEPS = np.arange(0, 81_000, 1000)                      # 81 records: batches of 2 over the last quarter


def stationary_reading(runs: int = 30, fraction: float = 0.25):
    risk = 0.3 + 0.01 * trajectory.stationary_jitter(runs, STEPS.size, 0.3, seed=5)
    return trajectory.read_risks(STEPS, risk, fraction=fraction)


def test_the_chances_are_binomial_tails_at_the_simulated_rates_of_the_design():
    reading = stationary_reading()
    moving = np.zeros(30, bool)
    moving[:3] = True
    fa = false_alarms.false_alarms(reading, moving, simulated=2000)
    assert (fa.flagged, fa.runs, fa.level, fa.correlations) == (3, 30, 0.01, false_alarms.CORRELATIONS)
    for rho, rate, chance in zip(fa.correlations, fa.rates, fa.chances):
        assert rate == trajectory.false_alarm_rate(STEPS, rho, 0.01, reading.fraction, reading.batches, runs=2000)
        assert chance == pytest.approx(scipy_stats.binom.sf(2, 30, rate))
    assert fa.largest_chance == max(fa.chances)
    assert fa.expected == pytest.approx(tuple(30 * r for r in fa.rates))


def test_correlated_records_raise_the_rate_above_the_level_and_so_the_chance():
    # batches of two records: the level holds for independent records, not for correlated ones
    fa = false_alarms.false_alarms(stationary_reading(), np.ones(4, bool), correlations=(0.0, 0.5), simulated=4000)
    low, high = scipy_stats.binom.ppf(5e-4, 4000, 0.01) / 4000, scipy_stats.binom.isf(5e-4, 4000, 0.01) / 4000
    assert low <= fa.rates[0] <= high
    assert fa.rates[1] > 2 * high
    assert fa.chances[1] > fa.chances[0] > scipy_stats.binom.sf(3, 4, 0.01) / 100
    assert fa.largest_chance == fa.chances[1]


def test_the_reading_gives_the_runs_and_the_design_unless_told():
    reading = stationary_reading(12, fraction=0.5)
    fa = false_alarms.false_alarms(reading, simulated=500)
    assert (fa.flagged, fa.runs) == (int(reading.moving.sum()), 12)
    assert fa.rates[0] == trajectory.false_alarm_rate(STEPS, 0.0, 0.01, 0.5, reading.batches, runs=500)
    other = false_alarms.false_alarms(reading, steps=STEPS[:41], simulated=500)
    assert other.rates[0] == trajectory.false_alarm_rate(STEPS[:41], 0.0, 0.01, 0.5, reading.batches, runs=500)
    with pytest.raises(ValueError, match="moving"):
        false_alarms.false_alarms(reading, np.zeros(0, bool))


def test_the_line_says_the_rates_and_the_chances_and_never_prints_below_1e_12():
    fa = false_alarms.FalseAlarms(19, 30, 0.01, (0.0, 0.3, 0.5), (0.011, 0.025, 0.05), (1e-30, 3e-7, 0.054))
    assert fa.text() == ("this design's false-alarm rate at level 0.01 (simulated, stationary jitter with lag-one"
                         " correlation 0 / 0.3 / 0.5 between records): 1.1% / 2.5% / 5.0%; chance of 19 or more false"
                         " alarms in 30 runs < 1e-12 / 3e-07 / 0.05")
