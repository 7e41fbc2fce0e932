"""Standard errors of recorded risks and of their changes: measured when recorded, inferred from the final
evaluation otherwise, and paired on fresh prompts where the sweep is at hand; checked where the answer is known."""

import numpy as np
import pytest
import torch

from softmax_as_linear.core import seeding
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train
from softmax_as_linear.experiments import paper_figures, uncertainty
from softmax_as_linear.theory import flow_limits, risks


def _files(measured: bool):
    """A trajectory file (2 seeds, 2 lengths, 3 records) and the final-risk file of the same sweep (3 lengths)."""
    risk = np.array([[[0.5, 0.2, 0.1], [0.4, 0.1, 0.05]], [[0.6, 0.3, 0.2], [0.5, 0.2, 0.1]]])
    trajectories = {"seeds": [4, 8], "lengths": [10, 100], "steps": [0, 500, 1000], "softmax_per_seed": risk.tolist(),
                    "provenance": {"settings": {"eval_prompts": 400}}}
    if measured:
        trajectories["softmax_se_per_seed"] = (0.01 * risk).tolist()
    # the final file lists the seeds and lengths in another order; relative sd 2 for seed 4, 3 for seed 8
    final_risk = np.array([[0.2, 0.1, 0.05], [0.1, 0.05, 0.01]])           # seeds (8, 4), lengths (100, 10, 1000)
    rel = np.array([[3.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    final = {"seeds": [8, 4], "lengths": [100, 10, 1000], "final_prompts": 10_000,
             "softmax_per_seed": final_risk.tolist(), "softmax_se_per_seed": (rel * final_risk / 100).tolist()}
    return trajectories, final, risk


def test_relative_sd_is_the_final_evaluation_spread():
    _, final, _ = _files(True)
    np.testing.assert_allclose(uncertainty.relative_sd(final, "softmax"), [[3, 3, 3], [2, 2, 2]])
    with pytest.raises(ValueError, match="final evaluation"):
        uncertainty.relative_sd({"softmax_per_seed": [[1.0]]}, "softmax")


def test_held_out_se_is_measured_when_recorded_and_inferred_otherwise():
    trajectories, final, risk = _files(True)
    se, how = uncertainty.held_out_se(trajectories, "softmax")
    np.testing.assert_allclose(se, 0.01 * risk)
    assert how.startswith("measured")
    trajectories, final, risk = _files(False)
    se, how = uncertainty.held_out_se(trajectories, "softmax", final)
    # seed 4 has relative sd 2, seed 8 has 3; the held-out set has 400 prompts: se = R * rel / 20
    np.testing.assert_allclose(se[0], risk[0] * 2 / 20)
    np.testing.assert_allclose(se[1], risk[1] * 3 / 20)
    assert how.startswith("inferred")
    with pytest.raises(ValueError, match="pass final"):
        uncertainty.held_out_se(trajectories, "softmax")


def test_change_between_uses_the_paired_change_or_the_unpaired_bound():
    trajectories, final, risk = _files(True)
    out = uncertainty.change_between(trajectories, "softmax", 500, 1000)
    np.testing.assert_allclose(out["fall"], risk[:, :, 1] - risk[:, :, 2])
    np.testing.assert_allclose(out["se"], 0.01 * (risk[:, :, 1] + risk[:, :, 2]))
    assert out["method"].startswith("unpaired bound")
    trajectories["changes"] = {"half": {"from_step": 500, "to_step": 1000, "n_prompts": 50, "seeds": [8, 4],
                                        "lengths": [100, 10], "softmax": [[1.0, 2.0], [3.0, 4.0]],
                                        "softmax_se": [[0.1, 0.2], [0.3, 0.4]]}}
    out = uncertainty.change_between(trajectories, "softmax", 500, 1000)
    np.testing.assert_allclose(out["fall"], [[4.0, 3.0], [2.0, 1.0]])     # reordered to seeds (4, 8), lengths (10, 100)
    np.testing.assert_allclose(out["se"], [[0.4, 0.3], [0.2, 0.1]])
    assert out["method"].startswith("paired")
    with pytest.raises(ValueError, match="start_step=7"):
        uncertainty.change_between(trajectories, "softmax", 7, 1000)


def test_the_unpaired_bound_covers_any_correlation():
    # sd(a - b) <= sd(a) + sd(b) whatever the correlation: anti-correlated losses attain it
    rng = np.random.default_rng(0)
    a = rng.exponential(1.0, 100_000)
    for b in (a + 0.1 * rng.normal(size=a.size), 3 - a, rng.exponential(1.0, a.size)):
        assert (a - b).std() <= a.std() + b.std() + 1e-12


@pytest.fixture
def linear_sweep():
    """Linear attention, block start, two seeds; records at steps 0, 20, 40, 60, 80."""
    cfg = TrainConfig(d=3, lengths=(6, 20), models=("linear",), seeds=(1, 2), steps=80, batch_size=16, lr=0.05,
                      parametrisation="uv", init="block", alpha=0.3, record_every=20, eval_prompts=64, dtype="float64")
    return train(cfg, device="cpu")


def test_record_change_is_paired_on_fresh_prompts_with_a_known_answer(linear_sweep):
    result = linear_sweep
    task = result.config.task()
    # the record at step 40 becomes the optimum at L, whose exact risk is known, as is that of the record at step 20
    for s in range(2):
        for l, L in enumerate(result.config.lengths):
            U, V = flow_limits.limit_parameters(task, L)
            result.params["U"][s, l, 0, 2], result.params["V"][s, l, 0, 2] = U.numpy(), V.numpy()
    out = uncertainty.record_change(result, 20, 40, n_prompts=20_000, dtype=torch.float64)
    assert out["from_step"] == 20 and out["to_step"] == 40 and out["lengths"] == [6, 20]
    fall, se = np.array(out["linear"]), np.array(out["linear_se"])
    for s in range(2):
        for l, L in enumerate(result.config.lengths):
            U1, V1 = (torch.as_tensor(result.params[k][s, l, 0, 1]) for k in ("U", "V"))
            exact = float(risks.linear_attention_risk(U1, V1, L, task)) - risks.optimal_linear_risk(L, task)
            assert abs(fall[s, l] - exact) < 4 * se[s, l], (fall[s, l], exact, se[s, l])
    # a record compared with an identical one: exactly no change, and no error
    for name in ("U", "V"):
        result.params[name][:, :, :, 3] = result.params[name][:, :, :, 2]
    same = uncertainty.record_change(result, 40, 60, n_prompts=100)
    assert np.all(np.array(same["linear"]) == 0) and np.all(np.array(same["linear_se"]) == 0)


def test_record_change_draws_the_analysis_stream(linear_sweep):
    # the prompts are those of stream "analysis" at (seed, L): a second call gives the same numbers
    a = uncertainty.record_change(linear_sweep, 0, 80, n_prompts=50, lengths=[20])
    b = uncertainty.record_change(linear_sweep, 0, 80, n_prompts=50, lengths=[20])
    assert a == b and seeding.stream_seed(1, "analysis", 20) != seeding.stream_seed(1, "evaluation", 20)
    with pytest.raises(ValueError, match="start_step must come before"):
        uncertainty.record_change(linear_sweep, 80, 0)
    with pytest.raises(ValueError, match="end_step=81"):
        uncertainty.record_change(linear_sweep, 0, 81)
    with pytest.raises(ValueError, match="L=7"):
        uncertainty.record_change(linear_sweep, 0, 80, lengths=[7])


def test_trajectory_changes_are_stored_and_read_back_paired(linear_sweep):
    assert uncertainty.window_start(linear_sweep.steps, 0.5) == 40
    assert uncertainty.window_start(linear_sweep.steps, 0.25) == 60
    changes = uncertainty.trajectory_changes(linear_sweep, n_prompts=50)
    assert (changes["half"]["from_step"], changes["quarter"]["from_step"]) == (40, 60)
    traj = paper_figures.risk_trajectories(linear_sweep, lengths=[6, 20], n_bayes_samples=100, change_prompts=50)
    assert traj["changes"] == changes and traj["eval_prompts"] == 64
    paired = uncertainty.change_between(traj, "linear", 40, 80)
    np.testing.assert_allclose(paired["fall"], changes["half"]["linear"])
    assert paired["method"].startswith("paired") and np.all(np.isfinite(paired["se"]))
    # two records without a stored change: the held-out difference, with the measured standard errors
    unpaired = uncertainty.change_between(traj, "linear", 20, 80)
    risk, se = np.array(traj["linear_per_seed"]), np.array(traj["linear_se_per_seed"])
    np.testing.assert_allclose(unpaired["se"], se[:, :, 1] + se[:, :, 4])
    np.testing.assert_allclose(unpaired["fall"], risk[:, :, 1] - risk[:, :, 4])


def test_window_start_covers_at_least_the_fraction():
    assert uncertainty.window_start([0, 10, 20, 30], 0.25) == 20 and uncertainty.window_start([0, 10, 20, 30], 0.5) == 10
    assert uncertainty.window_start(list(range(0, 300_001, 1000)), 0.5) == 150_000
    with pytest.raises(ValueError, match="fraction"):
        uncertainty.window_start([0, 10], 1.0)


def test_paired_changes_of_a_chapter_6_sweep_score_each_limit_model_by_its_own_formula():
    """A sweep with infinite-prompt models: their records are scored by the limit prediction, not by attention
    over the prompt (softmax's limit is not linear attention under uniform inputs)."""
    from softmax_as_linear.experiments import presets
    from softmax_as_linear.theory.limit_model import infinite_prompt_prediction
    from softmax_as_linear.theory.models import predict_unchecked

    cfg = presets.beyond_config("smoke", "uniform", lengths=(10,), seeds=(3,), steps=20, record_every=10)
    result = train(cfg)
    change = uncertainty.record_change(result, 0, 20, n_prompts=200)
    task, (U_all, V_all) = cfg.task(), result.uv()
    batch = task.sample(200, 10, seeding.generator(3, "analysis", 10))

    def fall(predict):
        losses = [0.5 * (predict(*(torch.as_tensor(np.asarray(M[0, 0, a, k]), dtype=torch.float32) for M in (U_all, V_all)))
                         - batch.target).double() ** 2 for k in (0, -1)]
        return float((losses[0] - losses[1]).mean())

    for a, model in enumerate(cfg.models):
        if model.endswith("_limit"):
            expected = fall(lambda U, V: infinite_prompt_prediction(U, V, task, batch.w, batch.query,
                                                                    model.removesuffix("_limit")))
        else:
            expected = fall(lambda U, V: predict_unchecked(batch.tokens, batch.query, U, V, model))
        assert change[model][0][0] == pytest.approx(expected, rel=1e-5, abs=1e-9), model
    a = cfg.models.index("softmax_limit")
    as_linear = fall(lambda U, V: predict_unchecked(batch.tokens, batch.query, U, V, "linear"))
    assert change["softmax_limit"][0][0] != pytest.approx(as_linear, rel=1e-3), a
