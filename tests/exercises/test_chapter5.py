"""Chapter 5's checkers against wrong implementations a student might write (written here, not taken from the
checker's own list), each told what is wrong."""
import numpy as np
import torch

from softmax_as_linear import exercises

from helpers import diagnosis as _message


def _prediction(U, V, Sigma, w, x, s2, *, cross=None, corner=None, sigma_inverse=False, U_T=False, last_column=False):
    # a student's limit prediction in NumPy, one task at a time, with one thing changeable
    U, V, Sigma, w, x = (np.asarray(a) for a in (U, V, Sigma, w, x))
    S = np.linalg.inv(Sigma) if sigma_inverse else Sigma
    d = S.shape[0]
    out = []
    for wn, xn in zip(w, x):
        g = np.empty((d + 1, d + 1))
        g[:d, :d] = S
        g[:d, d] = g[d, :d] = S @ wn if cross is None else cross(wn)
        g[d, d] = wn @ S @ wn + s2 if corner is None else corner(wn)
        v = V[:, d] if last_column else V[d]
        out.append(v @ g @ (U.T if U_T else U) @ np.append(xn, 0.0))
    return np.array(out)


def test_a_loop_over_the_tasks_passes():
    assert exercises.result(lambda *a: _prediction(*a), "anisotropic_limit_prediction").status == "passed"


def test_prediction_with_the_isotropic_token_covariance():
    def isotropic(U, V, S, w, x, s):
        return _prediction(U, V, S, w, x, s, cross=lambda wn: wn, corner=lambda wn: wn @ wn + s)
    assert "Chapter 4's isotropic" in _message(isotropic, "anisotropic_limit_prediction")


def test_prediction_built_on_the_inverse_covariance():
    def inverse(U, V, S, w, x, s):
        return _prediction(U, V, S, w, x, s, sigma_inverse=True)
    assert "Sigma^-1 appears where Sigma belongs" in _message(inverse, "anisotropic_limit_prediction")


def test_prediction_without_the_label_noise():
    def noiseless(U, V, S, w, x, s):
        return _prediction(U, V, S, w, x, s, corner=lambda wn: wn @ np.asarray(S) @ wn)
    assert "label noise is missing" in _message(noiseless, "anisotropic_limit_prediction")


def test_prediction_with_u_transposed():
    assert "U transposed" in _message(lambda *a: _prediction(*a, U_T=True), "anisotropic_limit_prediction")


def test_prediction_reading_v_by_column():
    assert "last column" in _message(lambda *a: _prediction(*a, last_column=True), "anisotropic_limit_prediction")


def test_prediction_for_the_first_task_only_has_the_wrong_shape():
    assert "expected shape (6,)" in _message(lambda *a: _prediction(*a)[0], "anisotropic_limit_prediction")


def _linear(L, Sigma, t, s, *, trace=None, factor=None, middle="S G^-1 S", floor=True):
    # a student's closed form in torch, with one thing changeable
    d = Sigma.shape[0]
    tr = torch.trace(Sigma) if trace is None else trace
    factor = 1 + 1 / L if factor is None else factor
    G = factor * Sigma + (tr + s / t) / L * torch.eye(d, dtype=torch.float64)
    Gi = torch.linalg.inv(G)
    inner = {"S G^-1 S": Sigma @ Gi @ Sigma, "G^-1 S": Gi @ Sigma,
             "Si G^-1 Si": torch.linalg.inv(Sigma) @ Gi @ torch.linalg.inv(Sigma)}[middle]
    return t / 2 * (torch.trace(Sigma) - torch.trace(inner)) + (s / 2 if floor else 0)


def test_a_closed_form_with_inv_passes():
    assert exercises.result(lambda *a: _linear(*a), "best_linear_attention_risk").status == "passed"


def test_linear_risk_with_d_for_the_trace():
    assert "d in place of tr Sigma" in _message(lambda L, S, t, s: _linear(L, S, t, s, trace=S.shape[0]),
                                                "best_linear_attention_risk")


def test_linear_risk_without_the_trace_term():
    assert "misses the trace term" in _message(lambda L, S, t, s: _linear(L, S, t, s, trace=0),
                                               "best_linear_attention_risk")


def test_linear_risk_without_one_plus_one_over_l():
    assert "(1 + 1/L)" in _message(lambda L, S, t, s: _linear(L, S, t, s, factor=1), "best_linear_attention_risk")


def test_linear_risk_with_one_sigma_dropped():
    assert "one Sigma missing" in _message(lambda *a: _linear(*a, middle="G^-1 S"), "best_linear_attention_risk")


def test_linear_risk_with_inverse_covariances():
    assert "Sigma^-1 appears" in _message(lambda *a: _linear(*a, middle="Si G^-1 Si"), "best_linear_attention_risk")


def test_linear_risk_from_the_isotropic_formula():
    def isotropic(L, Sigma, tau2, s2):
        d = Sigma.shape[0]
        kappa = 1 + d + s2 / tau2
        return tau2 * d / 2 * kappa / (L + kappa) + s2 / 2
    assert "isotropic closed form" in _message(isotropic, "best_linear_attention_risk")
