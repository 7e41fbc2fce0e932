"""Trained windows read against the layer's optimal windows."""
import math

import numpy as np
import pytest

from softmax_as_linear.experiments.window_reach import reach


def _files():
    steps = [0, 250, 500, 750, 1000]
    # seed 0 grows by 10 % over the last quarter, seed 1 is flat, seed 2 shrinks towards the optimum; one length (100) shared
    w = np.array([[10, 20, 30, 40, 44.0], [10, 20, 30, 50, 50.0], [10, 20, 30, 80, 70.0]])
    per_run = np.stack([np.stack([w[s], w[s]]) for s in range(3)])[:, :, None, :].repeat(2, 2)  # (S, nL, nA, T)
    trained = {"config": {"lengths": [100, 300]}, "models": ["softmax", "linear"],
               "trajectories": {"steps": steps, "w": per_run}}
    optima = {"lengths": [10, 100], "summary": {"softmax": {"log_w": [1.0, math.log(60.0)], "log_w_se": [0.1, 0.05]}}}
    return trained, optima


def test_reach_reads_distance_rate_and_steps():
    trained, optima = _files()
    out = reach(trained, optima)
    assert out["lengths"] == [100] and out["last_quarter_from_step"] == 750
    assert out["final_w"][:, 0] == pytest.approx([44.0, 50.0, 70.0])
    assert out["z"][0, 0] == pytest.approx((math.log(44) - math.log(60)) / 0.05)
    assert out["ratio"][2, 0] == pytest.approx(70 / 60)
    rate = math.log(44 / 40) / 250
    assert out["steps_to_optimum"][0, 0] == pytest.approx(math.log(60 / 44) / rate)
    assert math.isinf(out["steps_to_optimum"][1, 0])  # not moving
    assert out["steps_to_optimum"][2, 0] == pytest.approx(math.log(60 / 70) / (math.log(70 / 80) / 250))


def test_no_shared_length_is_refused():
    trained, optima = _files()
    optima["lengths"] = [10, 1000]
    with pytest.raises(ValueError, match="length"):
        reach(trained, optima)


def test_last_phase_trend_finds_a_rising_window_and_passes_a_flat_one():
    from softmax_as_linear.experiments.window_reach import last_phase_trend

    rng = np.random.default_rng(0)
    steps = np.arange(0, 4001, 50)
    noise = 0.01 * rng.standard_normal((2, steps.size))
    rising = np.exp(3.0 + 0.06 * steps / 1000 + noise[0])  # +0.06 in log w per 1,000 steps
    flat = np.exp(3.0 + noise[1])
    out = last_phase_trend(np.stack([rising, flat]), steps)
    assert out["records"] == 20 and out["from_step"] == 3050
    assert out["slope"][0] == pytest.approx(0.06, abs=0.03)
    assert out["rising"][0] and not out["flat"][0] and not out["falling"][0]
    assert out["flat"][1] or abs(out["t"][1]) < 3.0
    assert out["threshold"] == pytest.approx(2.101, abs=1e-3)  # Student's t, 18 degrees of freedom, 95 %
    # an exact line with no noise: infinite t, a trend of its sign
    exact = last_phase_trend(np.exp(-0.1 * steps / 1000)[None], steps)
    assert exact["falling"][0] and exact["slope"][0] == pytest.approx(-0.1)


def test_last_phase_trend_ar1_correction_widens_the_slope_error_of_correlated_records():
    from softmax_as_linear.experiments.window_reach import last_phase_trend

    rng = np.random.default_rng(1)
    steps = np.arange(0, 4001, 50)
    # a random walk on top of a weak trend: strongly correlated residuals
    walk = np.cumsum(0.01 * rng.standard_normal(steps.size))
    independent = 0.01 * rng.standard_normal(steps.size)
    out = last_phase_trend(np.exp(np.stack([3.0 + 0.01 * steps / 1000 + walk, 3.0 + independent])), steps)
    rho = out["lag1"]
    assert 0 <= rho[1] < rho[0] <= 0.99
    inflation = np.sqrt((1 + rho) / (1 - rho))
    np.testing.assert_allclose(out["slope_se_ar1"], out["slope_se"] * inflation)
    np.testing.assert_allclose(out["t_ar1"], out["slope"] / out["slope_se_ar1"])
    assert (out["slope_se_ar1"] >= out["slope_se"]).all()
    assert (out["dof_ar1"] >= 1).all() and (out["dof_ar1"] <= out["records"] - 2).all()
    assert (out["threshold_ar1"] >= out["threshold"]).all()
    # the corrected test finds a trend only where the uncorrected one does
    assert not (out["rising_ar1"] & ~out["rising"]).any() and not (out["falling_ar1"] & ~out["falling"]).any()
    # an exact line (residuals at rounding level) is still a trend of its sign
    exact = last_phase_trend(np.exp(-0.1 * steps / 1000)[None], steps)
    assert exact["falling_ar1"][0]


@pytest.mark.parametrize("kwargs, match", [({"start": 1.0}, "start"), ({"level": 1.5}, "level")])
def test_last_phase_trend_rejects_bad_arguments(kwargs, match):
    from softmax_as_linear.experiments.window_reach import last_phase_trend

    with pytest.raises(ValueError, match=match):
        last_phase_trend(np.ones((1, 5)), np.arange(5), **kwargs)


def test_last_phase_trend_rejects_mismatched_and_nonpositive_windows():
    from softmax_as_linear.experiments.window_reach import last_phase_trend

    with pytest.raises(ValueError, match="w must end"):
        last_phase_trend(np.ones((1, 4)), np.arange(5))
    with pytest.raises(ValueError, match="w must be positive"):
        last_phase_trend(-np.ones((1, 5)), np.arange(5))


def test_reach_also_extrapolates_additively():
    trained, optima = _files()
    out = reach(trained, optima)
    rate_w = (44.0 - 40.0) / 250
    assert out["steps_to_optimum_additive"][0, 0] == pytest.approx((60.0 - 44.0) / rate_w)
    assert math.isinf(out["steps_to_optimum_additive"][1, 0])  # not moving
    assert out["steps_to_optimum_additive"][2, 0] == pytest.approx((60.0 - 70.0) / ((70.0 - 80.0) / 250))
