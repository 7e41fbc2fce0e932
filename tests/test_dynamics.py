"""The theory's dynamics: the infinite-prompt flow, its balance, runs read against it, and per-seed outcomes."""
import numpy as np
import pytest
import torch

from softmax_as_linear import dynamics, icl, models
from softmax_as_linear.dynamics import infinite_prompt_flow
from softmax_as_linear.sweep import TrainConfig
from softmax_as_linear.train import train

BLOCK = dict(parametrisation="uv", init="block", alpha=0.3, lr=1e-2, record_every=20, eval_prompts=32)


def test_flow_gap_is_zero_for_the_flow_itself():
    # A "run" whose recorded parameters are the flow has distance 0 and the flow's risk.
    result = train(TrainConfig(lengths=(10,), activations=("linear",), steps=40, batch_size=8, **BLOCK))
    task = result.config.task()
    U0, V0 = icl.block_init(task, 0.3)
    flow = infinite_prompt_flow(U0, V0, task, result.times, max_dt=0.1)
    result.params["U"][0, 0, 0] = flow["U"]
    result.params["V"][0, 0, 0] = flow["V"]
    gap = dynamics.flow_gap(result)
    assert max(gap["distance"]["linear"][0]) < 1e-20
    np.testing.assert_allclose(gap["risk"]["linear"][0], gap["flow_risk"], rtol=1e-12)


def test_flow_gap_shrinks_with_the_prompt_length():
    # Theorem 4.3 in miniature: with many prompts per step (little SGD noise), the run at L = 400
    # stays closer to the infinite-prompt flow than the run at L = 4, for both activations.
    cfg = TrainConfig(lengths=(4, 400), steps=200, batch_size=256, **BLOCK)
    gap = dynamics.flow_gap(train(cfg))
    for activation in ("softmax", "linear"):
        short, long = gap["max_distance"][activation]
        assert long < 0.2 * short, (activation, short, long)
    assert gap["times"][-1] == pytest.approx(2 * 1e-2 * 200)


def test_flow_gap_needs_the_uv_parametrisation_and_a_known_seed():
    four = train(TrainConfig(lengths=(5,), steps=10, record_every=10, eval_prompts=8, batch_size=8))
    with pytest.raises(ValueError, match="parametrisation"):
        dynamics.flow_gap(four)
    uv = train(TrainConfig(lengths=(5,), steps=10, batch_size=8, **{**BLOCK, "record_every": 10}))
    with pytest.raises(ValueError, match="seed"):
        dynamics.flow_gap(uv, seed=12345)


def test_seed_outcomes_counts_diverged_stalled_and_trained():
    # Seed 1 starts 30 times too large and diverges; seed 2 starts at exactly zero, where every
    # gradient vanishes, so it stalls at the risk of the zero predictor; seed 3 trains.
    base = models.AttentionModel(6, seed=0).weights()
    init = {n: torch.stack([30 * w.detach(), 0 * w.detach(), w.detach()]) for n, w in base.items()}
    cfg = TrainConfig(lengths=(10,), activations=("linear",), seeds=(1, 2, 3), steps=300, record_every=50,
                      eval_prompts=256, batch_size=64, init="given", lr=0.05)
    result = train(cfg, init_weights=init)
    out = dynamics.seed_outcomes(result, tolerance=0.2)
    assert out["diverged"]["linear"] == [1] and out["stalled"]["linear"] == [1] and out["trained"]["linear"] == [1]
    final = np.array(out["final"]["linear"])[:, 0]
    assert np.isnan(final[0]) and final[1] > final[2]
    assert out["optimal_linear"] == [pytest.approx(icl.optimal_linear_risk(10, cfg.task()))]


def test_seed_outcomes_rejects_bad_arguments():
    result = train(TrainConfig(lengths=(5,), steps=10, record_every=10, eval_prompts=8, batch_size=8))
    with pytest.raises(ValueError, match="tolerance"):
        dynamics.seed_outcomes(result, tolerance=-1)
    with pytest.raises(ValueError, match="tail"):
        dynamics.seed_outcomes(result, tail=0)


def test_flow_conserves_the_balance_and_the_horizon_restricts_the_maximum():
    # The block start has ||U||_F^2 = ||v||^2 = alpha^2; the infinite-prompt flow keeps the difference at 0.
    result = train(TrainConfig(lengths=(10,), activations=("linear",), steps=100, batch_size=32, **BLOCK))
    gap = dynamics.flow_gap(result, horizon=0.4)
    # (the run starts from its float32 copy of the block initialisation, hence a balance of order 1e-8)
    assert np.ptp(gap["flow_balance"]) < 1e-12 and abs(gap["flow_balance"][0]) < 1e-7
    assert gap["balance"]["linear"][0][0] == pytest.approx(gap["flow_balance"][0], abs=1e-15)
    times, distance = np.array(gap["times"]), np.array(gap["distance"]["linear"][0])
    assert gap["max_distance"]["linear"][0] == pytest.approx(distance[times <= 0.4].max())
    assert gap["max_distance"]["linear"][0] < distance.max()
    with pytest.raises(ValueError, match="horizon"):
        dynamics.flow_gap(result, horizon=-1.0)


def test_infinite_prompt_flow_reaches_the_limit_of_remark_5_3():
    task = icl.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    U0, V0 = icl.block_init(task, 0.5)
    flow = infinite_prompt_flow(U0, V0, task, [0.0, 5.0, 150.0], max_dt=0.1)
    assert np.all(np.diff(flow["risk"]) < 0)
    U_star, V_star = icl.limit_parameters(task)
    np.testing.assert_allclose(flow["U"][-1], U_star.numpy(), atol=1e-3)
    np.testing.assert_allclose(flow["V"][-1], V_star.numpy(), atol=1e-3)
    # Small steps integrate the flow accurately: halving them changes nothing visible.
    finer = infinite_prompt_flow(U0, V0, task, [5.0], max_dt=0.05)
    np.testing.assert_allclose(finer["U"][-1], flow["U"][1], atol=1e-6)


def test_linear_training_at_large_L_tracks_the_infinite_prompt_flow():
    # Theorem 4.3 in miniature: (U, V) linear attention from the block initialisation, SGD at
    # learning rate lr on the MSE follows the flow on R_inf at time 2 lr k, closer for longer prompts.
    distance = {}
    for L in (5, 400):
        cfg = TrainConfig(d=3, lengths=(L,), activations=("linear",), parametrisation="uv", init="block", alpha=0.3,
                          steps=300, lr=0.04, batch_size=256, record_every=100, eval_prompts=16)
        result = train(cfg)
        flow = infinite_prompt_flow(*icl.block_init(cfg.task(), 0.3), cfg.task(), result.times, max_dt=0.1)
        U, V = result.uv()
        distance[L] = float(np.linalg.norm(U[0, 0, 0, -1] - flow["U"][-1]) + np.linalg.norm(V[0, 0, 0, -1] - flow["V"][-1]))
        scale = float(np.linalg.norm(flow["U"][-1]) + np.linalg.norm(flow["V"][-1]))
    assert distance[400] < 0.1 * scale
    assert distance[400] < distance[5] / 3


def test_block_structure_is_preserved_by_the_flow():
    task = icl.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    flow = infinite_prompt_flow(*icl.block_init(task, 0.3), task, [2.0, 20.0], max_dt=0.1)
    U, V = flow["U"], flow["V"]
    assert np.abs(U[:, 3, :]).max() == 0 and np.abs(U[:, :, 3]).max() == 0
    assert np.abs(V[:, :3, :]).max() == 0 and np.abs(V[:, 3, :3]).max() == 0
    assert np.abs(U[-1, :3, :3] - U[0, :3, :3]).max() > 0.1  # while the blocks themselves move


def test_balance_is_conserved_by_the_infinite_prompt_flow():
    task = icl.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    flow = infinite_prompt_flow(*icl.block_init(task, 0.3), task, [0.0, 2.0, 20.0], max_dt=0.05)
    b = dynamics.balance(flow["U"], flow["V"])
    assert b.shape == (3,)
    np.testing.assert_allclose(b, b[0], atol=1e-6)
    U, V = torch.eye(4), torch.zeros(4, 4)
    V[-1] = 2.0
    assert float(dynamics.balance(U, V)) == 4.0 - 16.0


def test_infinite_prompt_flow_bad_times():
    with pytest.raises(ValueError, match="times"):
        infinite_prompt_flow(torch.eye(4), torch.eye(4), icl.RegressionTask(3), [1.0, 0.5])
