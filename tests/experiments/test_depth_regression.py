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
    for name, (first, second) in dr.DIFFERENCES.items():
        assert np.allclose(per["difference"][name], np.subtract(per["risk"][first], per["risk"][second]), atol=1e-9)
        # paired on the same prompts: the difference's standard error is far below that of independent prompts
        # (the four models start from one block and see the same batches, so their losses move together)
        unpaired = np.hypot(per["risk_se"][first], per["risk_se"][second])
        assert (np.asarray(per["difference_se"][name]) < 0.5 * unpaired).all(), name
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


def test_a_diverged_run_stays_diverged_in_the_readings_and_the_summary():
    """A run stopped by divergence keeps the huge weights of its last step and NaN records after it: its risks, falls
    and differences are NaN (not scored with weights made finite), the summary leaves it out of the means over seeds
    and counts it."""
    import torch

    stepper, records = dr.train_depth(SETTINGS)
    a = dr.MODEL_NAMES.index("softmax_1")
    with torch.no_grad():
        stepper.U[0, 1, a] *= 1e3  # what a diverged run leaves
    stepper.alive[0, 1, a] = False
    stepper.diverged_at[0, 1, a] = 3
    for name in records.history:
        records.history[name][0, 1, a, [k for k, step in enumerate(records.steps) if step > 3]] = np.nan
    data = dr.depth_readings(stepper, records, SETTINGS, refs={})
    per = data["per_seed"]
    assert np.isnan(per["risk"]["softmax_1"][0][1]) and np.isfinite(per["risk"]["softmax_1"][1][1])
    assert np.isfinite(per["risk"]["linear_1"][0][1])
    for fraction in per["fall"]:
        assert np.isnan(per["fall"][fraction]["softmax_1"][0][1])
    assert np.isnan(per["difference"]["softmax_minus_linear_1"][0][1])
    assert np.isnan(per["difference"]["second_layer_softmax"][0][1])
    summary = dr.depth_summary(data)
    assert summary["diverged"]["softmax_1"].tolist() == [0, 1, 0] and summary["diverged"]["linear_1"].sum() == 0
    assert summary["mean"]["softmax_1"][1] == per["risk"]["softmax_1"][1][1]  # the one live seed
    assert np.isfinite(summary["mean"]["softmax_1"]).all() and np.isnan(summary["se"]["softmax_1"][1])
