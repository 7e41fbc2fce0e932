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


@pytest.mark.parametrize("theta_seed", [None, 4])
def test_flow_converges_to_the_pseudo_inverse_limit(theta_seed):
    sigma, _ = rank_four_covariance()
    task = regression.RegressionTask(5, sigma)
    theta = None
    if theta_seed is not None:
        theta = torch.randn(5, 3, generator=torch.Generator().manual_seed(theta_seed), dtype=torch.float64)
        theta = theta / float(torch.linalg.matrix_norm(theta @ theta.T)) ** 0.5
    flow = infinite_prompt_flow(*flow_limits.block_init(task, 0.3, theta), task, [0.0, 60.0], max_dt=0.1)
    U, V = flow_limits.degenerate_limit_parameters(task, 0.3, theta)
    assert np.abs(flow["U"][-1] - U.numpy()).max() < 1e-8 and np.abs(flow["V"][-1] - V.numpy()).max() < 1e-8
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
