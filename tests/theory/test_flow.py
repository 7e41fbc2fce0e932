"""The infinite-prompt gradient flow: its limit, its balance, its block structure, and training that tracks it."""
import numpy as np
import pytest
import torch

from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train
from softmax_as_linear.theory import regression
from softmax_as_linear.theory.flow import balance, infinite_prompt_flow

BLOCK = dict(parametrisation="uv", init="block", alpha=0.3, lr=1e-2, record_every=20, eval_prompts=32)


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


def test_gradient_flow_of_a_quadratic_is_an_exponential():
    # R = (||U||^2 + ||V||^2) / 2: theta(t) = theta(0) e^{-t}, integrated by Runge-Kutta to its order
    from softmax_as_linear.theory.flow import gradient_flow
    U0, V0 = torch.eye(3, dtype=torch.float64), 2 * torch.ones(3, 3, dtype=torch.float64)
    out = gradient_flow(lambda U, V: 0.5 * ((U**2).sum((-1, -2)) + (V**2).sum((-1, -2))), U0, V0, [0.0, 1.0, 3.0],
                        max_dt=0.05)
    np.testing.assert_allclose(out["U"][:, 0, 0], np.exp(-np.array([0.0, 1.0, 3.0])), rtol=1e-6)
    np.testing.assert_allclose(out["risk"], 0.5 * (3 + 36) * np.exp(-2 * np.array([0.0, 1.0, 3.0])), rtol=1e-6)
    with pytest.raises(ValueError, match="same shape"):
        gradient_flow(lambda U, V: (U**2).sum(), U0, V0[:2], [1.0])


def test_infinite_prompt_flow_is_gradient_flow_of_the_closed_form():
    from softmax_as_linear.theory.flow import gradient_flow
    task = regression.RegressionTask.kms(3, 0.5)
    U0, V0 = regression.block_init(task, 0.3)
    a = infinite_prompt_flow(U0, V0, task, [0.0, 2.0], max_dt=0.1)
    b = gradient_flow(lambda U, V: regression.infinite_prompt_risk(U, V, task), U0, V0, [0.0, 2.0], max_dt=0.1)
    np.testing.assert_allclose(a["U"], b["U"], atol=1e-14)


def test_stable_step_is_below_the_inverse_of_the_fastest_rate():
    from softmax_as_linear.theory.flow import stable_step
    assert stable_step(regression.RegressionTask.isotropic(5)) == 0.1
    lam = torch.tensor([0.2, 1, 1, 1, 5], dtype=torch.float64)     # a large eigenvalue makes the flow stiff
    c2 = float((lam**-2).sum().sqrt())
    stiff = regression.RegressionTask(5, torch.diag(lam))
    assert stable_step(stiff) == pytest.approx(1 / (0.2 * (c2 * 125 + float(lam.sum()) / c2)))
    assert stable_step(stiff) < 0.01
    with pytest.raises(ValueError, match="invertible"):
        stable_step(regression.RegressionTask(5, torch.diag(torch.tensor([1, 1, 1, 1, 0.0], dtype=torch.float64))))


def test_gronwall_bound_on_two_quadratics_with_known_constants():
    # R_L = |theta - a|^2 / 2 and R_inf = |theta|^2 / 2 from the same start: the gradient gap is |a| everywhere,
    # the Hessian of R_inf is the identity (Lambda = 1), and Delta(t) = |a| (1 - e^{-t}) <= |a| (e^t - 1)
    from softmax_as_linear.theory.flow import gradient_flow, gronwall_bound
    a = 0.1 * torch.ones(2, 2, dtype=torch.float64)
    finite_risk = lambda U, V: 0.5 * (((U - a) ** 2).sum() + (V**2).sum())  # noqa: E731
    limit_risk = lambda U, V: 0.5 * ((U**2).sum() + (V**2).sum())  # noqa: E731
    start = (torch.eye(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64))
    times = np.linspace(0, 2, 21)
    out = gronwall_bound(finite_risk, limit_risk, gradient_flow(finite_risk, *start, times, max_dt=0.05),
                         gradient_flow(limit_risk, *start, times, max_dt=0.05), every=5)
    assert out["eps"] == pytest.approx(0.2) and out["lipschitz"] == pytest.approx(1.0)
    np.testing.assert_allclose(out["delta"], 0.2 * (1 - np.exp(-times)), atol=1e-7)
    assert np.all(out["delta"] <= out["bound"] + 1e-12)
