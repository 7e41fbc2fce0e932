"""The trajectory reader on synthetic trajectories whose answers are known: a plateau, a drop and a flat end; a
slow steady descent; pure noise (false alarms against the binomial bound of the test level); diverged runs."""

import numpy as np
import pytest
from scipy import stats as scipy_stats

from softmax_as_linear.experiments import trajectory

STEPS = np.arange(0, 301_000, 1000)                     # 301 records, as the paper-scale files


def plateau_drop_flat():
    """Risk 1 up to record 100, a linear drop of 0.01 per record to 0.505 at record 150, then 0.505; s.e. 0.01."""
    t = np.arange(STEPS.size)
    return np.clip(1.0 - 0.01 * (t - 100), 0.505, 1.0), np.full(STEPS.size, 0.01)


def test_plateau_then_drop_then_flat_settles_where_the_intervals_meet():
    risk, se = plateau_drop_flat()
    reading = trajectory.read_risks(STEPS, risk, se, k=3)
    # records overlap the flat end's interval [0.475, 0.535] when R_t - 0.03 <= 0.535: from record 143.5, so 144
    assert reading.settled_index == 144 and reading.settled_at == 144_000
    assert not reading.moving and not reading.diverged
    assert reading.z("tenth") == 0 and reading.z("quarter") == 0
    # noise well inside the standard errors moves the answer by a few records at most
    noisy = risk + 0.002 * np.random.default_rng(0).standard_normal(risk.shape)
    assert 140 <= trajectory.read_risks(STEPS, noisy, se).settled_index <= 150


def test_a_slow_steady_descent_is_still_moving_and_settles_only_at_the_end():
    t = np.arange(STEPS.size)
    risk, se = 1.0 - 0.0029 * t, np.full(STEPS.size, 0.01)
    reading = trajectory.read_risks(STEPS, risk, se, k=3)
    # 0.0029 (300 - t) <= 2 * 3 * 0.01 from t = 279.3, so 280: only the last records overlap the end
    assert reading.settled_index == 280
    assert reading.windows["tenth"] == 270_000 and reading.windows["quarter"] == 225_000
    np.testing.assert_allclose(reading.z("tenth"), 0.087 / 0.02)
    np.testing.assert_allclose(reading.z("quarter"), 0.2175 / 0.02)
    assert reading.moving and reading.descending and not reading.rising
    # rising the same way is moving too, the other way
    up = trajectory.read_risks(STEPS, 2 - risk, se)
    assert up.moving and up.rising and not up.descending


def test_pure_noise_is_called_moving_no_more_often_than_the_test_level():
    rng = np.random.default_rng(2024)
    n, s, k = 4000, 0.01, 3.0
    risk = 0.5 + s * rng.standard_normal((n, STEPS.size))
    se = np.full_like(risk, s)
    level = trajectory.moving_false_alarm(k)
    assert abs(level - 0.0027) < 1e-4
    allowed = scipy_stats.binom.isf(1e-3, n, level)     # exceeded with chance below 0.1 % if the level holds
    # with an exact paired standard error the test has exactly its level
    t0 = int(np.flatnonzero(STEPS == 270_000)[0])
    fall = risk[:, t0] - risk[:, -1]
    exact = trajectory.read_risks(STEPS, risk, se, k, paired={"tenth": (fall, np.full(n, s * np.sqrt(2)))})
    assert exact.moving.sum() <= allowed
    assert exact.moving.sum() >= 1                      # and it is a real test: at this n some draws cross it
    # with the unpaired bound s1 + s2 it is more conservative still
    assert trajectory.read_risks(STEPS, risk, se, k).moving.sum() <= exact.moving.sum()
    # settled from the first record, but for at most the union bound's share, at a larger k
    k_settle = 5.0
    bound = trajectory.settle_false_alarm(k_settle, STEPS.size)
    late = (trajectory.read_risks(STEPS, risk, se, k_settle).settled_index > 0).sum()
    assert bound < 0.001 and late <= scipy_stats.binom.isf(1e-3, n, bound)


def test_diverged_runs_are_nan_and_not_moving():
    risk, se = plateau_drop_flat()
    runs = np.stack([risk, risk.copy()])
    runs[1, 200:] = np.nan                              # the second run stopped at record 200
    reading = trajectory.read_risks(STEPS, runs, np.stack([se, se]))
    assert reading.diverged.tolist() == [False, True]
    assert reading.settled_index.tolist() == [144, -1] and np.isnan(reading.settled_at[1])
    assert np.isnan(reading.fall["tenth"][1]) and np.isnan(reading.final[1]) and not reading.moving[1]
    assert "diverged" in reading.line((1,))


def _file(measured: bool = True, with_changes: bool = False):
    """A trajectory file: 2 seeds, 2 lengths, both activations, 11 records; seed 8's softmax at L = 100 still falls."""
    steps = list(range(0, 1001, 100))
    flat = np.r_[np.linspace(1.0, 0.5, 4), np.full(7, 0.5)]
    falling = np.linspace(1.0, 0.2, 11)
    softmax = np.array([[flat, flat], [flat, falling]])
    linear = np.array([[flat, flat], [flat, flat]]) - 0.1
    data = {"seeds": [4, 8], "lengths": [10, 100], "steps": steps, "softmax_per_seed": softmax.tolist(),
            "linear_per_seed": linear.tolist(), "provenance": {"settings": {"eval_prompts": 400}}}
    if measured:
        data["softmax_se_per_seed"] = np.full_like(softmax, 0.01).tolist()
        data["linear_se_per_seed"] = np.full_like(linear, 0.01).tolist()
    if with_changes:                                    # a paired change over the last tenth, seeds listed 8, 4
        data["changes"] = {"tenth": {"from_step": 900, "to_step": 1000, "n_prompts": 50, "seeds": [8, 4],
                                     "lengths": [10, 100], "softmax": [[0.0, 0.08], [0.0, 0.0]],
                                     "softmax_se": [[0.001, 0.001], [0.001, 0.001]],
                                     "linear": [[0.0, 0.0], [0.0, 0.0]], "linear_se": [[0.001, 0.001], [0.001, 0.001]]}}
    return data


def test_read_trajectories_reads_every_seed_length_and_activation():
    reading = trajectory.read_trajectories(_file())
    assert reading.shape == (2, 2, 2) and reading.activations == ["softmax", "linear"]
    assert reading.settled_at[0, 0, 0] == 300 and reading.settled_at[1, 1, 0] == 1000   # only at its last record
    # the falling run over the last tenth: 0.08 against the bound 0.02, 4 s.e.: still descending
    assert reading.moving.tolist() == [[[False, False], [False, False]], [[False, False], [True, False]]]
    run = reading.run(8, 100, "softmax")
    assert run["descending"] and abs(run["z"]["tenth"] - 4) < 1e-9 and run["settled_at"] == 1000
    text = reading.summary(seeds=[8], lengths=[100])
    assert "seed 8, L = 100, softmax: settled at step 1,000" in text and "still descending" in text
    assert "unpaired bound" in text
    with pytest.raises(ValueError, match="seed=5"):
        reading.run(5, 10, "softmax")
    with pytest.raises(ValueError, match="window"):
        reading.z("third")


def test_read_trajectories_uses_paired_changes_where_stored():
    reading = trajectory.read_trajectories(_file(with_changes=True))
    np.testing.assert_allclose(reading.z("tenth")[1, 1, 0], 80)    # 0.08 / 0.001, seed 8 from the reordered rows
    assert reading.method["tenth"].startswith("paired") and reading.method["quarter"].startswith("unpaired")


def test_read_trajectories_infers_standard_errors_from_the_final_file_or_says_so():
    data = _file(measured=False)
    with pytest.raises(ValueError, match="pass final"):
        trajectory.read_trajectories(data)
    final = {"seeds": [4, 8], "lengths": [10, 100], "final_prompts": 10_000,
             "softmax_per_seed": [[0.5, 0.5], [0.5, 0.2]], "softmax_se_per_seed": [[0.01, 0.01], [0.01, 0.004]],
             "linear_per_seed": [[0.4, 0.4], [0.4, 0.4]], "linear_se_per_seed": [[0.008, 0.008], [0.008, 0.008]]}
    reading = trajectory.read_trajectories(data, final)
    # relative sd 0.01 * 100 / 0.5 = 2, 400 held-out prompts: se = 2 R / 20 = 0.1 R
    np.testing.assert_allclose(reading.final_se[0, 0, 0], 0.1 * 0.5)
    assert reading.method["records"].startswith("inferred")


def test_bad_input_is_refused_with_the_argument_named():
    risk, se = plateau_drop_flat()
    with pytest.raises(ValueError, match="k"):
        trajectory.read_risks(STEPS, risk, se, k=0)
    with pytest.raises(ValueError, match="one shape"):
        trajectory.settled_index(risk, se[:-1])
    with pytest.raises(ValueError, match="steps"):
        trajectory.read_risks(STEPS[::-1], risk, se)
    with pytest.raises(ValueError, match="non-negative"):
        trajectory.settled_index(risk, -se)
    with pytest.raises(ValueError, match="activations"):
        trajectory.read_trajectories(_file(), activations=["relu"])


def test_table_shows_one_seed_over_the_lengths():
    text = trajectory.read_trajectories(_file()).table(8)
    rows = text.splitlines()
    assert rows[0].startswith("seed 8, k = 3") and rows[0].split()[-2:] == ["10", "100"]
    assert rows[1].split()[-2:] == ["300", "1,000"]                # settled at 300 and 1,000 steps
    assert rows[4].split()[-2:] == [".", "v"]                      # L = 100 still descending
    assert len(rows) == 9                                          # a header and four rows per activation


def test_a_paired_change_beyond_k_moves_the_settled_record_after_its_window():
    # flat within the pairwise bound, but a precise paired fall over the last tenth: not settled before it
    risk, se = np.full(STEPS.size, 0.5), np.full(STEPS.size, 0.01)
    n = STEPS.size
    fine = trajectory.read_risks(STEPS, risk, se, paired={"tenth": (np.float64(0.004), np.float64(0.001))})
    assert fine.moving and fine.descending and fine.settled_index == 271 and fine.settled_at == 271_000
    still = trajectory.read_risks(STEPS, risk, se, paired={"tenth": (np.float64(0.002), np.float64(0.001))})
    assert not still.moving and still.settled_index == 0 and n == 301
