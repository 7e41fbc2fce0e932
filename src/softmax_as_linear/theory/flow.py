r"""The infinite-prompt gradient flow, the theory's reference dynamics (Theorem 4.3, Remark 5.3).

- :func:`gradient_flow`: the gradient flow of any differentiable risk of :math:`(U, V)` (Runge-Kutta);
- :func:`infinite_prompt_flow`: the gradient flow of the infinite-prompt risk (closed form for Gaussian
  covariates; in the block structure, by quadrature, for the other covariate laws);
- :func:`isotropic_block_flow`: the same flow for :math:`\Sigma = I` from Assumption 5.1, reduced to two numbers
  and integrated by an adaptive solver over long times;
- :func:`drift_asymptotics`: where that flow goes when the risk has no minimiser (uniform covariates);
- :func:`stable_step`: a Runge-Kutta step that the infinite-prompt flow of a task tolerates;
- :func:`gronwall_bound`: the Grönwall bound of Lemma E.1 on the distance between two flows, with its constants;
- :func:`balance`: the conserved quantity :math:`\|U\|_F^2 - \|v\|^2` of the linear-attention flows.

Trained runs are read against this flow in :mod:`~softmax_as_linear.experiments.analysis`.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core import checks
from ..registry import ACTIVATIONS
from . import covariates
from .flow_limits import degenerate_limit_parameters
from .limit_model import block_infinite_prompt_risk, is_block
from .regression import RegressionTask
from .risks import infinite_prompt_risk_unchecked


def gradient_flow(risk, U0, V0, times, *, max_dt: float = 0.01) -> dict[str, np.ndarray]:
    r"""Gradient flow :math:`\dot\theta = -\nabla R(\theta)` of ``risk(U, V)`` from ``(U0, V0)``.

    Integrated with the classical Runge-Kutta scheme (step at most ``max_dt``), with autograd gradients,
    in float64. ``risk`` maps ``(..., D, D)`` parameters to ``(...)`` risks, differentiably (for instance
    :func:`~softmax_as_linear.theory.risks.linear_attention_risk` at a fixed ``L``, whose flow
    Theorem 4.3's proof compares with the infinite-prompt one).

    Args:
        U0, V0: ``(D, D)`` initial parameters (or batched ``(..., D, D)``).
        times: increasing non-negative times at which to report the state.
    Returns:
        ``{"times": (T,), "U": (T, ..., D, D), "V": (T, ..., D, D), "risk": (T, ...)}``.
    """
    U = checks.as_float_tensor("U0", U0).double().clone()
    V = checks.as_float_tensor("V0", V0).double().clone()
    if U.ndim < 2 or U.shape[-1] != U.shape[-2] or V.shape != U.shape:
        raise ValueError(f"U0 and V0 must be square matrices of the same shape, got {tuple(U.shape)} and "
                         f"{tuple(V.shape)}")
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size == 0 or np.any(np.diff(times) < 0) or times[0] < 0:
        raise ValueError("times must be a non-empty increasing sequence of non-negative numbers")
    max_dt = checks.positive_float("max_dt", max_dt)

    def grad(U, V):
        U = U.detach().requires_grad_(True)
        V = V.detach().requires_grad_(True)
        gU, gV = torch.autograd.grad(risk(U, V).sum(), (U, V))
        return gU, gV

    out_U, out_V, out_risk = [], [], []
    t = 0.0
    for target in times:
        while t < target - 1e-12:
            h = min(max_dt, target - t)
            k1 = grad(U, V)
            k2 = grad(U - h / 2 * k1[0], V - h / 2 * k1[1])
            k3 = grad(U - h / 2 * k2[0], V - h / 2 * k2[1])
            k4 = grad(U - h * k3[0], V - h * k3[1])
            U = U - h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            V = V - h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
            t += h
        out_U.append(U.clone())
        out_V.append(V.clone())
        with torch.no_grad():
            out_risk.append(risk(U, V))
    return {"times": times, "U": torch.stack(out_U).numpy(), "V": torch.stack(out_V).numpy(),
            "risk": torch.stack(out_risk).numpy()}


def infinite_prompt_flow(U0, V0, task: RegressionTask, times, *, max_dt: float = 0.01,
                         activation: str = "softmax") -> dict[str, np.ndarray]:
    r"""Gradient flow :math:`\dot\theta = -\nabla R_\infty(\theta)` from ``(U0, V0)`` (Theorem 4.3's reference
    dynamics): :func:`gradient_flow` of the infinite-prompt risk.

    Integrated with the classical Runge-Kutta scheme (step at most ``max_dt``), with autograd gradients, in
    float64, on the closed form :func:`~softmax_as_linear.theory.risks.infinite_prompt_risk` (Gaussian
    covariates, or normalised linear attention, ``activation="linear"``, for every law). For softmax attention
    with a non-Gaussian covariate law the risk is
    :func:`~softmax_as_linear.theory.limit_model.block_infinite_prompt_risk`, exact in the block structure of
    Assumption 5.1 (:math:`a_y = 0`, :math:`v_x = 0`), which the flow keeps: ``(U0, V0)`` must have it.

    Args:
        U0, V0: ``(D, D)`` initial parameters (or batched ``(..., D, D)``).
        times: increasing non-negative times at which to report the state.
    Returns:
        ``{"times": (T,), "U": (T, ..., D, D), "V": (T, ..., D, D), "risk": (T, ...)}``.
    """
    U = checks.square("U0", checks.as_float_tensor("U0", U0).double(), task.D).clone()
    V = checks.square("V0", checks.as_float_tensor("V0", V0).double(), task.D).clone()
    checks.one_of("activation", activation, ACTIVATIONS)
    d = task.d
    if activation == "linear" or task.covariates == "gaussian":
        def risk(U, V):
            return infinite_prompt_risk_unchecked(U, V, task)
    else:
        if not is_block(U, V, d):
            raise ValueError(f"U0: the infinite-prompt flow of softmax attention with {task.covariates} covariates is "
                             "computed in the block structure of Assumption 5.1 (a_y = U0[d, :d] = 0 and v_x = V0[d, "
                             ":d] = 0)")

        def risk(U, V):
            return block_infinite_prompt_risk(U[..., :d, :d], V[..., d, d], task)

    return gradient_flow(risk, U, V, times, max_dt=max_dt)


def isotropic_block_flow(task: RegressionTask, alpha: float, times, *, rtol: float = 1e-10) -> dict[str, np.ndarray]:
    r"""The infinite-prompt flow for :math:`\Sigma = I` from Assumption 5.1 with
    :math:`\Theta\Theta^\top = I_d/\sqrt d`, reduced to :math:`A_x = a(t) I` and :math:`v_y(t)` (the flow keeps
    :math:`A_x` a multiple of :math:`I`, by the symmetry of the coordinates), and integrated by an adaptive stiff solver
    (LSODA) so that long times are cheap:

    .. math:: \dot a = -\tfrac1d\,\partial_a R_\infty(aI, v_y), \qquad \dot v_y = -\partial_{v_y} R_\infty(aI, v_y),

    with :math:`R_\infty` of :func:`~softmax_as_linear.theory.limit_model.block_infinite_prompt_risk` (any covariate
    law). The same trajectory as :func:`infinite_prompt_flow` from
    :func:`~softmax_as_linear.theory.flow_limits.block_init`. Returns ``{"times", "a", "v", "risk"}`` arrays.
    """
    from scipy.integrate import solve_ivp

    if not task.is_isotropic:
        raise ValueError("task: the reduced flow needs Sigma = I")
    alpha = checks.positive_float("alpha", alpha)
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size == 0 or np.any(np.diff(times) <= 0) or times[0] < 0:
        raise ValueError("times must be an increasing sequence of non-negative numbers")
    d = task.d
    eye = torch.eye(d, dtype=torch.float64)

    def risk(a, v):
        return block_infinite_prompt_risk(a * eye, v, task)

    def rhs(_, y):
        a = torch.tensor(y[0], dtype=torch.float64, requires_grad=True)
        v = torch.tensor(y[1], dtype=torch.float64, requires_grad=True)
        grad_a, grad_v = torch.autograd.grad(risk(a, v), (a, v))
        return [-float(grad_a) / d, -float(grad_v)]

    solution = solve_ivp(rhs, (0.0, float(times[-1])), [alpha / math.sqrt(d), alpha], method="LSODA",
                         t_eval=times, rtol=rtol, atol=1e-14)
    if not solution.success:
        raise RuntimeError(f"the reduced flow failed: {solution.message}")
    a, v = solution.y
    with torch.no_grad():
        values = [float(risk(torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)))
                  for x, y in zip(a, v)]
    return {"times": times, "a": a, "v": v, "risk": np.array(values)}


def drift_constant(task: RegressionTask) -> float:
    r"""The constant :math:`K` of the excess risk :math:`K a^4` along the valley of :math:`R_\infty` (course's
    derivation).

    In the block structure with :math:`\Sigma = I` and :math:`A_x = aI`, :math:`R_\infty - s^2/2 =
    \tfrac{\tau^2 d}{2}\mathbb{E}[(v_y k'_\lambda(a\xi) - \xi)^2]`. With :math:`k'_\lambda(b) = b + \tfrac{\kappa_4}{6}
    b^3 + O(b^5)` (:math:`\kappa_4 = \mathbb{E}\xi^4 - 3`, the fourth cumulant), the best :math:`v_y \approx
    1/a` leaves the part of :math:`\xi^3` orthogonal to :math:`\xi`:

    .. math:: \min_{v_y} R_\infty - \tfrac{s^2}{2} = K a^4 + O(a^6), \qquad
        K = \tfrac{\tau^2 d}{2} \Big(\tfrac{\kappa_4}{6}\Big)^2 \big(\mathbb{E}\xi^6 - (\mathbb{E}\xi^4)^2\big).

    :math:`K = 0` for the Gaussian law (Lemma 2.1) and for the Rademacher law (:math:`\xi^3 = \xi`, and
    :math:`v_y \tanh a = 1` is an exact minimiser); :math:`K = 0.0123` for uniform covariates at the paper's task.
    """
    fourth, sixth = covariates.moment(task.covariates, 4), covariates.moment(task.covariates, 6)
    return 0.5 * task.task_var * task.d * ((fourth - 3) / 6) ** 2 * (sixth - fourth**2)


def drift_asymptotics(task: RegressionTask, times) -> dict[str, np.ndarray]:
    r"""Where the infinite-prompt softmax flow goes when :math:`R_\infty` has no minimiser (course's derivation).

    For :math:`\Sigma = I` and the block start of Assumption 5.1, :math:`A_x = a(t) I`. Once the flow has
    reached the valley :math:`v_y \approx 1/a` of :math:`R_\infty`, it slides along it: the valley, a curve
    :math:`a \mapsto (a, v^*(a))` in the metric :math:`d\,da^2 + dv^2` of the flow, has length element
    :math:`\sqrt{d + v^{*\prime}(a)^2} \approx a^{-2}` and height :math:`K a^4` (:func:`drift_constant`), so
    :math:`\dot a \approx -4K a^3 \cdot a^4`, and

    .. math:: a(t) \approx (24 K t)^{-1/6}, \qquad v_y(t) \approx (24 K t)^{1/6}, \\
        R_\infty - \tfrac{s^2}{2} \approx K (24 K t)^{-2/3}.

    The parameters leave every ball: the flow has no limit, while its risk tends to :math:`s^2/2`.
    Asymptotic in :math:`t` (a heuristic slow-manifold argument, checked against the integrated flow in the
    tests and in Chapter 6). Returns ``{"times", "a", "v", "excess"}`` arrays; ``ValueError`` unless
    :math:`\Sigma = I` and :math:`K > 0`.
    """
    if not task.is_isotropic:
        raise ValueError("task: the drift asymptotics are derived for Sigma = I")
    K = drift_constant(task)
    if K <= 0:
        raise ValueError(f"task: {task.covariates} covariates give K = 0: R_inf has a minimiser and the flow converges")
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or np.any(times <= 0):
        raise ValueError("times must be a sequence of positive numbers")
    a = (24 * K * times) ** (-1 / 6)
    return {"times": times, "a": a, "v": 1 / a, "excess": K * a**4, "K": K, "norm_A": a * math.sqrt(task.d)}


def stable_step(task: RegressionTask, alpha: float, largest: float = 0.1) -> float:
    r"""A Runge-Kutta step for the infinite-prompt flow of ``task`` from Assumption 5.1 with scale ``alpha``: at most
    ``largest``, and at most the inverse of the largest rate of the flow linearised at its limit,
    :math:`\tau^2 (c^2 \lambda_{\max}^3 + \operatorname{tr}\Sigma / c^2)` with :math:`c = v_y^*` the limit's
    (:func:`~softmax_as_linear.theory.flow_limits.degenerate_limit_parameters`: :math:`c^2 = \|\Sigma^{-1}\|_F` for an
    invertible :math:`\Sigma`, Remark 5.3; Appendix F.3's for a singular one). The two terms are those of the Jacobian
    :math:`J = \tau^2(c^2 \operatorname{diag}(\lambda^3) + c^{-2}\mathbf 1\lambda^\top)` (Chapter 5's exercise on the
    rate): the step stays well inside the region where the scheme is stable."""
    largest = checks.positive_float("largest", largest)
    lam = torch.linalg.eigvalsh(task.covariance)
    c2 = float(degenerate_limit_parameters(task, alpha)[1][task.d, task.d]) ** 2
    return min(largest, 1 / (task.task_var * (c2 * float(lam[-1]) ** 3 + float(lam.sum()) / c2)))


def gronwall_bound(risk_finite, risk_limit, finite: dict, limit: dict, every: int = 10) -> dict[str, np.ndarray]:
    r"""The Grönwall step of Lemma E.1 (behind Theorem 4.3) on two computed flows from the same start.

    With :math:`\Delta(t) = \|\theta_L(t) - \theta_\infty(t)\|` (``finite`` and ``limit``, flows of ``risk_finite`` and
    ``risk_limit`` reported at the same times, as from :func:`gradient_flow`),

    .. math:: \Delta' &\le \|\nabla R_L(\theta_L) - \nabla R_\infty(\theta_L)\| + \|\nabla R_\infty(\theta_L) - \nabla
       R_\infty(\theta_\infty)\| \\
        &\le \varepsilon + \Lambda\,\Delta, \qquad\text{so}\qquad \Delta(t) \le \varepsilon\,\frac{e^{\Lambda t} -
        1}{\Lambda},

    with :math:`\varepsilon` the largest gradient gap along :math:`\theta_L` and :math:`\Lambda` a Lipschitz constant
    of :math:`\nabla R_\infty` on a set containing both paths. Both are estimated at every ``every``-th report:
    :math:`\varepsilon` as the largest gap met, :math:`\Lambda` as the largest spectral norm of the Hessian of
    :math:`R_\infty` at the two paths and the midpoint between them (an estimate, not a certified constant).

    Returns ``{"times", "delta" (T,), "eps", "lipschitz", "bound" (T,)}``.
    """
    every = checks.positive_int("every", every)
    times = np.asarray(finite["times"], dtype=float)
    if not np.array_equal(times, np.asarray(limit["times"], dtype=float)):
        raise ValueError("finite and limit must be reported at the same times")
    shape = finite["U"].shape[1:]
    n = int(np.prod(shape))

    def flat(U, V):
        return torch.cat([torch.as_tensor(U).reshape(-1), torch.as_tensor(V).reshape(-1)]).double()

    def unflat(theta):
        return theta[:n].reshape(shape), theta[n:].reshape(shape)

    def gradient(risk, theta):
        theta = theta.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(risk(*unflat(theta)), theta)
        return g

    paths = [(flat(finite["U"][k], finite["V"][k]), flat(limit["U"][k], limit["V"][k])) for k in range(times.size)]
    delta = np.array([float((a - b).norm()) for a, b in paths])
    eps, lipschitz = 0.0, 0.0
    for a, b in paths[::every]:
        eps = max(eps, float((gradient(risk_finite, a) - gradient(risk_limit, a)).norm()))
        for point in (a, (a + b) / 2, b):
            H = torch.autograd.functional.hessian(lambda th: risk_limit(*unflat(th)), point)
            lipschitz = max(lipschitz, float(torch.linalg.matrix_norm(H, ord=2)))
    bound = eps * times if lipschitz == 0 else eps * np.expm1(lipschitz * times) / lipschitz
    return {"times": times, "delta": delta, "eps": eps, "lipschitz": lipschitz, "bound": bound}


def balance(U, V) -> torch.Tensor:
    r"""The balance :math:`b = \|U\|_F^2 - \|v\|^2` with :math:`v` the last row of V; ``(..., D, D)`` -> ``(...)``.

    :math:`R_\infty` and the risk of linear attention are unchanged by :math:`(U, v) \mapsto (cU, v/c)`,
    so their gradient flows conserve :math:`b`.
    """
    U, V = torch.as_tensor(U), torch.as_tensor(V)
    return (U**2).sum((-1, -2)) - (V[..., -1, :] ** 2).sum(-1)
