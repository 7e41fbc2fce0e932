"""Chapter 6's sweeps read run by run: the standard errors inferred from the final evaluation, and the reading of a
settled run and of a run still descending."""

import numpy as np
import pytest

from softmax_as_linear.experiments import beyond_reading

STEPS = list(range(0, 4100, 100))                      # 41 records, as a paper-scale sweep (81 at 500 steps)


def sweep(descending_softmax: bool) -> dict:
    """One seed, two lengths; every model flat at 0.1 after record 5, except (optionally) softmax at the second
    length, which keeps falling by 0.002 per record. Final evaluation on 4x the held-out prompts, relative s.e. 0.1 %."""
    t = np.arange(len(STEPS))
    jitter = 1e-4 * np.random.default_rng(0).standard_normal(t.size)
    flat = np.where(t < 5, 0.3 - 0.04 * t, 0.1) + jitter
    risks = {m: [[flat.tolist(), flat.tolist()]] for m in beyond_reading.BEYOND_MODELS}
    if descending_softmax:
        risks["softmax"] = [[flat.tolist(), (0.2 - 0.002 * t + jitter).tolist()]]
    final_risk = {m: [[row[-1] for row in risks[m][0]]] for m in beyond_reading.BEYOND_MODELS}
    return {"steps": STEPS, "eval_risk": risks,
            "final": {"seeds": [327], "lengths": [10, 100], "final_prompts": 4096,
                      "risk": final_risk, "risk_se": {m: [[0.001 * r for r in final_risk[m][0]]] for m in final_risk}},
            "provenance": {"settings": {"eval_prompts": 1024}}}


def test_standard_errors_are_inferred_from_the_final_evaluation():
    risk, se, how = beyond_reading.record_risks(sweep(False))
    assert risk.shape == se.shape == (1, 2, 4, len(STEPS)) and how.startswith("inferred")
    np.testing.assert_allclose(se, risk * 0.001 * 2)        # relative s.e. 0.1 %, sqrt(4096 / 1024) = 2


def test_a_settled_sweep_and_a_run_still_descending():
    reading = beyond_reading.read_sweep(sweep(False))
    assert reading.activations == list(beyond_reading.BEYOND_MODELS)
    assert not reading.moving.any() and np.all(reading.settled_at <= 500)
    reading = beyond_reading.read_sweep(sweep(True))
    i = reading.index(327, 100, "softmax")
    # falls 0.04 over the last half against its own jitter of 1e-4 per record
    assert reading.descending[i] and reading.moving.sum() == 1 and abs(reading.fall[i] - 0.04) < 1e-3


def test_measured_standard_errors_are_used_when_the_sweep_stores_them():
    run = sweep(False)
    run["eval_se"] = {m: (np.asarray(run["eval_risk"][m]) * 0.5).tolist() for m in beyond_reading.BEYOND_MODELS}
    _, se, how = beyond_reading.record_risks(run)
    assert how.startswith("measured") and np.allclose(se[0, 0, 0, -1], 0.5 * run["eval_risk"]["softmax"][0][0][-1])


def test_not_a_sweep_is_named():
    with pytest.raises(ValueError, match="eval_risk"):
        beyond_reading.record_risks({"steps": STEPS})


def test_the_paper_scale_reading_of_a_shipped_sweep():
    """The reading Chapter 6 checks its claims on: its numbers agree with those computed directly from the file."""
    from softmax_as_linear.core import stats
    from softmax_as_linear.experiments.false_alarms import false_alarms
    from softmax_as_linear.experiments.result_files import saved_beyond

    data = saved_beyond("uniform", "paper")
    reading = beyond_reading.paper_reading(data, "uniform")
    lines = reading.text.splitlines()
    assert lines[0].startswith(f"uniform: {len(data['tracking']['seeds'])} seeds, L up to {data['final']['lengths'][-1]}")
    assert len(lines) == 15 and reading.tracking_intervals == [tuple(i) for i in
                                                             data["tracking"]["slopes"]["softmax"]["per_seed_interval"]]
    difference = np.array(data["final"]["paired_difference"])
    above = int((difference[:, -1] > 3 * np.array(data["final"]["paired_difference_se"])[:, -1]).sum())
    assert reading.above_share == stats.proportion_interval(above, len(difference))
    assert 0 < reading.false_alarm_chance <= 1 and len(reading.excess_slope_highs) == len(difference)
    moving = beyond_reading.read_sweep(data).moving                     # (seeds, lengths, models): limits one per seed
    assert reading.moving == int(moving[:, :, :2].sum() + moving[:, 0, 2:].sum())
    assert reading.runs == moving[:, :, :2].size + moving[:, 0, 2:].size
    # the chance of as many false alarms at the design's simulated rates (independent or correlated records)
    alarms = false_alarms(beyond_reading.read_sweep(data), np.concatenate([moving[:, :, :2].ravel(),
                                                                           moving[:, 0, 2:].ravel()]))
    assert reading.false_alarm_chance == alarms.largest_chance and alarms.text() in reading.text
    assert len(reading.outlasts) == len(data["final"]["lengths"])
    floor = data["provenance"]["settings"]["noise_var"] / 2
    assert f"{data['limits']['risk']['softmax_limit'][0] - floor:.1e}" in lines[-2]
