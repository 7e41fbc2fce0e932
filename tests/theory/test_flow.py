"""The infinite-prompt gradient flow: its limit, its balance, its block structure, and the finite-prompt flow that tracks it."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear.theory import flow as flow_module
from softmax_as_linear.theory import flow_limits, regression, risks
from softmax_as_linear.theory.flow import balance, infinite_prompt_flow


def _gradient(risk, U, V):
    U, V = U.clone().requires_grad_(True), V.clone().requires_grad_(True)
    return torch.autograd.grad(risk(U, V), (U, V))


def test_the_limit_of_remark_5_3_is_a_balanced_stationary_point_at_the_noise_floor():
    # Remark 5.3: the flow from the block start ends at U* = c^-1 [[Sigma^-1, 0], [0, 0]], V* = c e_D e_D^T.
    # There the gradient of R_inf vanishes (to rounding), the risk is its minimum s^2 / 2, and the balance
    # ||U||^2 - ||V||^2, which the flow conserves, is that of the block start (0): the one minimiser it reaches.
    task = regression.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    U_star, V_star = flow_limits.limit_parameters(task)
    gU, gV = _gradient(lambda U, V: risks.infinite_prompt_risk(U, V, task), U_star, V_star)
    assert float(gU.abs().max()) < 1e-12 and float(gV.abs().max()) < 1e-12
    assert float(risks.infinite_prompt_risk(U_star, V_star, task)) == pytest.approx(task.noise_var / 2, abs=1e-14)
    assert float(balance(U_star, V_star)) == pytest.approx(float(balance(*flow_limits.block_init(task, 0.5))), abs=1e-12)
    # A point of the same minimising set with another balance, and a point off it, are not that limit.
    gU, _ = _gradient(lambda U, V: risks.infinite_prompt_risk(U, V, task), 2 * U_star, V_star)
    assert float(gU.abs().max()) > 0.1
    assert float(balance(U_star / 2, 2 * V_star)) < -1


def test_infinite_prompt_flow_lowers_the_risk_and_integrates_to_its_order():
    task = regression.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    U0, V0 = flow_limits.block_init(task, 0.5)
    flow = infinite_prompt_flow(U0, V0, task, [0.0, 1.0, 2.0, 3.0], max_dt=0.1)
    assert np.all(np.diff(flow["risk"]) < 0)
    # Runge-Kutta's fourth order: halving the step changes the state by about 1/16 of the step's own error.
    finer = infinite_prompt_flow(U0, V0, task, [3.0], max_dt=0.05)
    np.testing.assert_allclose(finer["U"][-1], flow["U"][-1], atol=1e-6)


def test_the_finite_prompt_flow_tracks_the_infinite_prompt_flow_to_first_order_in_one_over_L():
    # Theorem 4.3 (Lemma E.1): gradient flow on the exact R_L of linear attention stays within Gronwall's
    # bound of the flow on R_inf, and since R_L = R_inf + g(U, V) / (2L), their distance is first order in
    # 1/L: L times it tends to a constant (here within 2 % from L = 200 to L = 800).
    task = regression.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    U0, V0 = flow_limits.block_init(task, 0.3)
    times = [0.0, 1.0, 2.0, 4.0]

    def limit_risk(U, V):
        return risks.infinite_prompt_risk(U, V, task)

    limit = flow_module.gradient_flow(limit_risk, U0, V0, times, max_dt=0.1)
    scaled = {}
    for L in (200, 800):
        def finite_risk(U, V, L=L):
            return risks.linear_attention_risk(U, V, L, task)

        finite = flow_module.gradient_flow(finite_risk, U0, V0, times, max_dt=0.1)
        bound = flow_module.gronwall_bound(finite_risk, limit_risk, finite, limit, every=1)
        assert np.all(bound["delta"] <= bound["bound"] + 1e-15) and bound["delta"][-1] > 0
        scaled[L] = L * bound["delta"][1:]
    np.testing.assert_allclose(scaled[800], scaled[200], rtol=0.02)


@pytest.fixture(scope="module")
def kms_flow():
    """The infinite-prompt flow of the KMS task (d = 3) from the block start, reported at t = 0, 2 and 10 with steps
    of 0.05: integrated once for the two tests below (the block structure holds at any step; the balance drifts by
    1e-8, almost all of it before t = 2, and the blocks move by 0.3 from t = 2 to 10)."""
    task = regression.RegressionTask.kms(d=3, rho=0.5, task_var=1 / 3)
    return infinite_prompt_flow(*flow_limits.block_init(task, 0.3), task, [0.0, 2.0, 10.0], max_dt=0.05)


def test_block_structure_is_preserved_by_the_flow(kms_flow):
    U, V = kms_flow["U"][1:], kms_flow["V"][1:]  # t = 2 and 10
    assert np.abs(U[:, 3, :]).max() == 0 and np.abs(U[:, :, 3]).max() == 0
    assert np.abs(V[:, :3, :]).max() == 0 and np.abs(V[:, 3, :3]).max() == 0
    assert np.abs(U[-1, :3, :3] - U[0, :3, :3]).max() > 0.1  # while the blocks themselves move


def test_balance_is_conserved_by_the_infinite_prompt_flow(kms_flow):
    b = balance(kms_flow["U"], kms_flow["V"])
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
    U0, V0 = flow_limits.block_init(task, 0.3)
    a = infinite_prompt_flow(U0, V0, task, [0.0, 2.0], max_dt=0.1)
    b = gradient_flow(lambda U, V: risks.infinite_prompt_risk(U, V, task), U0, V0, [0.0, 2.0], max_dt=0.1)
    np.testing.assert_allclose(a["U"], b["U"], atol=1e-14)


def test_stable_step_is_below_the_inverse_of_the_fastest_rate():
    from softmax_as_linear.theory.flow import stable_step
    assert stable_step(regression.RegressionTask.isotropic(5), 0.3) == 0.1
    lam = torch.tensor([0.2, 1, 1, 1, 5], dtype=torch.float64)     # a large eigenvalue makes the flow stiff
    c2 = float((lam**-2).sum().sqrt())                              # Remark 5.3: c^2 = ||Sigma^-1||_F
    stiff = regression.RegressionTask(5, torch.diag(lam))
    assert stable_step(stiff, 0.3) == pytest.approx(1 / (0.2 * (c2 * 125 + float(lam.sum()) / c2)))
    assert stable_step(stiff, 0.3) < 0.01
    # singular Sigma = diag(4, 1, 1, 1, 0) from Theta Theta^T = I/sqrt(5) (Appendix F.3): ||N||_F^2 = alpha^2/5,
    # ||Sigma^+||_F^2 = 1/16 + 3, c^2 = (||N||^2 + sqrt(||N||^4 + 4 ||Sigma^+||^2)) / 2
    alpha, lam = 0.3, torch.tensor([4, 1, 1, 1, 0.0], dtype=torch.float64)
    n2, p2 = alpha**2 / 5, 1 / 16 + 3
    c2 = (n2 + math.sqrt(n2**2 + 4 * p2)) / 2
    singular = regression.RegressionTask(5, torch.diag(lam))
    assert stable_step(singular, alpha) == pytest.approx(1 / (0.2 * (c2 * 64 + 7 / c2)))


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


# --- covariate laws (Chapter 6) -------------------------------------------------------------------

def test_label_noise_leaves_the_block_flow_and_remark_5_3_unchanged():
    """In the block structure the noise enters R_inf only through s^2/2: the flows coincide."""
    for make in (regression.RegressionTask.isotropic, regression.RegressionTask.kms):
        noisy, clean = make(5, noise_var=0.1), make(5, noise_var=0.0)
        U0, V0 = flow_limits.block_init(noisy, 0.3)
        times = np.linspace(0, 2, 3)  # compared to the bit: a difference would show from the first step
        a = infinite_prompt_flow(U0, V0, noisy, times, max_dt=0.1)
        b = infinite_prompt_flow(U0, V0, clean, times, max_dt=0.1)
        assert np.array_equal(a["U"], b["U"]) and np.array_equal(a["V"], b["V"])
        assert np.allclose(a["risk"] - b["risk"], 0.05, atol=1e-15)


def test_rademacher_flow_converges_to_an_exact_minimiser_other_than_remark_5_3():
    task = regression.RegressionTask.isotropic(5, covariates="rademacher")
    flow = infinite_prompt_flow(*flow_limits.block_init(task, 0.3), task, [0, 60], max_dt=0.25)
    A, v = flow["U"][-1, :5, :5], flow["V"][-1, -1, -1]
    a = A[0, 0]
    assert np.allclose(A, a * np.eye(5), atol=1e-12)  # A_x stays a multiple of I
    assert abs(v * np.tanh(a) - 1) < 1e-9 and flow["risk"][-1] - 0.05 < 1e-12
    U_star, V_star = flow_limits.limit_parameters(task)  # linear attention's limit: another point
    assert abs(V_star[-1, -1].item() - v) > 0.1


def test_uniform_flow_has_no_limit_and_follows_its_drift_asymptotics():
    task = regression.RegressionTask.isotropic(5, covariates="uniform")
    times = [250, 500, 1000]
    # The flow reduced to (a, v) in the isotropic block structure, which is the flow itself
    # (test_reduced_isotropic_flow_is_the_flow), integrated by an adaptive solver over this long horizon; at
    # rtol = 1e-6 (5 times fewer steps than the default 1e-10) the excess risks move by 4e-6 of themselves.
    flow = flow_module.isotropic_block_flow(task, 0.3, times, rtol=1e-6)
    excess = flow["risk"] - 0.05
    v = flow["v"]
    assert np.all(np.diff(excess) < 0) and np.all(excess > 0) and np.all(np.diff(v) > 0)
    predicted = flow_module.drift_asymptotics(task, times)
    # the measured decay in t approaches the predicted t^(-2/3) (pre-asymptotic at t <= 1000)
    slope = np.log(excess[-1] / excess[-2]) / np.log(2)
    assert -0.8 < slope < -0.5
    assert np.all(np.abs(excess / predicted["excess"] - 1) < 0.5)
    assert abs(flow_module.drift_constant(task) - 0.5 * 0.2 * 5 * 0.04 * (27 / 7 - 81 / 25)) < 1e-15


def test_non_gaussian_flow_needs_the_block_structure():
    task = regression.RegressionTask.isotropic(3, covariates="uniform")
    U0, V0 = flow_limits.block_init(task, 0.3)
    U0[3, 0] = 0.1
    with pytest.raises(ValueError, match="U0"):
        infinite_prompt_flow(U0, V0, task, [1.0])
    linear = infinite_prompt_flow(U0, V0, task, [1.0], activation="linear")  # linear attention: any start
    assert np.isfinite(linear["risk"]).all()
    with pytest.raises(ValueError, match="task"):
        flow_module.drift_asymptotics(regression.RegressionTask.isotropic(3, covariates="rademacher"), [1.0])


@pytest.mark.parametrize("covariates", ["uniform", "rademacher"])
def test_reduced_isotropic_flow_is_the_flow(covariates):
    task = regression.RegressionTask.isotropic(5, covariates=covariates)
    times = [2.0, 10.0, 30.0]
    # Runge-Kutta steps of 0.2 stay within 2e-7 of the reduced flow: at least 5 times inside the tolerances below
    # (np.allclose adds 1e-5 of the value to atol)
    full = infinite_prompt_flow(*flow_limits.block_init(task, 0.3), task, times, max_dt=0.2)
    reduced = flow_module.isotropic_block_flow(task, 0.3, times)
    assert np.allclose(reduced["a"], full["U"][:, 0, 0], atol=1e-6) and np.allclose(reduced["v"], full["V"][:, -1, -1], atol=1e-6)
    assert np.allclose(reduced["risk"], full["risk"], atol=1e-9)
    with pytest.raises(ValueError, match="task"):
        flow_module.isotropic_block_flow(regression.RegressionTask.kms(3, covariates=covariates), 0.3, times)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [3.0, 6.0])
def test_kms_flow_converges_from_scales_far_above_the_sufficient_condition(alpha):
    # the bound of init_scale_bound is sufficient, not necessary: from 5 and 10 times it (0.63 for the KMS matrix)
    # the flow still reaches Remark 5.3's limit; a short fine step first, where the start's large risk makes it fast
    # (steps of 0.005 then 0.1: the end is that of steps half as long to 2e-6 in squared distance, at both scales)
    task = regression.RegressionTask.kms(d=5, rho=0.5)
    assert alpha > 4 * flow_limits.init_scale_bound(task)
    fast = infinite_prompt_flow(*flow_limits.block_init(task, alpha), task, [0.0, 5.0], max_dt=0.005)
    slow = infinite_prompt_flow(fast["U"][-1], fast["V"][-1], task, [0.0, 100.0], max_dt=0.1)
    U_star, V_star = (m.numpy() for m in flow_limits.limit_parameters(task))
    distance = ((slow["U"][-1] - U_star) ** 2).sum() + ((slow["V"][-1] - V_star) ** 2).sum()
    assert slow["risk"][-1] - task.noise_floor() < 1e-5 and distance < 1e-3
