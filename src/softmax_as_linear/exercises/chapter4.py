r"""Chapter 4's coding exercises: the infinite-prompt risk of isotropic in-context regression, and one SGD step.

Shapes: ``U, V (D, D)`` with ``D = d + 1``; ``tokens (B, L, D)``, ``query (B, D)``, ``target (B,)``.
:func:`isotropic_limit_risk` returns a scalar, :math:`R_\infty(U, V)` of the chapter's closed form with
:math:`\Sigma = I_d` (reference :func:`~softmax_as_linear.theory.risks.infinite_prompt_risk`);
:func:`sgd_step_uv` returns ``(2, D, D)``, the parameters after one SGD step of softmax attention on the mean
squared error of a batch, computed here with autograd on
:func:`~softmax_as_linear.theory.models.predict_unchecked`.
"""
from __future__ import annotations

import torch

from ..theory import models, risks
from ..theory.regression import RegressionTask
from .feedback import Case, Exercise, Mistake

_F64 = dict(dtype=torch.float64)


def isotropic_limit_risk(U, V, task_var, noise_var):
    r""":math:`R_\infty(U, V)` of (ch4-eq-Rinf-closed) with :math:`\Sigma = I_d`, :math:`\tau^2` = ``task_var``,
    :math:`s^2` = ``noise_var``; the reference."""
    task = RegressionTask(U.shape[-1] - 1, task_var=task_var, noise_var=noise_var)
    return risks.infinite_prompt_risk(U, V, task)


def _risk_parts(U, V, tau2, s2, *, transposed=False, fourth=None, prompt_noise=True, a_y_column=False):
    """The terms of the isotropic closed form, with the switches a wrong implementation flips."""
    d = U.shape[-1] - 1
    A_x, v_x, v_y = U[:d, :d], V[d, :d], V[d, d]
    a_y = U[:d, d] if a_y_column else U[d, :d]
    A = A_x if transposed else A_x.T
    M = v_y * A + torch.outer(a_y, v_x)
    c0 = A @ v_x + (v_y * s2 * a_y if prompt_noise else 0 * a_y)
    fourth = d**2 + 2 * d if fourth is None else fourth
    E = torch.eye(d, **_F64) - M
    bracket = (tau2 * (E * E).sum() + c0 @ c0 + 2 * v_y * tau2 * d * (c0 @ a_y)
               + v_y**2 * tau2**2 * fourth * (a_y @ a_y))
    return 0.5 * bracket


def _risk_cases() -> list[Case]:
    g = torch.Generator().manual_seed(401)
    cases = []
    U, V = 0.4 * torch.randn(6, 6, generator=g, **_F64), 0.4 * torch.randn(6, 6, generator=g, **_F64)
    cases.append(Case("random parameters, d = 5", (U, V, 0.2, 0.1)))
    U, V = 0.7 * torch.randn(3, 3, generator=g, **_F64), 0.7 * torch.randn(3, 3, generator=g, **_F64)
    cases.append(Case("random parameters, d = 2, no label noise", (U, V, 0.5, 0.0)))
    U, V = torch.randn(2, 2, generator=g, **_F64), torch.randn(2, 2, generator=g, **_F64)
    cases.append(Case("d = 1", (U, V, 1.0, 0.3)))
    U, V = torch.zeros(4, 4, **_F64), torch.zeros(4, 4, **_F64)
    U[:3, :3] = torch.randn(3, 3, generator=g, **_F64)
    V[3, 3] = 1.3
    cases.append(Case("block parameters (a_y = 0, v_x = 0), A_x not symmetric", (U, V, 0.25, 0.1)))
    cases.append(Case("zero parameters (the zero predictor)", (torch.zeros(6, 6, **_F64), torch.zeros(6, 6, **_F64),
                                                                0.2, 0.1)))
    return cases


RISK = Exercise(
    function="isotropic_limit_risk", chapter=4, reference=isotropic_limit_risk, cases=_risk_cases,
    mistakes=(
        Mistake("this is the mean squared error E[(y_hat - y_q)^2]: the chapter's risk R is half of it (the 1/2 in"
                " front of the bracket and the floor s^2/2).",
                lambda U, V, t, s: 2 * (_risk_parts(U, V, t, s) + s / 2)),
        Mistake("the label-noise floor s^2/2 is missing: even the best predictor cannot guess the query's noise.",
                lambda U, V, t, s: _risk_parts(U, V, t, s)),
        Mistake("M = v_y A_x^T Sigma + a_y (Sigma v_x)^T and c_0 = A_x^T Sigma v_x + ...: yours uses A_x where its"
                " transpose belongs (the prediction is b_w^T x_q with b_w = A^T Gamma_w v).",
                lambda U, V, t, s: _risk_parts(U, V, t, s, transposed=True) + s / 2),
        Mistake("the fourth moment of w is off: E[(w^T w)^2] = tau^4 ((tr Sigma)^2 + 2 tr Sigma^2) = tau^4 (d^2 + 2d)"
                " for Sigma = I, not (tau^2 d)^2.",
                lambda U, V, t, s: _risk_parts(U, V, t, s, fourth=(U.shape[-1] - 1) ** 2) + s / 2),
        Mistake("c_0 misses the term v_y s^2 a_y: the prompt labels carry noise too, and Gamma_w's corner is"
                " w^T Sigma w + s^2.",
                lambda U, V, t, s: _risk_parts(U, V, t, s, prompt_noise=False) + s / 2),
        Mistake("a_y is the last row of U's first d columns, U[d, :d] (it multiplies the label y_i of a prompt"
                " token): yours reads the last column U[:d, d], which never meets the query (its last entry is 0).",
                lambda U, V, t, s: _risk_parts(U, V, t, s, a_y_column=True) + s / 2),
    ),
    nonfinite="the risk is a polynomial in the entries of U and V: it cannot be infinite for finite parameters")


def sgd_step_uv(U, V, tokens, query, target, lr):
    r"""One SGD step of softmax attention on :math:`\frac1B\sum_b (\hat y_b - y_b)^2`; the reference.

    U, V ``(D, D)``, tokens ``(B, L, D)``, query ``(B, D)``, target ``(B,)`` -> ``(2, D, D)``, the stacked
    :math:`(U - \eta\nabla_U, V - \eta\nabla_V)`.
    """
    return _step(U, V, tokens, query, target, lr)


def _step(U, V, tokens, query, target, lr, *, activation="softmax", half=False, total=False, transposed=False,
          rate=None):
    """One step with the switches a wrong implementation flips; ``rate`` multiplies the gradient (default ``-lr``)."""
    U, V = U.clone().requires_grad_(True), V.clone().requires_grad_(True)
    prediction = models.predict_unchecked(tokens, query, U.T if transposed else U, V, activation)
    squared = (prediction - target) ** 2
    loss = (squared.sum() if total else squared.mean()) * (0.5 if half else 1.0)
    gU, gV = torch.autograd.grad(loss, (U, V))
    rate = -lr if rate is None else rate
    return torch.stack((U + rate * gU, V + rate * gV)).detach()


def _step_cases() -> list[Case]:
    g = torch.Generator().manual_seed(402)

    def batch(B, L, D, scale=1.0):
        return (scale * torch.randn(D, D, generator=g, **_F64), scale * torch.randn(D, D, generator=g, **_F64),
                torch.randn(B, L, D, generator=g, **_F64), torch.randn(B, D, generator=g, **_F64),
                torch.randn(B, generator=g, **_F64))

    cases = [Case("random batch", (*batch(8, 6, 3, 0.5), 0.1)),
             Case("one prompt (B = 1)", (*batch(1, 5, 3, 0.5), 0.05)),
             Case("one token per prompt (L = 1)", (*batch(4, 1, 3, 0.5), 0.1))]
    task = RegressionTask(3)
    prompts = task.sample(16, 20, g, dtype=torch.float64)
    U, V = 0.3 * torch.randn(4, 4, generator=g, **_F64), 0.3 * torch.randn(4, 4, generator=g, **_F64)
    cases.append(Case("regression prompts (d = 3, L = 20), learning rate 0.5",
                      (U, V, prompts.tokens, prompts.query, prompts.target, 0.5)))
    return cases


STEP = Exercise(
    function="sgd_step_uv", chapter=4, reference=sgd_step_uv, cases=_step_cases,
    mistakes=(
        Mistake("it climbs the loss: a descent step subtracts the learning rate times the gradient.",
                lambda U, V, t, q, y, lr: _step(U, V, t, q, y, lr, rate=lr)),
        Mistake("the learning rate is applied twice: the step is -lr times the gradient, once.",
                lambda U, V, t, q, y, lr: _step(U, V, t, q, y, lr, rate=-lr * lr)),
        Mistake("the loss sums the squared errors over the batch: it is their mean, so that the step does not grow"
                " with the batch size.",
                lambda U, V, t, q, y, lr: _step(U, V, t, q, y, lr, total=True)),
        Mistake("the loss has a factor 1/2: the training loss is the mean squared error itself (twice the risk R),"
                " as in the chapter's training runs.",
                lambda U, V, t, q, y, lr: _step(U, V, t, q, y, lr, half=True)),
        Mistake("the score of token z_i is z_i^T U z_q (the query on the right of U): yours uses U transposed.",
                lambda U, V, t, q, y, lr: _step(U, V, t, q, y, lr, transposed=True)),
        Mistake("these are linear-attention weights (score / L): the model here is softmax attention.",
                lambda U, V, t, q, y, lr: _step(U, V, t, q, y, lr, activation="linear")),
    ),
    nonfinite="a score overflowed in an exponential: use torch.softmax, which subtracts the largest score first")

EXERCISES = (RISK, STEP)
