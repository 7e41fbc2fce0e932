"""The tracking experiment at toy size: its readings have the stated shapes, start at zero distance, and say where
they came from."""
import numpy as np
import pytest

from softmax_as_linear.experiments.depth_tracking import TrackingSettings, depth_tracking, tracking_slopes

TINY = TrackingSettings(d=2, seeds=(0, 1), lengths=(4, 6, 8), depths=(1, 2), batch_size=4, steps=4, records=2,
                        held_out_prompts=8)


@pytest.mark.slow
def test_depth_tracking_readings():
    out = depth_tracking(TINY, device="cpu")
    assert out["settings"]["lengths"] == [4, 6, 8] and out["provenance"]["device"] == "cpu"
    assert "commit" in out["provenance"] and out["provenance"]["wall_seconds"] >= 0
    for K in ("1", "2"):
        reading = out["depths"][K]
        assert np.allclose(reading["times"], [0.0, 0.1, 0.2])  # 2 lr k, lr = 0.025 on the MSE
        for activation in ("softmax", "linear"):
            entry = reading["by_activation"][activation]
            distance = np.array(entry["distance"])
            assert distance.shape == (2, 3, 3) and np.all(distance[..., 0] == 0)  # same start
            assert np.allclose(np.array(entry["output_drift"])[..., 0], 0, atol=1e-12)
            total, sampling = np.array(entry["output_total"]), np.array(entry["output_sampling"])
            assert np.allclose(total[..., 0], sampling[..., 0])  # at the start the gap is the prompt's alone
            assert len(entry["distance_slopes"]["per_seed"]) == 2


def test_slopes_leave_out_diverged_seeds_and_settings_are_checked():
    sup = np.array([[1.0, 0.5, 0.25], [1.0, np.nan, 0.3], [2.0, 1.0, 0.5]])
    out = tracking_slopes([2, 4, 8], sup)
    assert out["seeds_left_out"] == 1 and np.allclose(out["per_seed"], [-1, -1]) and np.isclose(out["mean"], -1)
    with pytest.raises(ValueError, match="lengths"):
        TrackingSettings(lengths=(8, 16))
    with pytest.raises(ValueError, match="records"):
        TrackingSettings(steps=3, records=5)
