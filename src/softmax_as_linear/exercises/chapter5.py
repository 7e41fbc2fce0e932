r"""Chapter 5's coding exercises: the infinite-prompt prediction and the best linear attention with a covariance Sigma.

:func:`anisotropic_limit_prediction`: ``U, V (D, D)``, ``Sigma (d, d)``, ``w (n, d)``, ``x_query (n, d)``, a float
``noise_var`` -> ``(n,)``, the Lemma 2.1 prediction :math:`v^\top\Gamma_w U z_q` (reference
:func:`~softmax_as_linear.theory.attention.gaussian_attention` with
:meth:`~softmax_as_linear.theory.regression.RegressionTask.token_covariance`).
:func:`best_linear_attention_risk`: an int ``L``, ``Sigma (d, d)``, floats ``task_var``, ``noise_var`` -> a scalar,
:math:`R^*_{\mathrm{lin}}(L)` (reference :func:`~softmax_as_linear.theory.risks.optimal_linear_risk`).
"""
from __future__ import annotations

import torch

from ..theory import attention, risks
from ..theory.regression import RegressionTask, kms_covariance
from .feedback import Case, Exercise, Mistake

_F64 = dict(dtype=torch.float64)


def anisotropic_limit_prediction(U, V, Sigma, w, x_query, noise_var):
    r""":math:`\hat y = v^\top \Gamma_w U z_q` with :math:`\Gamma_w` of (ch4-eq-gamma) and :math:`z_q = (x_q, 0)`;
    the reference."""
    task = RegressionTask(Sigma.shape[-1], Sigma, noise_var=noise_var)
    query = torch.cat([x_query, torch.zeros_like(x_query[..., :1])], dim=-1)
    zero = torch.zeros_like(query)
    return attention.gaussian_attention(zero, task.token_covariance(w), query, U, V)[..., -1]


def _prediction(U, V, Sigma, w, x, s2, *, cross=None, corner=None, transposed=False, v_column=False):
    """v^T Gamma_w U z_q with Gamma_w's cross-covariance ``cross`` and corner ``corner`` as a wrong version has them."""
    n, d = w.shape
    corner = ((w @ Sigma) * w).sum(-1) + s2 if corner is None else corner    # (n,): w^T Sigma w + s^2
    cross = w @ Sigma if cross is None else cross                           # (n, d): Sigma w (Sigma symmetric)
    gamma = torch.zeros(n, d + 1, d + 1, **_F64)
    gamma[:, :d, :d], gamma[:, :d, d], gamma[:, d, :d], gamma[:, d, d] = Sigma, cross, cross, corner
    query = torch.cat([x, torch.zeros(n, 1, **_F64)], dim=-1)
    v = V[:, d] if v_column else V[d]
    return torch.einsum("i,nij,jk,nk->n", v, gamma, U.T if transposed else U, query)


def _spd(d, g, spread=1.0):
    A = torch.randn(d, d, generator=g, **_F64)
    return spread * A @ A.T / d + 0.3 * torch.eye(d, **_F64)


def _prediction_cases() -> list[Case]:
    g = torch.Generator().manual_seed(501)
    cases = []
    for name, d, n, s2 in (("random Sigma (not diagonal), d = 3", 3, 6, 0.1),
                           ("random Sigma, d = 4, no label noise", 4, 5, 0.0)):
        U, V = torch.randn(d + 1, d + 1, generator=g, **_F64), torch.randn(d + 1, d + 1, generator=g, **_F64)
        cases.append(Case(name, (U, V, _spd(d, g, 2.0), torch.randn(n, d, generator=g, **_F64),
                                 torch.randn(n, d, generator=g, **_F64), s2)))
    sigma = kms_covariance(5, 0.5)
    c = float(torch.trace(torch.linalg.matrix_power(torch.linalg.inv(sigma), 2))) ** 0.25
    U, V = torch.zeros(6, 6, **_F64), torch.zeros(6, 6, **_F64)
    U[:5, :5], V[5, 5] = torch.linalg.inv(sigma) / c, c
    cases.append(Case("KMS Sigma at the limit (U*, V*) of (ch5-eq-limit)",
                      (U, V, sigma, torch.randn(4, 5, generator=g, **_F64) / 5**0.5,
                       torch.randn(4, 5, generator=g, **_F64), 0.1)))
    U, V = torch.randn(2, 2, generator=g, **_F64), torch.randn(2, 2, generator=g, **_F64)
    cases.append(Case("d = 1, Sigma = 4", (U, V, torch.tensor([[4.0]], **_F64), torch.randn(3, 1, generator=g, **_F64),
                                          torch.randn(3, 1, generator=g, **_F64), 0.5)))
    return cases


PREDICTION = Exercise(
    function="anisotropic_limit_prediction", chapter=5, reference=anisotropic_limit_prediction,
    cases=_prediction_cases,
    mistakes=(
        Mistake("this is Chapter 4's isotropic Gamma_w: with covariance Sigma, Cov(x, y) = Sigma w and"
                " Var(y) = w^T Sigma w + s^2, not w and w^T w + s^2.",
                lambda U, V, S, w, x, s: _prediction(U, V, S, w, x, s, cross=w, corner=(w * w).sum(-1) + s)),
        Mistake("the corner of Gamma_w is Var(y_i) = w^T Sigma w + s^2: yours has w^T w + s^2 (the isotropic"
                " formula) there.",
                lambda U, V, S, w, x, s: _prediction(U, V, S, w, x, s, corner=(w * w).sum(-1) + s)),
        Mistake("Gamma_w's cross-covariance Cov(x_i, y_i) is Sigma w: yours has w there.",
                lambda U, V, S, w, x, s: _prediction(U, V, S, w, x, s, cross=w)),
        Mistake("Sigma^-1 appears where Sigma belongs: Gamma_w is built on Sigma itself (it is the trained U that"
                " learns Sigma^-1).",
                lambda U, V, S, w, x, s: anisotropic_limit_prediction(U, V, torch.linalg.inv(S), w, x, s)),
        Mistake("the label noise is missing: Gamma_w's corner is w^T Sigma w + s^2.",
                lambda U, V, S, w, x, s: _prediction(U, V, S, w, x, s, corner=((w @ S) * w).sum(-1))),
        Mistake("the limit is V Gamma_w U z_q, with U applied to the query first: yours uses U transposed.",
                lambda U, V, S, w, x, s: _prediction(U, V, S, w, x, s, transposed=True)),
        Mistake("the prediction is the last coordinate of V Gamma_w U z_q, so v is the last row of V: yours takes its"
                " last column.",
                lambda U, V, S, w, x, s: _prediction(U, V, S, w, x, s, v_column=True)),
    ),
    nonfinite="the limit prediction is a product of finite matrices: nothing in it should overflow")


def best_linear_attention_risk(L, Sigma, task_var, noise_var):
    r""":math:`R^*_{\mathrm{lin}}(L)` of (ch4-eq-linstar) for a covariance :math:`\Sigma`; the reference."""
    task = RegressionTask(Sigma.shape[-1], Sigma, task_var=task_var, noise_var=noise_var)
    return torch.tensor(risks.optimal_linear_risk(L, task), **_F64)


def _linstar(L, S, t, s, *, scale=None, trace=None, explained=None, floor=True):
    """The closed form with the piece a wrong version changes: Gamma_L's ``scale`` and ``trace``, or the product."""
    d = S.shape[-1]
    scale = 1 + 1 / L if scale is None else scale
    trace = torch.trace(S) if trace is None else trace
    gamma = scale * S + (trace + s / t) / L * torch.eye(d, **_F64)
    inverse = torch.linalg.inv(gamma)
    kept = torch.trace(S @ inverse @ S) if explained is None else explained(S, inverse)
    return t / 2 * (torch.trace(S) - kept) + (s / 2 if floor else 0.0)


def _linear_cases() -> list[Case]:
    g = torch.Generator().manual_seed(502)
    return [Case("random Sigma, d = 3, L = 10", (10, _spd(3, g, 3.0), 0.3, 0.1)),
            Case("diagonal Sigma = diag(4, 1, 0.25), L = 40", (40, torch.diag(torch.tensor([4.0, 1.0, 0.25], **_F64)),
                                                              0.2, 0.2)),
            Case("random Sigma, d = 4, one token (L = 1)", (1, _spd(4, g, 0.5), 0.25, 0.1)),
            Case("KMS Sigma, rho = 0.5, d = 5, L = 100", (100, kms_covariance(5, 0.5), 0.2, 0.1))]


LINEAR = Exercise(
    function="best_linear_attention_risk", chapter=5, reference=best_linear_attention_risk, cases=_linear_cases,
    mistakes=(
        Mistake("this is the isotropic closed form (tau^2 d / 2) kappa / (L + kappa) + s^2/2 of Chapter 4's exercise:"
                " with a covariance Sigma, compute Gamma_L and the traces of (ch4-eq-linstar).",
                lambda L, S, t, s: t * S.shape[-1] / 2 * (k := 1 + S.shape[-1] + s / t) / (L + k) + s / 2),
        Mistake("Gamma_L's last term is (tr Sigma + s^2/tau^2) / L times I: yours has d in place of tr Sigma (they"
                " agree only when Sigma's diagonal is 1).",
                lambda L, S, t, s: _linstar(L, S, t, s, trace=S.shape[-1])),
        Mistake("Gamma_L misses the trace term tr(Sigma) / L: the fourth moments of the prompt tokens add"
                " (tr Sigma + s^2/tau^2) / L times I.",
                lambda L, S, t, s: _linstar(L, S, t, s, trace=0.0)),
        Mistake("Gamma_L = (1 + 1/L) Sigma + ...: the factor (1 + 1/L) on Sigma is missing.",
                lambda L, S, t, s: _linstar(L, S, t, s, scale=1.0)),
        Mistake("the part of the risk the predictor removes is tr(Sigma Gamma_L^-1 Sigma): yours has one Sigma"
                " missing.",
                lambda L, S, t, s: _linstar(L, S, t, s, explained=lambda S, inverse: torch.trace(S @ inverse))),
        Mistake("Sigma^-1 appears where Sigma belongs in the trace: the removed part is tr(Sigma Gamma_L^-1 Sigma).",
                lambda L, S, t, s: _linstar(L, S, t, s, explained=lambda S, inverse: torch.trace(
                    torch.linalg.inv(S) @ inverse @ torch.linalg.inv(S)))),
        Mistake("the label-noise floor s^2/2 is missing.",
                lambda L, S, t, s: _linstar(L, S, t, s, floor=False)),
    ),
    nonfinite="Gamma_L is positive definite for L >= 1, so its inverse is finite: check the matrix you invert")

EXERCISES = (PREDICTION, LINEAR)
