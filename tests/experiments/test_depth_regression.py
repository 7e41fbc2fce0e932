"""Chapter 7's regression sweep read: paired differences are the differences of the risks on the same prompts,
every model, seed and length is there, the summary over seeds, the merge of seeds, settings named."""
import numpy as np
import pytest

from softmax_as_linear.experiments import depth_regression as dr
from softmax_as_linear.experiments.pipeline import join_seeds

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
    merged = join_seeds(halves)
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


def test_the_stage_window_leaves_out_the_record_at_the_decay():
    assert dr.stage_window(list(range(0, 4001, 50)), 3000) == (8, 3250)     # the lecture sweep: 21 records, 8 of 2
    assert dr.stage_window(list(range(0, 6001, 100)), 4500) == (7, 4700)    # its warm stage: 16 records, 7 of 2
    with pytest.raises(ValueError, match="decay_step"):
        dr.stage_window(list(range(0, 4001, 50)), 3010)
    with pytest.raises(ValueError, match="too few"):
        dr.stage_window(list(range(0, 101, 10)), 90)


def test_read_stages_flags_a_descending_run_and_not_stationary_ones():
    steps = list(range(0, 4001, 50))
    rng = np.random.default_rng(0)
    risk = 0.3 + 1e-3 * rng.standard_normal((2, 3, 4, len(steps)))
    ramp = np.clip((np.array(steps) - 3000) / 1000, 0, 1)
    risk[1, 2, 3] -= 0.05 * ramp                                            # seed 0, L = 8, linear_2: still falling
    per = {"seeds": [327, 0], "trajectory": {m: risk[:, :, a] for a, m in enumerate(dr.MODEL_NAMES)},
           "trajectory_se": {m: np.full((2, 3, len(steps)), 1e-3) for m in dr.MODEL_NAMES}}
    data = {"steps": steps, "decay_step": 3000, "lengths": [4, 6, 8], "per_seed": per}
    reading = dr.read_stages(data)["main"]
    assert reading.shape == (2, 3, 4) and reading.batches == 8
    assert reading.descending[reading.index(0, 8, "linear_2")]
    assert reading.moving.sum() <= 2                                       # the ramp, and at most one false alarm


@pytest.mark.parametrize("source", dr.STAGE_SOURCES)
def test_a_diverged_second_stage_run_is_scored_nan_as_read_stages_calls_it(source):
    """The warm stage and its equal-budget control score a diverged run with NaN weights (as the sweep's readings
    do), not with the blown-up weights of its last step: its risk and its paired differences are NaN, the other runs'
    stay finite, and the warm stage's gap slope leaves the seed out."""
    import torch

    stepper, records = dr.train_depth(SETTINGS)
    U, v = (x.double().numpy() for x in dr.final_weights(stepper))
    warm = dr.warm_settings("smoke", steps=6, record_every=2)
    second, second_records = dr.train_warm(SETTINGS, warm, U, v, source=source)
    with torch.no_grad():
        second.U[0, 1, 0] *= 1e3  # what a diverged run leaves
    second.alive[0, 1, 0] = False
    second.diverged_at[0, 1, 0] = 3
    for name in second_records.history:
        second_records.history[name][0, 1, 0, [k for k, step in enumerate(second_records.steps) if step > 3]] = np.nan
    read = dr.warm_readings(second, second_records, SETTINGS, warm, U, v)
    assert np.isnan(read["risk"][0][1]) and np.isfinite(read["risk"][1][1]) and np.isfinite(read["risk"][0][0])
    for name in dr.MODEL_NAMES:
        assert np.isnan(read["minus"][name][0][1]) and np.isfinite(read["minus"][name][1][1])
