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
