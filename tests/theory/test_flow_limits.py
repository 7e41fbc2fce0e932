"""The gradient flow's start and limits: Assumption 5.1, Remark 5.3, Zhang et al.'s scale bound, Appendix F.3."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear.theory import flow_limits, regression, risks
from softmax_as_linear.theory.flow import infinite_prompt_flow

from helpers import REGRESSION_TASKS, rank_four_covariance


@pytest.mark.parametrize("name", REGRESSION_TASKS)
def test_limit_parameters_reach_the_noise_floor(name):
    task = REGRESSION_TASKS[name]()
    U, V = flow_limits.limit_parameters(task)
    assert float(risks.infinite_prompt_risk(U, V, task)) == pytest.approx(task.noise_var / 2, abs=1e-12)
    # Balanced: ||U_x||_F equals v_y, as gradient flow from the balanced block initialisation keeps them.
    assert float(torch.linalg.matrix_norm(U[:3, :3])) == pytest.approx(float(V[3, 3]))
    U_L, _ = flow_limits.limit_parameters(task, 10**9)
    assert torch.allclose(U_L, U, atol=1e-6)


def test_block_init():
    task = REGRESSION_TASKS["kms"]()
    U, V = flow_limits.block_init(task, 0.1)
    assert float(torch.linalg.matrix_norm(U[:3, :3])) == pytest.approx(0.1)
    assert V[3, 3] == pytest.approx(0.1) and V.abs().sum() == pytest.approx(0.1)
    theta = torch.tensor([[1.0], [0.0], [0.0]])
    U, _ = flow_limits.block_init(task, 0.2, theta)
    assert U[0, 0] == pytest.approx(0.2) and U.abs().sum() == pytest.approx(0.2)


THETA_SEEDS = [None, 4]


def _theta(seed):
    """Theta of Assumption 5.1: the default (None) or a random (5, 3) one with ||theta theta^T||_F = 1."""
    if seed is None:
        return None
    theta = torch.randn(5, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return theta / float(torch.linalg.matrix_norm(theta @ theta.T)) ** 0.5


@pytest.fixture(scope="module")
def rank_four_flows():
    """The flows of the rank-four task from the block start of each theta of THETA_SEEDS, integrated once as one
    batch (a batch costs what one flow costs) up to t = 50, where both are within 1e-9 of their limits."""
    task = regression.RegressionTask(5, rank_four_covariance()[0])
    starts = [flow_limits.block_init(task, 0.3, _theta(seed)) for seed in THETA_SEEDS]
    U0, V0 = (torch.stack(s) for s in zip(*starts))
    return task, infinite_prompt_flow(U0, V0, task, [0.0, 50.0], max_dt=0.1)


@pytest.mark.parametrize("theta_seed", THETA_SEEDS)
def test_flow_converges_to_the_pseudo_inverse_limit(rank_four_flows, theta_seed):
    task, flows = rank_four_flows
    k = THETA_SEEDS.index(theta_seed)
    end_U, end_V = flows["U"][-1, k], flows["V"][-1, k]
    U, V = flow_limits.degenerate_limit_parameters(task, 0.3, _theta(theta_seed))
    assert np.abs(end_U - U.numpy()).max() < 1e-8 and np.abs(end_V - V.numpy()).max() < 1e-8
    assert abs(float(risks.infinite_prompt_risk(U, V, task)) - task.noise_var / 2) < 1e-12


def test_invertible_covariance_gives_remark_5_3():
    task = regression.RegressionTask.kms(5, 0.5)
    for a, b in zip(flow_limits.limit_parameters(task), flow_limits.degenerate_limit_parameters(task, 0.3)):
        assert torch.allclose(a, b, atol=1e-12)


def test_degenerate_bad_input():
    sigma, _ = rank_four_covariance()
    with pytest.raises(ValueError, match="degenerate_limit_parameters"):
        flow_limits.limit_parameters(regression.RegressionTask(5, sigma))
    with pytest.raises(ValueError, match="published"):
        regression.RegressionTask(5, sigma, sampler="published")
    with pytest.raises(ValueError, match="covariance"):
        regression.RegressionTask(2, torch.tensor([[1.0, 2.0], [2.0, 1.0]]))


def test_init_scale_bound_is_zhang_et_al_and_scales_like_the_flow():
    isotropic = regression.RegressionTask.isotropic(5, noise_var=0.0)
    assert flow_limits.init_scale_bound(isotropic) == pytest.approx(math.sqrt(2) / 5**0.25)
    kms = regression.RegressionTask.kms(5, 0.5, noise_var=0.0)
    norm = float(torch.linalg.matrix_norm(kms.covariance, ord=2))
    assert flow_limits.init_scale_bound(kms) == pytest.approx(math.sqrt(2) / (5**0.25 * math.sqrt(norm)))
    # the flow from (c Sigma, alpha) is the flow from (Sigma, alpha sqrt c) rescaled: the bound divides by sqrt c
    for c in (0.1, 4.0):
        scaled = regression.RegressionTask(5, c * kms.covariance, noise_var=0.0)
        assert flow_limits.init_scale_bound(scaled) == pytest.approx(flow_limits.init_scale_bound(kms) / math.sqrt(c))
    # finite L: Gamma_L = (1 + 1/L) Sigma + tr(Sigma)/L I, which tends to Sigma
    gamma = (1 + 1 / 10) * kms.covariance + 5 / 10 * torch.eye(5, dtype=torch.float64)
    assert flow_limits.init_scale_bound(kms, 10) == pytest.approx(
        math.sqrt(2) / (5**0.25 * float(torch.linalg.matrix_norm(gamma, ord=2)) ** 0.5))
    assert flow_limits.init_scale_bound(kms, 10**7) == pytest.approx(flow_limits.init_scale_bound(kms), rel=1e-5)


def test_block_init_asks_both_conditions_of_assumption_5_1():
    sigma, u = rank_four_covariance()
    task = regression.RegressionTask(5, sigma)
    with pytest.raises(ValueError, match="theta theta\\^T Sigma != 0"):
        flow_limits.block_init(task, 0.3, theta=u[:, None])      # u u^T Sigma = 0: invisible to every input


@pytest.mark.parametrize("call, match", [
    (lambda: flow_limits.block_init(regression.RegressionTask(2), 0.0), "alpha"),
    (lambda: flow_limits.block_init(regression.RegressionTask(2), 0.1, torch.ones(2, 2)), "theta"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_finite_prompt_limit_is_for_gaussian_covariates_only():
    with pytest.raises(ValueError, match="L"):
        flow_limits.limit_parameters(regression.RegressionTask.isotropic(3, covariates="uniform"), L=10)
