"""The infinite-prompt gradient flow: its limit, its balance, its block structure, and training that tracks it."""
import numpy as np
import pytest
import torch

from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train
from softmax_as_linear.theory import regression
from softmax_as_linear.theory.flow import balance, infinite_prompt_flow

BLOCK = dict(parametrisation="uv", init="block", alpha=0.3, lr=1e-2, record_every=20, eval_prompts=32)


@pytest.mark.slow
def test_infinite_prompt_flow_reaches_the_limit_of_remark_5_3():
    task = regression.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    U0, V0 = regression.block_init(task, 0.5)
    flow = infinite_prompt_flow(U0, V0, task, [0.0, 5.0, 150.0], max_dt=0.1)
    assert np.all(np.diff(flow["risk"]) < 0)
    U_star, V_star = regression.limit_parameters(task)
    np.testing.assert_allclose(flow["U"][-1], U_star.numpy(), atol=1e-3)
    np.testing.assert_allclose(flow["V"][-1], V_star.numpy(), atol=1e-3)
    # Small steps integrate the flow accurately: halving them changes nothing visible.
    finer = infinite_prompt_flow(U0, V0, task, [5.0], max_dt=0.05)
    np.testing.assert_allclose(finer["U"][-1], flow["U"][1], atol=1e-6)


@pytest.mark.slow
def test_linear_training_at_large_L_tracks_the_infinite_prompt_flow():
    # Theorem 4.3 in miniature: (U, V) linear attention from the block initialisation, SGD at
    # learning rate lr on the MSE follows the flow on R_inf at time 2 lr k, closer for longer prompts.
    distance = {}
    for L in (5, 400):
        cfg = TrainConfig(d=3, lengths=(L,), activations=("linear",), parametrisation="uv", init="block", alpha=0.3,
                          steps=300, lr=0.04, batch_size=256, record_every=100, eval_prompts=16)
        result = train(cfg)
        flow = infinite_prompt_flow(*regression.block_init(cfg.task(), 0.3), cfg.task(), result.times, max_dt=0.1)
        U, V = result.uv()
        distance[L] = float(np.linalg.norm(U[0, 0, 0, -1] - flow["U"][-1]) + np.linalg.norm(V[0, 0, 0, -1] - flow["V"][-1]))
        scale = float(np.linalg.norm(flow["U"][-1]) + np.linalg.norm(flow["V"][-1]))
    assert distance[400] < 0.1 * scale
    assert distance[400] < distance[5] / 3


def test_block_structure_is_preserved_by_the_flow():
    task = regression.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    flow = infinite_prompt_flow(*regression.block_init(task, 0.3), task, [2.0, 20.0], max_dt=0.1)
    U, V = flow["U"], flow["V"]
    assert np.abs(U[:, 3, :]).max() == 0 and np.abs(U[:, :, 3]).max() == 0
    assert np.abs(V[:, :3, :]).max() == 0 and np.abs(V[:, 3, :3]).max() == 0
    assert np.abs(U[-1, :3, :3] - U[0, :3, :3]).max() > 0.1  # while the blocks themselves move


def test_balance_is_conserved_by_the_infinite_prompt_flow():
    task = regression.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    flow = infinite_prompt_flow(*regression.block_init(task, 0.3), task, [0.0, 2.0, 20.0], max_dt=0.05)
    b = balance(flow["U"], flow["V"])
    assert b.shape == (3,)
    np.testing.assert_allclose(b, b[0], atol=1e-6)
    U, V = torch.eye(4), torch.zeros(4, 4)
    V[-1] = 2.0
    assert float(balance(U, V)) == 4.0 - 16.0


def test_infinite_prompt_flow_bad_times():
    with pytest.raises(ValueError, match="times"):
        infinite_prompt_flow(torch.eye(4), torch.eye(4), regression.RegressionTask(3), [1.0, 0.5])
