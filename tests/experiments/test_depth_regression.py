"""Chapter 7's regression sweep read: paired differences are the differences of the risks on the same prompts,
every model, seed and length is there, the summary over seeds, the merge of seeds, settings named."""
import numpy as np
import pytest

from softmax_as_linear.experiments import depth_regression as dr

SETTINGS = dr.depth_settings("smoke", lengths=(4, 6, 8), seeds=(327, 0), steps=6, record_every=2, batch_size=8,
                             held_out_prompts=16, final_prompts=128, pgd_samples=200, bayes_samples=100)


@pytest.fixture(scope="module")
def readings():
    stepper, records = dr.train_depth(SETTINGS)
    return dr.depth_readings(stepper, records, SETTINGS, refs={})  # the references are tested on their own


def test_the_readings_hold_every_model_seed_and_length(readings):
    per = readings["per_seed"]
    assert readings["complete"] and readings["steps"][-1] == 6
    for name in dr.MODEL_NAMES:
        assert np.asarray(per["risk"][name]).shape == (2, 3)
        assert np.asarray(per["trajectory"][name]).shape[:2] == (2, 3)
    for name, (first, second) in dr.DIFFERENCES.items():  # paired on the same prompts: exactly the difference
        assert np.allclose(per["difference"][name], np.subtract(per["risk"][first], per["risk"][second]), atol=1e-9)
    for K in ("1", "2"):
        assert np.asarray(per["cross"][K]["output_gap"]).shape == (2, 3)
        assert (np.asarray(per["cross"][K]["output_gap"]) >= 0).all()


def test_the_summary_and_the_merge_of_seeds(readings):
    summary = dr.depth_summary(readings)
    assert summary["mean"]["linear_2"].shape == (3,) and np.isfinite(summary["se"]["linear_2"]).all()
    halves = []
    for s in range(2):
        part = {key: value for key, value in readings["per_seed"].items()}
        halves.append(_seed_slice(part, s))
    merged = dr.merge_per_seed(halves)
    assert merged["seeds"] == [327, 0]
    assert np.allclose(merged["risk"]["softmax_2"], readings["per_seed"]["risk"]["softmax_2"])
    assert merged["cross"]["n_prompts"] == readings["per_seed"]["cross"]["n_prompts"]


def _seed_slice(value, s):
    if isinstance(value, dict):
        return {k: _seed_slice(v, s) for k, v in value.items()}
    if isinstance(value, list):
        return [value[s]]
    return value


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="lengths"):
        dr.depth_settings("smoke", lengths=(10, 5))
    with pytest.raises(ValueError, match="decay_at"):
        dr.depth_settings("smoke", decay_at=0)
