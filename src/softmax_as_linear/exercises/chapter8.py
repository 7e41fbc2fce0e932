r"""Chapter 8's coding exercises: the Nadaraya-Watson smoother on the sphere, and the Gaussian smoothing of a sum of
cosines.

Shapes: ``inputs (L, d)`` on the unit sphere, ``labels (L,)``, ``query (d,)``, ``w`` a number -> a scalar;
``omega (m, d)``, ``phase (m,)``, ``coef (m,)``, ``mean (d,)``, ``cov (d, d)`` -> a scalar. The references are
:func:`~softmax_as_linear.theory.kernel_smoother.nadaraya_watson` and
:func:`~softmax_as_linear.theory.tilted_limit.smoothed_cosines`.
"""
from __future__ import annotations

import torch

from ..theory import kernel_smoother, tilted_limit
from .feedback import Case, Exercise, Mistake

_F64 = dict(dtype=torch.float64)


def _on_sphere(L: int, d: int, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(L, d, generator=g, **_F64)
    return x / x.norm(dim=-1, keepdim=True)


def _smoother_cases() -> list[Case]:
    g = torch.Generator().manual_seed(801)
    cases = []
    for L, d, w, name in ((20, 2, 5.0, "random prompt on the circle"), (12, 3, 1.5, "random prompt on the sphere S^2"),
                          (1, 2, 3.0, "one token"), (8, 2, 0.0, "w = 0 (no window)"),
                          (15, 3, 2000.0, "w = 2000 (scores in the thousands)")):
        x, q = _on_sphere(L, d, g), _on_sphere(1, d, g)[0]
        cases.append(Case(name, (x, torch.randn(L, generator=g, **_F64), q, w)))
    return cases


def sphere_smoother(inputs, labels, query, w):
    r""":math:`\hat y = \sum_i e^{w x_i^\top x_q} y_i / \sum_j e^{w x_j^\top x_q}`, the reference."""
    inputs, labels, query = (torch.as_tensor(a, dtype=torch.float64) for a in (inputs, labels, query))
    tokens = torch.cat([inputs, labels.unsqueeze(-1)], dim=-1)
    return kernel_smoother.nadaraya_watson(tokens, torch.cat([query, torch.zeros(1, **_F64)]), w)


def _cosine_cases() -> list[Case]:
    g = torch.Generator().manual_seed(802)
    B = torch.randn(2, 2, generator=g, **_F64)
    cov = B @ B.T + 0.3 * torch.eye(2, **_F64)          # non-diagonal
    cases = [Case("random frequencies, non-diagonal Sigma",
                  (torch.randn(5, 2, generator=g, **_F64), 6.3 * torch.rand(5, generator=g, **_F64),
                   torch.randn(5, generator=g, **_F64), torch.randn(2, generator=g, **_F64), cov))]
    cases.append(Case("one cosine", (torch.randn(1, 2, generator=g, **_F64), torch.tensor([0.7], **_F64),
                                     torch.tensor([1.5], **_F64), torch.randn(2, generator=g, **_F64), cov)))
    cases.append(Case("Sigma = 0 (no smoothing)",
                      (torch.randn(3, 2, generator=g, **_F64), 6.3 * torch.rand(3, generator=g, **_F64),
                       torch.randn(3, generator=g, **_F64), torch.randn(2, generator=g, **_F64),
                       torch.zeros(2, 2, **_F64))))
    B = torch.randn(3, 3, generator=g, **_F64)
    cases.append(Case("d = 3, small Sigma",
                      (torch.randn(4, 3, generator=g, **_F64), 6.3 * torch.rand(4, generator=g, **_F64),
                       torch.randn(4, generator=g, **_F64), torch.randn(3, generator=g, **_F64), 0.2 * B @ B.T)))
    return cases


def gaussian_smoothed_cosines(omega, phase, coef, mean, cov):
    r""":math:`(P_\Sigma f)(\mu) = \sum_j c_j e^{-\omega_j^\top\Sigma\omega_j/2}\cos(\omega_j^\top\mu + b_j)`, the
    reference."""
    return tilted_limit.smoothed_cosines(*(torch.as_tensor(a, dtype=torch.float64)
                                           for a in (omega, phase, coef, mean, cov)))


def _sm(x, y, q, w):
    return torch.softmax(x @ q * w, 0) @ y


def _damped(omega, phase, coef, mean, damping):
    return (coef * damping * torch.cos(omega @ mean + phase)).sum()


SMOOTHER = Exercise(
    function="sphere_smoother", chapter=8, reference=sphere_smoother, cases=_smoother_cases,
    mistakes=(
        Mistake("the weights do not sum to one: divide each e^{w x_i^T x_q} by the sum of all of them.",
                lambda x, y, q, w: torch.exp(w * (x @ q)) @ y),
        Mistake("the window ignores w: every label gets 1/L, which is the answer only when w = 0.",
                lambda x, y, q, w: y.mean()),
        Mistake("the window is twice too narrow: on the sphere e^{w x_i^T x_q} is e^{-w ||x_i - x_q||^2 / 2} up to a"
                " constant, with the 1/2.", lambda x, y, q, w: _sm(x, y, q, 2 * w)),
        Mistake("the exponent's sign is flipped: the window should favour the inputs near the query (x_i^T x_q close"
                " to 1), yours favours those near -x_q.", lambda x, y, q, w: _sm(x, y, q, -w)),
        Mistake("w is the kernel's inverse squared width, e^{-w ||x_i - x_q||^2 / 2}: yours divides by w.",
                lambda x, y, q, w: torch.softmax(-((x - q) ** 2).sum(-1) / (2 * w), 0) @ y),
    ),
    nonfinite=("e^{w x_i^T x_q} overflows for w in the thousands, and infinity / infinity is NaN; subtract the"
               " largest score from every score first (the weights do not change)"))

COSINES = Exercise(
    function="gaussian_smoothed_cosines", chapter=8, reference=gaussian_smoothed_cosines, cases=_cosine_cases,
    mistakes=(
        Mistake("it returns f(mu) itself, without smoothing: averaging cos(omega^T (mu + xi) + b) over xi ~ N(0, Sigma)"
                " damps each cosine by e^{-omega^T Sigma omega / 2}.",
                lambda o, b, c, m, S: _damped(o, b, c, m, torch.ones_like(c))),
        Mistake("the damping misses its 1/2: E cos(omega^T xi + b) = e^{-omega^T Sigma omega / 2} cos b for"
                " xi ~ N(0, Sigma).",
                lambda o, b, c, m, S: _damped(o, b, c, m, torch.exp(-((o @ S) * o).sum(-1)))),
        Mistake("the damping ignores Sigma: e^{-||omega||^2 / 2} is the damping for Sigma = I only; the variance of"
                " omega^T xi is omega^T Sigma omega.",
                lambda o, b, c, m, S: _damped(o, b, c, m, torch.exp(-0.5 * (o * o).sum(-1)))),
        Mistake("the damping uses the diagonal of Sigma only: omega^T Sigma omega also has the cross terms"
                " 2 omega_1 omega_2 Sigma_12.",
                lambda o, b, c, m, S: _damped(o, b, c, m, torch.exp(-0.5 * (o * o) @ torch.diagonal(S)))),
        Mistake("omega_j^T Sigma omega_j is the diagonal of Omega Sigma Omega^T (one number per frequency): yours"
                " sums its rows, mixing the frequencies.",
                lambda o, b, c, m, S: _damped(o, b, c, m, torch.exp(-0.5 * (o @ S @ o.T).sum(-1)))),
    ))

EXERCISES = (SMOOTHER, COSINES)
