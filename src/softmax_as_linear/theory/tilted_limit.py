r"""The infinite-prompt limit of attention with fixed weights when the labels are a nonlinear function of Gaussian
inputs.

Tokens :math:`z = (x, y)` with :math:`x \sim N(0, \Sigma)`, :math:`y = f(x) + \varepsilon`, :math:`\varepsilon \sim N(0,
s^2)` independent; the query is :math:`z_q = (x_q, 0)` and :math:`u = U z_q = (u_x, u_y)`. When the score does not read
the labels (:math:`u_y = 0`, i.e. the last row of :math:`U` vanishes on the inputs: :math:`U_{D,1:d} = 0`), the
softmax tilt :math:`e^{z^\top u} = e^{x^\top u_x}` acts on :math:`x` alone, and by Lemma 2.1's completion of the square
the tilted input law is :math:`N(\Sigma u_x, \Sigma)`; the noise is not tilted. With :math:`v` the last row of
:math:`V`, the infinite-prompt softmax prediction is therefore

.. math::

    \hat y_\infty(x_q) &= v_x^\top \Sigma M x_q + v_y\, (P_\Sigma f)(\Sigma M x_q), \\
    (P_\Sigma f)(\mu) &= \mathbb{E}_{\xi \sim N(0, \Sigma)} f(\mu + \xi),

:math:`M = U_{1:d, 1:d}` the block of :math:`U` that reads the inputs: a linear part plus the Gaussian smoothing of
:math:`f` evaluated at a *linear image* of the query. In closed form for

- cosines, :math:`f(x) = \sum_j c_j \cos(\omega_j^\top x + b_j)`:
  :math:`(P_\Sigma f)(\mu) = \sum_j c_j e^{-\omega_j^\top \Sigma \omega_j / 2} \cos(\omega_j^\top \mu + b_j)`
  (:func:`smoothed_cosines`);
- quadratics, :math:`f(x) = x^\top B x + \beta^\top x + c`:
  :math:`(P_\Sigma f)(\mu) = \mu^\top B \mu + \operatorname{tr}(B\Sigma) + \beta^\top \mu + c`
  (:func:`smoothed_quadratic`).

Normalised linear attention's limit is :math:`v^\top \mathbb{E}[z z^\top] u`, linear in :math:`x_q` whatever
:math:`f`; for cosines its moments are in closed form too (Stein's lemma: :math:`\mathbb{E}[x \cos(\omega^\top x + b)] =
-\Sigma\omega\, e^{-\omega^\top\Sigma\omega/2} \sin b`), :func:`linear_limit`. This is the course's own derivation
(Chapter 8), an application of the paper's Lemma 2.1 (Boyer & Boursier, Section 2) to nonlinear labels.

Shapes: frequencies ``omega (m, d)``, phases ``phase (m,)``, coefficients ``coef (..., m)``, ``Sigma (d, d)``,
``U, V (D, D)``, query ``(..., D)``. Float64 throughout.
"""
from __future__ import annotations

import functools
import inspect

import torch
from torch import Tensor

from ..core import checks
from ..registry import ACTIVATIONS


def smoothed_cosines(omega: Tensor, phase: Tensor, coef: Tensor, mean: Tensor, cov: Tensor) -> Tensor:
    r""":math:`(P_\Sigma f)(\mu) = \sum_j c_j e^{-\omega_j^\top\Sigma\omega_j/2} \cos(\omega_j^\top\mu + b_j)`.

    omega ``(m, d)``, phase ``(m,)``, coef ``(..., m)``, mean ``(..., d)``, cov ``(d, d)`` (positive semi-definite)
    -> ``(...)``, in the widest dtype of the arguments (NumPy arrays accepted)."""
    omega, phase, coef, cov = _cosine_terms(omega, phase, coef, cov, dtype=None)
    mean = _mean(mean, omega.shape[1], omega.dtype)
    _batch("coef", coef.shape[:-1], "mean", mean.shape[:-1])
    damping = torch.exp(-0.5 * ((omega @ cov) * omega).sum(-1))
    return (coef * damping * torch.cos(mean @ omega.T + phase)).sum(-1)


def smoothed_quadratic(B: Tensor, beta: Tensor, c: float, mean: Tensor, cov: Tensor) -> Tensor:
    r""":math:`(P_\Sigma f)(\mu) = \mu^\top B\mu + \operatorname{tr}(B\Sigma) + \beta^\top\mu + c` for
    :math:`f(x) = x^\top Bx + \beta^\top x + c`. B ``(d, d)``, beta ``(d,)``, mean ``(..., d)``, cov ``(d, d)``
    (positive semi-definite) -> ``(...)``, in the widest dtype of the arguments (NumPy arrays accepted)."""
    sizes: dict = {}
    B, beta, mean, cov = (checks.shaped(name, value, dims, sizes, dtype=None) for name, value, dims in
                          (("B", B, "(d, d)"), ("beta", beta, "(d,)"), ("mean", mean, "(..., d)"),
                           ("cov", cov, "(d, d)")))
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in (B, beta, mean, cov)))
    B, beta, mean, cov = (t.to(dtype) for t in (B, beta, mean, cov))
    checks.covariance("cov", cov, definite=False)
    c = checks.number("c", c)
    return ((mean @ B) * mean).sum(-1) + torch.trace(B @ cov) + mean @ beta + c


def cosine_coefficients(task, a: Tensor) -> Tensor:
    r"""The coefficients :math:`c_j = \sqrt{2/m}\, a_j` of a :class:`~softmax_as_linear.theory.cosine_task.CosineTask`
    function as a sum of cosines, ``a (..., m)`` -> ``(..., m)`` (a NumPy array is read as a tensor)."""
    _task(task)
    a = checks.shaped("a", a, f"(..., {task.features})", dtype=None)
    return a * (2.0 / task.features) ** 0.5


def _task(task):
    """``task`` if it is a cosine task (:class:`~softmax_as_linear.theory.cosine_task.CosineTask`'s attributes)."""
    return checks.has_attributes("task", task, "d", "D", "features", "noise_var", "draw_inputs", "function",
                                 kind="CosineTask")


def _mean(mean, d: int, dtype) -> Tensor:
    return checks.shaped("mean", mean, f"(..., {d})", dtype=None).to(dtype)


def _batch(first: str, first_shape, second: str, second_shape) -> None:
    """A ``ValueError`` naming both unless the leading dimensions of ``first`` and ``second`` broadcast."""
    try:
        torch.broadcast_shapes(first_shape, second_shape)
    except RuntimeError:
        raise ValueError(f"{first}'s leading dimensions {tuple(first_shape)} and {second}'s {tuple(second_shape)} "
                         "must broadcast") from None


def _weights(U, V, query, d):
    """U, V ``(D, D)`` and query ``(..., D)`` as finite float64 tensors, ``D = d + 1`` (NumPy arrays accepted)."""
    D = d + 1
    U, V = (checks.shaped(name, value, f"({D}, {D})") for name, value in (("U", U), ("V", V)))
    return U, V, checks.shaped("query", query, f"(..., {D})")


def _cosine_terms(omega, phase, coef, cov, dtype=torch.float64):
    """The cosine labels' arrays as finite tensors of ``dtype`` (None: the widest of theirs; NumPy arrays accepted),
    their shapes checked: omega ``(m, d)``, phase ``(m,)``, coef ``(..., m)``, cov ``(d, d)`` positive
    semi-definite; a ``ValueError`` names the first that is not."""
    sizes: dict = {}
    terms = [checks.shaped(name, value, dims, sizes, dtype=dtype) for name, value, dims in
             (("omega", omega, "(m, d)"), ("phase", phase, "(m,)"), ("coef", coef, "(..., m)"), ("cov", cov, "(d, d)"))]
    widest = functools.reduce(torch.promote_types, (t.dtype for t in terms))
    omega, phase, coef, cov = (t.to(widest) for t in terms)
    checks.covariance("cov", cov, definite=False)
    return omega, phase, coef, cov


def softmax_limit(U, V, omega: Tensor, phase: Tensor, coef: Tensor, cov: Tensor, query) -> Tensor:
    r"""Infinite-prompt softmax attention's prediction :math:`v_x^\top \Sigma M x_q + v_y (P_\Sigma f)(\Sigma M x_q)`
    for cosine labels (:func:`smoothed_cosines`); the label noise does not enter.

    Needs a score that does not read the labels: a ``ValueError`` naming ``U`` when its last row is not zero on the
    inputs (the tilt :math:`e^{u_y f(x)}` then has no closed form). U, V ``(D, D)``, coef ``(..., m)``, query
    ``(..., D)`` -> ``(...)``."""
    d = omega.shape[-1]
    U, V, query = _weights(U, V, query, d)
    if bool((U[d, :d] != 0).any()):
        raise ValueError("U: its last row reads the labels (U[d, :d] != 0); the tilted law has a closed form only "
                         "for a score that reads the inputs alone")
    cov = cov.to(U)
    tilted_mean = (query[..., :d] @ U[:d, :d].T) @ cov  # Sigma M x_q, as rows (Sigma symmetric)
    v = V[d]
    return tilted_mean @ v[:d] + v[d] * smoothed_cosines(omega.to(U), phase.to(U), coef.to(U), tilted_mean, cov)


def token_moments(omega: Tensor, phase: Tensor, coef: Tensor, cov: Tensor, noise_var: float) -> tuple[Tensor, Tensor]:
    r""":math:`\mathbb{E}[x y]` ``(..., d)`` and :math:`\mathbb{E}[y^2]` ``(...)`` for cosine labels and
    :math:`x \sim N(0, \Sigma)`:
    :math:`\mathbb{E}[xy] = -\Sigma \sum_j c_j \omega_j e^{-\omega_j^\top\Sigma\omega_j/2} \sin b_j` and
    :math:`\mathbb{E}[y^2] = s^2 + \tfrac12 \sum_{jk} c_j c_k (e^{-\delta_{jk}^\top\Sigma\delta_{jk}/2}\cos(b_j - b_k) +
    e^{-\sigma_{jk}^\top\Sigma\sigma_{jk}/2}\cos(b_j + b_k))` with :math:`\delta_{jk} = \omega_j - \omega_k`,
    :math:`\sigma_{jk} = \omega_j + \omega_k`. NumPy arrays accepted; float64."""
    omega, phase, coef, cov = _cosine_terms(omega, phase, coef, cov)
    noise_var = checks.positive_float("noise_var", noise_var, allow_zero=True)
    damping = torch.exp(-0.5 * ((omega @ cov) * omega).sum(-1))
    xy = -((coef * damping * torch.sin(phase)) @ omega) @ cov
    diff, total = omega[:, None] - omega[None], omega[:, None] + omega[None]
    gram = 0.5 * (torch.exp(-0.5 * ((diff @ cov) * diff).sum(-1)) * torch.cos(phase[:, None] - phase[None])
                  + torch.exp(-0.5 * ((total @ cov) * total).sum(-1)) * torch.cos(phase[:, None] + phase[None]))
    yy = ((coef @ gram) * coef).sum(-1) + noise_var
    return xy, yy


def linear_limit(U, V, omega: Tensor, phase: Tensor, coef: Tensor, cov: Tensor, noise_var: float, query) -> Tensor:
    r"""Infinite-prompt normalised linear attention's prediction :math:`v^\top \mathbb{E}[zz^\top]\, U z_q` for cosine
    labels (:func:`token_moments`): linear in :math:`x_q`. U, V ``(D, D)``, coef ``(..., m)``, query ``(..., D)`` ->
    ``(...)``."""
    d = omega.shape[-1]
    U, V, query = _weights(U, V, query, d)
    cov = cov.to(U)
    xy, yy = token_moments(omega.to(U), phase.to(U), coef.to(U), cov, noise_var)
    u = query @ U.T
    u_x, u_y = u[..., :d], u[..., d]
    v = V[d]
    m_x = u_x @ cov + xy * u_y.unsqueeze(-1)  # E[x z^T] u
    m_y = (xy * u_x).sum(-1) + yy * u_y  # E[y z^T] u
    return m_x @ v[:d] + v[d] * m_y


def _checked(limit):
    """``limit`` (:func:`softmax_limit`, :func:`linear_limit`) with its cosine arrays and query checked first
    (:func:`_cosine_terms`: NumPy arrays read, a wrong shape a ``ValueError`` naming the argument); ``inspect`` shows
    the limit's own source."""
    @functools.wraps(limit)
    def checked(U, V, omega, phase, coef, cov, *args, **kwargs):
        omega, phase, coef, cov = _cosine_terms(omega, phase, coef, cov)
        query = inspect.signature(limit).bind(U, V, omega, phase, coef, cov, *args, **kwargs).arguments["query"]
        query = checks.shaped("query", query, f"(..., {omega.shape[1] + 1})")
        _batch("coef", coef.shape[:-1], "query", query.shape[:-1])
        return limit(U, V, omega, phase, coef, cov, *args, **kwargs)
    return checked


softmax_limit, linear_limit = _checked(softmax_limit), _checked(linear_limit)


def finite_prompt_predictions(task, U, V, a: Tensor, query: Tensor, L: int, generator: torch.Generator,
                              activation: str = "softmax", chunk: int = 2048) -> Tensor:
    r"""Attention's prediction on one prompt of :math:`L` fresh tokens per task, drawn and read chunk by chunk (a
    running maximum keeps the softmax sums finite), so that memory does not grow with :math:`L`: the independent check
    of :func:`softmax_limit` and :func:`linear_limit`. ``task`` a
    :class:`~softmax_as_linear.theory.cosine_task.CosineTask`, ``a (n, m)`` its coefficients (already scaled),
    ``query (n, D)`` -> ``(n,)``."""
    checks.one_of("activation", activation, ACTIVATIONS)
    L, chunk = checks.positive_int("L", L), checks.positive_int("chunk", chunk)
    checks.has_attributes("task", task, "d", "D", "noise_var", "draw_inputs", "function",
                          kind="CosineTask or QuadraticLabels")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    U, V, query = _weights(U, V, query, task.d)
    sizes: dict = {"m": task.features, "m from": "task"} if hasattr(task, "features") else {}
    checks.shaped("query", query, "(n, D)", sizes)
    a = checks.shaped("a", a, "(n, m)", sizes)
    u, v = query @ U.T, V[task.d]
    n = a.shape[0]
    top = torch.full((n,), -torch.inf, dtype=torch.float64)
    mass = torch.zeros(n, dtype=torch.float64)
    total = torch.zeros(n, task.D, dtype=torch.float64)
    done = 0
    while done < L:
        k = min(chunk, L - done)
        x = task.draw_inputs((n, k), generator)
        y = task.function(a, x) + task.noise_var**0.5 * torch.randn(n, k, generator=generator, dtype=torch.float64)
        z = torch.cat([x, y.unsqueeze(-1)], -1)
        s = (z @ u.unsqueeze(-1)).squeeze(-1)
        if activation == "softmax":
            new_top = torch.maximum(top, s.max(-1).values)
            scale, weights = torch.exp(top - new_top), torch.exp(s - new_top.unsqueeze(-1))
            mass = mass * scale + weights.sum(-1)
            total = total * scale.unsqueeze(-1) + (weights.unsqueeze(-1) * z).sum(-2)
            top = new_top
        else:
            total = total + (s.unsqueeze(-1) * z).sum(-2)
        done += k
    mean = total / mass.unsqueeze(-1) if activation == "softmax" else total / L
    return mean @ v


class QuadraticLabels:
    r"""Labels :math:`y = x^\top Bx + \beta^\top x + c + \varepsilon` of inputs :math:`x \sim N(0, I_d)`: a second task
    family for :func:`finite_prompt_predictions` (its ``a`` is ignored, one function for every prompt).
    B ``(d, d)`` symmetric, beta ``(d,)``."""

    def __init__(self, B: Tensor, beta: Tensor, c: float = 0.0, noise_var: float = 0.05):
        self.B = checks.as_float_tensor("B", B).double()
        self.d = self.B.shape[-1]
        checks.square("B", self.B, self.d)
        self.beta = checks.vector("beta", checks.as_float_tensor("beta", beta).double(), self.d)
        self.c = checks.number("c", c)
        self.noise_var = checks.positive_float("noise_var", noise_var, allow_zero=True)
        self.D = self.d + 1

    def draw_inputs(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
        """Inputs ``(*shape, d)``, standard normal."""
        return torch.randn(*shape, self.d, generator=generator, dtype=torch.float64)

    def function(self, a, x: Tensor) -> Tensor:
        """:math:`f(x)` for inputs ``x (..., d)`` -> ``(...)`` (``a`` ignored)."""
        return ((x @ self.B) * x).sum(-1) + x @ self.beta + self.c


def quadratic_limits(U, V, labels: QuadraticLabels, query) -> tuple[Tensor, Tensor]:
    r"""Both infinite-prompt predictions for :class:`QuadraticLabels` (:math:`\Sigma = I`) at queries
    :math:`z_q = (x_q, 0)`: softmax's :math:`v_x^\top Mx_q + v_y (P_I f)(Mx_q)` (:func:`smoothed_quadratic`; the score
    must not read the labels) and linear attention's :math:`v^\top\mathbb{E}[zz^\top]Uz_q`. The score reading the
    inputs alone, :math:`u = Uz_q = (Mx_q, 0)`, so with :math:`\mathbb{E}[xx^\top] = I` and
    :math:`\mathbb{E}[xy] = \beta` the latter is :math:`v_x^\top Mx_q + v_y\, \beta^\top Mx_q` (:math:`\mathbb{E}[y^2]`
    does not enter). U, V ``(D, D)``, query ``(..., D)`` with last entry 0 -> two ``(...)``; a ``ValueError`` names
    ``U`` when its last row reads the labels and ``query`` when its label entry is not 0."""
    checks.has_attributes("labels", labels, "B", "beta", "c", "d", kind="QuadraticLabels")
    d = labels.d
    U, V, query = _weights(U, V, query, d)
    if bool((U[d, :d] != 0).any()):
        raise ValueError("U: its last row reads the labels (U[d, :d] != 0); the tilted law has a closed form only "
                         "for a score that reads the inputs alone")
    if bool((query[..., d] != 0).any()):
        raise ValueError("query: its last entry is the query's label slot, 0 in z_q = (x_q, 0); got a nonzero one")
    eye = torch.eye(d, dtype=torch.float64)
    v = V[d]
    tilted_mean = query[..., :d] @ U[:d, :d].T  # M x_q, which is also u_x
    soft = tilted_mean @ v[:d] + v[d] * smoothed_quadratic(labels.B, labels.beta, labels.c, tilted_mean, eye)
    return soft, tilted_mean @ v[:d] + v[d] * (tilted_mean @ labels.beta)
