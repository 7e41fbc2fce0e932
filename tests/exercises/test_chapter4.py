"""Chapter 4's checkers against wrong implementations a student might write (written here, not taken from the
checker's own list), each told what is wrong."""
import numpy as np
import torch

from softmax_as_linear import exercises

from helpers import diagnosis as _message


def _risk(U, V, tau2, s2, *, half=0.5, floor=True, fourth=None, transpose=False, label_noise=True):
    # a student's closed form for Sigma = I, in NumPy, with one thing changeable
    U, V = np.asarray(U), np.asarray(V)
    d = U.shape[0] - 1
    A, a, vx, vy = U[:d, :d], U[d, :d], V[d, :d], V[d, d]
    At = A if transpose else A.T
    M = vy * At + np.outer(a, vx)
    c0 = At @ vx + (vy * s2 * a if label_noise else 0)
    fourth = d * d + 2 * d if fourth is None else fourth
    total = (tau2 * np.sum((np.eye(d) - M) ** 2) + c0 @ c0 + 2 * vy * tau2 * d * c0 @ a
             + vy**2 * tau2**2 * fourth * a @ a)
    return half * total + (half * s2 if floor else 0.0)


def test_a_numpy_risk_written_from_the_formula_passes():
    assert exercises.result(lambda U, V, t, s: _risk(U, V, t, s), "isotropic_limit_risk").status == "passed"


def test_risk_reported_as_the_mean_squared_error():
    assert "half of it" in _message(lambda U, V, t, s: _risk(U, V, t, s, half=1.0), "isotropic_limit_risk")


def test_risk_without_the_noise_floor():
    assert "floor s^2/2 is missing" in _message(lambda U, V, t, s: _risk(U, V, t, s, floor=False),
                                                "isotropic_limit_risk")


def test_risk_with_a_x_not_transposed():
    assert "transpose belongs" in _message(lambda U, V, t, s: _risk(U, V, t, s, transpose=True),
                                           "isotropic_limit_risk")


def test_risk_with_the_square_of_the_second_moment_for_the_fourth():
    def squared_second_moment(U, V, t, s):
        return _risk(U, V, t, s, fourth=(U.shape[0] - 1) ** 2)
    assert "fourth moment of w" in _message(squared_second_moment, "isotropic_limit_risk")


def test_risk_forgetting_the_noise_of_the_prompt_labels():
    assert "v_y s^2 a_y" in _message(lambda U, V, t, s: _risk(U, V, t, s, label_noise=False),
                                     "isotropic_limit_risk")


def _student_step(U, V, tokens, query, target, lr, *, sign=-1, reduce="mean", scale=1.0, lr_power=1, flip_U=False):
    # a student's step with autograd, with one thing changeable
    U = U.clone().requires_grad_()
    V = V.clone().requires_grad_()
    key = U.T if flip_U else U
    weights = torch.softmax(torch.einsum("bld,de,be->bl", tokens, key, query), dim=-1)
    prediction = (weights.unsqueeze(-1) * tokens).sum(1) @ V[-1]
    errors = (prediction - target) ** 2
    loss = scale * (errors.mean() if reduce == "mean" else errors.sum())
    loss.backward()
    with torch.no_grad():
        step = sign * lr**lr_power
        return torch.stack([U + step * U.grad, V + step * V.grad])


def test_a_step_written_with_backward_passes():
    assert exercises.result(lambda *a: _student_step(*a), "sgd_step_uv").status == "passed"


def test_step_uphill():
    assert "climbs the loss" in _message(lambda *a: _student_step(*a, sign=+1), "sgd_step_uv")


def test_step_with_the_learning_rate_squared():
    assert "applied twice" in _message(lambda *a: _student_step(*a, lr_power=2), "sgd_step_uv")


def test_step_on_the_summed_loss():
    assert "sums the squared errors" in _message(lambda *a: _student_step(*a, reduce="sum"), "sgd_step_uv")


def test_step_on_half_the_mean_squared_error():
    assert "factor 1/2" in _message(lambda *a: _student_step(*a, scale=0.5), "sgd_step_uv")


def test_step_with_the_score_read_the_other_way():
    assert "U transposed" in _message(lambda *a: _student_step(*a, flip_U=True), "sgd_step_uv")


def test_step_returning_only_u_has_the_wrong_shape():
    assert "expected shape (2, 3, 3)" in _message(lambda *a: _student_step(*a)[0], "sgd_step_uv")
