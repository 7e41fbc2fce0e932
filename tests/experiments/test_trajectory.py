"""The trajectory reader on synthetic trajectories whose answers are known: its false-alarm rate on stationary runs
(white and autocorrelated jitter, a drop then flat) measured by simulation against a binomial interval of its
level, its power on descents (slow, decelerating, a late escape), what its resolution means, diverged runs, files."""

import numpy as np
import pytest
from scipy import stats as scipy_stats

from softmax_as_linear.experiments import trajectory

STEPS = np.arange(0, 301_000, 1000)                     # 301 records, as the paper-scale files
RUNS = 4000                                             # simulated runs per scenario
LEVEL = 0.01


def jitter(rho: float, seed: int, runs: int = RUNS) -> np.ndarray:
    """Stationary AR(1) jitter ``(runs, T)`` of unit variance and lag-one correlation ``rho``, like SGD's."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((runs, STEPS.size))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, STEPS.size):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho ** 2) * e[:, t]
    return x


def interval(level: float = LEVEL, runs: int = RUNS) -> tuple[float, float]:
    """The counts of false alarms that ``runs`` tests at ``level`` stay within with probability 99.9 %."""
    return scipy_stats.binom.ppf(5e-4, runs, level), scipy_stats.binom.isf(5e-4, runs, level)


def test_the_critical_value_is_the_quantile_of_the_pivot():
    assert abs(trajectory.critical_value(0.01, 8) - 3.63) < 0.02
    # an independent simulation of the statistic agrees with the tabulated quantile
    means = np.random.default_rng(7).standard_normal((200_000, 8))
    slope, se = trajectory.trend(np.arange(8), means, 8)
    rate = np.mean(np.abs(slope / se) > trajectory.critical_value(0.01, 8))
    low, high = interval(0.01, 200_000)
    assert low <= rate * 200_000 <= high


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.5])
def test_stationary_jitter_is_called_moving_at_the_level(rho):
    risk = 0.25 + 1e-4 * jitter(rho, seed=int(10 * rho))
    reading = trajectory.read_risks(STEPS, risk)
    low, high = interval()
    assert low <= reading.moving.sum() <= high, (rho, reading.moving.mean())
    # and the settled stretch of a stationary run starts in its first records for all but about the level's share
    assert np.mean(reading.settled_at > 0.1 * STEPS[-1]) <= 2 * LEVEL


def test_strongly_correlated_jitter_raises_the_rate_as_documented():
    # rho = 0.7 between records: batches of 9 records are about 1.6 correlation times; the rate grows to ~2-3 %
    rate = trajectory.read_risks(STEPS, jitter(0.7, seed=3)).moving.mean()
    assert LEVEL < rate < 4 * LEVEL


def test_a_drop_then_flat_settles_after_the_drop_and_is_not_moving():
    t = np.arange(STEPS.size)
    drop = np.clip(1.0 - 0.01 * (t - 100), 0.5, 1.0)    # plateau, a fall of 0.5 over records 100 to 150, flat
    risk = drop + 1e-3 * jitter(0.3, seed=4)
    reading = trajectory.read_risks(STEPS, risk)
    low, high = interval()
    assert low <= reading.moving.sum() <= high
    settled = reading.settled_at[~reading.moving]
    assert np.all(settled >= 140_000) and np.median(settled) <= 160_000


def test_descents_are_found_and_the_resolution_is_the_fall_found_half_the_time():
    ramp = np.clip((STEPS - STEPS[-1] * 0.75) / (STEPS[-1] * 0.25), 0, 1)      # 0 -> 1 over the last quarter
    noise = 1e-4 * jitter(0.3, seed=5, runs=2000)
    base = trajectory.read_risks(STEPS, 0.25 + noise)
    resolution = float(np.median(base.resolution))
    # a slow linear descent of twice the resolution over the test window: found nearly always
    slow = trajectory.read_risks(STEPS, 0.25 - 2 * resolution * ramp + noise)
    assert slow.descending.mean() > 0.9 and not slow.rising.any()
    # at the resolution itself, about half the time (the resolution is the fall detected with chance 1/2)
    edge = trajectory.read_risks(STEPS, 0.25 - resolution * ramp + noise)
    assert 0.3 < edge.descending.mean() < 0.7
    # a decelerating descent (an exponential tail) and a late escape from a plateau: curvature does not hide them
    # (each falls by four resolutions over the last quarter, most of it early in that window)
    decay = np.exp(-STEPS / 60_000)
    tail = trajectory.read_risks(STEPS, 0.25 + 4 * resolution * decay / (decay[225] - decay[-1]) + noise)
    late = trajectory.read_risks(STEPS, 0.25 - 4 * resolution / (1 + np.exp(-(STEPS - 240_000) / 8_000)) + noise)
    assert tail.descending.mean() > 0.9 and late.descending.mean() > 0.9
    print(f"power: slow {slow.descending.mean():.3f}, at the resolution {edge.descending.mean():.3f},"
          f" decelerating {tail.descending.mean():.3f}, late escape {late.descending.mean():.3f}")
    # rising the same way is moving the other way
    up = trajectory.read_risks(STEPS, 0.25 + 2 * resolution * ramp + noise)
    assert up.rising.mean() > 0.9 and not up.descending.any()


def test_diverged_runs_are_nan_and_not_moving():
    risk = np.stack([np.full(STEPS.size, 0.5), np.full(STEPS.size, 0.5)]) + 1e-4 * jitter(0.0, 6, 2)
    risk[1, 200:] = np.nan                              # the second run stopped at record 200
    reading = trajectory.read_risks(STEPS, risk)
    assert reading.diverged.tolist() == [False, True]
    assert reading.settled_index[1] == -1 and np.isnan(reading.settled_at[1]) and np.isnan(reading.fall[1])
    assert np.isnan(reading.final[1]) and not reading.moving[1]
    assert "diverged" in reading.line((1,))


def _file(measured: bool = True):
    """A trajectory file: 2 seeds, 2 lengths, both activations, 41 records; seed 8's softmax at L = 100 still falls."""
    steps = list(range(0, 4001, 100))
    noise = 1e-4 * jitter(0.0, 8, 8)[:, :41].reshape(2, 2, 2, 41)
    flat = np.r_[np.linspace(1.0, 0.5, 4), np.full(37, 0.5)]
    falling = np.linspace(1.0, 0.2, 41)
    softmax = np.array([[flat, flat], [flat, falling]]) + noise[0]
    linear = np.array([[flat, flat], [flat, flat]]) - 0.1 + noise[1]
    data = {"seeds": [4, 8], "lengths": [10, 100], "steps": steps, "softmax_per_seed": softmax.tolist(),
            "linear_per_seed": linear.tolist(), "provenance": {"settings": {"eval_prompts": 400}}}
    if measured:
        data["softmax_se_per_seed"] = np.full_like(softmax, 0.01).tolist()
        data["linear_se_per_seed"] = np.full_like(linear, 0.01).tolist()
    return data


def test_read_trajectories_reads_every_seed_length_and_activation():
    reading = trajectory.read_trajectories(_file(), fraction=0.5)
    assert reading.shape == (2, 2, 2) and reading.activations == ["softmax", "linear"]
    assert reading.moving.tolist() == [[[False, False], [False, False]], [[False, False], [True, False]]]
    assert reading.settled_at[0, 0, 0] == 300 and np.isnan(reading.settled_at[1, 1, 0])  # the fall ends at step 300
    run = reading.run(8, 100, "softmax")
    assert run["descending"] and abs(run["fall"] - 0.4) < 0.01 and run["final_se"] == 0.01
    text = reading.summary(seeds=[8], lengths=[100])
    assert "seed 8, L = 100, softmax: fall over the last 0.5 of training" in text and "still descending" in text
    assert "batch means" in text
    with pytest.raises(ValueError, match="seed=5"):
        reading.run(5, 10, "softmax")


def test_read_trajectories_infers_standard_errors_from_the_final_file_or_says_so():
    data = _file(measured=False)
    with pytest.raises(ValueError, match="pass final"):
        trajectory.read_trajectories(data)
    final = {"seeds": [4, 8], "lengths": [10, 100], "final_prompts": 10_000,
             "softmax_per_seed": [[0.5, 0.5], [0.5, 0.2]], "softmax_se_per_seed": [[0.01, 0.01], [0.01, 0.004]],
             "linear_per_seed": [[0.4, 0.4], [0.4, 0.4]], "linear_se_per_seed": [[0.008, 0.008], [0.008, 0.008]]}
    reading = trajectory.read_trajectories(data, final, fraction=0.5)
    assert abs(reading.final_se[0, 0, 0] - 0.1 * reading.final[0, 0, 0]) < 1e-9
    assert reading.method.startswith("inferred")


def test_bad_input_is_refused_with_the_argument_named():
    risk = np.full(STEPS.size, 0.5)
    with pytest.raises(ValueError, match="level"):
        trajectory.read_risks(STEPS, risk, level=0)
    with pytest.raises(ValueError, match="fraction"):
        trajectory.read_risks(STEPS, risk, fraction=1.5)
    with pytest.raises(ValueError, match="batches"):
        trajectory.read_risks(STEPS, risk, batches=2)
    with pytest.raises(ValueError, match="fraction"):
        trajectory.read_risks(STEPS[:20], risk[:20])    # 5 records in the last quarter: too few for 8 batches
    with pytest.raises(ValueError, match="steps"):
        trajectory.read_risks(STEPS[::-1], risk)
    with pytest.raises(ValueError, match="se"):
        trajectory.read_risks(STEPS, risk, risk[:-1])
    with pytest.raises(ValueError, match="activations"):
        trajectory.read_trajectories(_file(), activations=["relu"])


def test_table_shows_one_seed_over_the_lengths():
    rows = trajectory.read_trajectories(_file(), fraction=0.5).table(8).splitlines()
    assert rows[0].startswith("seed 8 (last 0.5, level 0.01)") and rows[0].split()[-2:] == ["10", "100"]
    assert rows[4].split()[-2:] == [".", "v"]                      # L = 100 still descending
    assert rows[5].split()[-1] == "-"                              # so not settled
    assert len(rows) == 11                                         # a header and five rows per activation


def test_false_alarm_rate_is_the_level_for_independent_records_and_grows_with_their_correlation():
    steps = np.arange(0, 4001, 50)                      # Chapter 7's records: the last quarter has 21, batches of 2
    white = trajectory.false_alarm_rate(steps, 0.0, runs=RUNS, seed=1)
    low, high = interval()
    assert low <= white * RUNS <= high
    correlated = trajectory.false_alarm_rate(steps, 0.5, runs=RUNS, seed=1)
    assert correlated > 2 * LEVEL
    # the simulated jitter has the lag-one correlation asked for
    x = trajectory.stationary_jitter(RUNS, 301, 0.5, seed=2)
    assert abs(np.mean(x[:, 1:] * x[:, :-1]) - 0.5) < 0.02 and abs(np.mean(x**2) - 1) < 0.02
    with pytest.raises(ValueError, match="rho"):
        trajectory.stationary_jitter(10, 10, 1.0)


def test_the_first_records_left_over_by_the_batches_are_read_too():
    """65 records cut back from the end into batches of 2 leave record 0 over: a run whose risk was 100 times its
    final level there has not settled since step 0 (it has since the next record)."""
    steps = np.arange(0, 6401, 100)
    risk = 0.01 + 1e-4 * np.random.default_rng(1).standard_normal((4, steps.size))
    risk[:, 0] = 1.0
    reading = trajectory.read_risks(steps, risk)
    assert not reading.moving.any()
    assert (reading.settled_index == 1).all() and (reading.settled_at == 100).all()
    flat = trajectory.read_risks(steps, np.where(np.arange(steps.size) == 0, 0.01, risk))
    assert (flat.settled_at == 0).all()  # a record at the final level there changes nothing


@pytest.mark.parametrize("records", [64, 65])
def test_the_settled_band_has_its_level_on_stationary_records(records):
    """The settled band's width, pinned by its false-alarm rate: on independent Gaussian records (a stationary run
    whose batch means are independent), the share of runs not called moving that the band calls unsettled at some
    batch (``settled_index > 0``) is the nominal level, within four binomial standard errors (Bonferroni over the
    batches is nearly exact here: each batch's chance is small). A band 1.5 times wider gives about 0.0001; one 1.5
    times narrower, about 0.1. 65 records leave one over at the start (its band widened for its shorter mean)."""
    level, runs = 0.01, 20_000
    steps = 100.0 * np.arange(records)
    reading = trajectory.read_risks(steps, np.random.default_rng(5).standard_normal((runs, records)), level=level)
    still = ~reading.moving
    rate = float((reading.settled_index[still] > 0).mean())
    se = np.sqrt(level * (1 - level) / still.sum())
    assert abs(rate - level) < 4 * se, (rate, level, se)
