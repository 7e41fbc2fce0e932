r"""In-context linear regression (paper, Sections 4-5): the task, its risks and the reference solutions.

For each prompt, :math:`w \sim N(0, \tau^2 I_d)`, inputs :math:`x_i \sim N(0, \Sigma)` i.i.d. and labels
:math:`y_i = w^\top x_i + \varepsilon_i`, :math:`\varepsilon_i \sim N(0, s^2)`. Tokens are
:math:`z_i = (x_i, y_i) \in \mathbb{R}^{D}`, :math:`D = d + 1`; the query token is :math:`(x_q, 0)` and the
target :math:`y_q = w^\top x_q + \varepsilon_q`. Given :math:`w`, a token is :math:`N(0, \Gamma_w)` with

.. math:: \Gamma_w = \begin{pmatrix} \Sigma & \Sigma w \\ w^\top \Sigma & w^\top \Sigma w + s^2 \end{pmatrix}.

Every risk here is the theory's :math:`R = \tfrac12 \mathbb{E}[(\hat y - y_q)^2]` (half the mean squared
error), and includes the label-noise floor :math:`s^2/2`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from . import _checks


def kms_covariance(d: int, rho: float, *, dtype=torch.float64) -> Tensor:
    r"""Kac-Murdock-Szego matrix :math:`\Sigma_{ij} = \rho^{|i-j|}`, shape ``(d, d)``; needs :math:`-1 < \rho < 1`."""
    d = _checks.positive_int("d", d)
    try:
        rho = float(rho)
    except (TypeError, ValueError) as error:
        raise ValueError(f"rho must be a number in (-1, 1), got {rho!r}") from error
    if not -1.0 < rho < 1.0:
        raise ValueError(f"rho must lie in (-1, 1), got {rho!r}")
    index = torch.arange(d)
    return torch.tensor(rho, dtype=dtype) ** (index[:, None] - index[None, :]).abs().to(dtype)


@dataclass(frozen=True)
class Batch:
    """A batch of regression prompts.

    tokens ``(n, L, D)``, query ``(n, D)`` (last entry 0), target ``(n,)``, w ``(n, d)``.
    """

    tokens: Tensor
    query: Tensor
    target: Tensor
    w: Tensor


class RegressionTask:
    r"""The in-context linear regression task :math:`(d, \Sigma, \tau^2, s^2)`.

    Args:
        d: input dimension (tokens have ``D = d + 1`` entries).
        covariance: :math:`\Sigma`, a ``(d, d)`` symmetric positive definite matrix (default :math:`I_d`).
        task_var: :math:`\tau^2`, variance of each entry of :math:`w` (default ``1 / d``, as in the paper's code).
        noise_var: :math:`s^2`, label-noise variance on prompt and query labels (default 0.1).
    """

    def __init__(self, d: int, covariance=None, task_var: float | None = None, noise_var: float = 0.1):
        self.d = _checks.positive_int("d", d)
        if covariance is None:
            covariance = torch.eye(self.d, dtype=torch.float64)
        covariance = _checks.as_float_tensor("covariance", covariance).to(torch.float64)
        self.covariance = _checks.covariance("covariance", covariance, self.d)
        self.task_var = _checks.positive_float("task_var", 1.0 / self.d if task_var is None else task_var)
        self.noise_var = _checks.positive_float("noise_var", noise_var, allow_zero=True)
        self._cholesky = torch.linalg.cholesky(self.covariance)
        self._cholesky_on = {}  # (device, dtype) -> copy, so that sampling copies nothing to the device
        self._isotropic = torch.equal(self.covariance, torch.eye(self.d, dtype=torch.float64))

    @classmethod
    def isotropic(cls, d: int = 5, task_var: float | None = None, noise_var: float = 0.1) -> "RegressionTask":
        """:math:`\\Sigma = I_d`."""
        return cls(d, None, task_var, noise_var)

    @classmethod
    def kms(cls, d: int = 5, rho: float = 0.5, task_var: float | None = None, noise_var: float = 0.1) -> "RegressionTask":
        """Anisotropic inputs with the Kac-Murdock-Szego covariance :math:`\\rho^{|i-j|}`."""
        return cls(d, kms_covariance(d, rho), task_var, noise_var)

    @property
    def D(self) -> int:
        """Token dimension ``d + 1``."""
        return self.d + 1

    def __repr__(self) -> str:
        eig = torch.linalg.eigvalsh(self.covariance)
        return (f"RegressionTask(d={self.d}, Sigma eigenvalues in [{float(eig[0]):.3g}, {float(eig[-1]):.3g}], "
                f"tau^2={self.task_var:.3g}, s^2={self.noise_var:.3g})")

    def token_covariance(self, w: Tensor) -> Tensor:
        r""":math:`\Gamma_w`, shape ``(..., D, D)`` for ``w (..., d)``."""
        w = _checks.vector("w", _checks.as_float_tensor("w", w), self.d)
        sigma = self.covariance.to(w)
        sigma_w = w @ sigma  # (..., d), Sigma symmetric
        corner = (sigma_w * w).sum(-1, keepdim=True) + self.noise_var
        top = torch.cat([sigma.expand(*w.shape[:-1], self.d, self.d), sigma_w.unsqueeze(-1)], dim=-1)
        bottom = torch.cat([sigma_w, corner], dim=-1).unsqueeze(-2)
        return torch.cat([top, bottom], dim=-2)

    def sample(self, n_prompts: int, L: int, generator: torch.Generator | None = None,
               dtype=torch.float32, device=None) -> Batch:
        """Draw ``n_prompts`` independent prompts of length ``L`` (and their queries).

        Reproducible for a given ``generator`` state; sampling happens on the generator's device
        (or ``device`` when no generator is given).
        """
        n_prompts = _checks.positive_int("n_prompts", n_prompts)
        L = _checks.positive_int("L", L)
        if generator is not None:
            device = generator.device
        d = self.d
        key = (torch.device(device) if device is not None else torch.device("cpu"), dtype)
        if key not in self._cholesky_on:
            self._cholesky_on[key] = self._cholesky.to(*key)
        cholesky = self._cholesky_on[key]
        draw = lambda *shape: torch.randn(*shape, generator=generator, dtype=dtype, device=device)  # noqa: E731
        w = draw(n_prompts, d) * math.sqrt(self.task_var)
        # One standard normal draw per entry: position 0 is the query, entry d holds the label noise.
        z = draw(n_prompts, L + 1, d + 1)
        # y = x^T w + s eps with x = C xi (C C^T = Sigma) is a single product of the raw draw with (C^T w, s).
        coefficients = torch.cat([w if self._isotropic else w @ cholesky,
                                  torch.full((n_prompts, 1), math.sqrt(self.noise_var), dtype=dtype, device=device)], 1)
        y = (z @ coefficients.unsqueeze(-1)).squeeze(-1)
        if not self._isotropic:
            z[..., :d] = z[..., :d] @ cholesky.T
        z[..., d] = y
        query = z[:, 0].clone()
        query[:, d] = 0
        return Batch(z[:, 1:], query, y[:, 0].clone(), w)


def _block(U: Tensor, V: Tensor, d: int):
    """Split the (U, V) parameters into the pieces that act on a regression query."""
    A_x, a_y = U[..., :d, :d], U[..., d, :d]
    v_x, v_y = V[..., d, :d], V[..., d, d]
    return A_x, a_y, v_x, v_y


def infinite_prompt_risk(U, V, task: RegressionTask) -> Tensor:
    r"""Closed form of :math:`R_\infty(U, V) = \tfrac12 \mathbb{E}[(v^\top \Gamma_w U z_q - y_q)^2]`.

    Softmax and normalised linear attention share it (Lemma 2.1 with centred tokens). With
    :math:`A = U_{:, :d} = [A_x; a_y^\top]`, :math:`v = V_{D, :} = (v_x, v_y)`,
    :math:`M = v_y A_x^\top \Sigma + a_y (\Sigma v_x)^\top` and
    :math:`c_0 = A_x^\top \Sigma v_x + v_y s^2 a_y`:

    .. math::
        R_\infty = \tfrac12\big[\tau^2 \operatorname{tr}((I - M)^\top \Sigma (I - M)) + c_0^\top \Sigma c_0
        + 2 v_y \tau^2 \operatorname{tr}\Sigma\, c_0^\top \Sigma a_y
        + v_y^2 \tau^4 ((\operatorname{tr}\Sigma)^2 + 2 \operatorname{tr}\Sigma^2)\, a_y^\top \Sigma a_y\big] + \tfrac{s^2}{2}

    U, V ``(..., D, D)`` -> ``(...)``. Differentiable in U and V.
    """
    U = _checks.square("U", _checks.as_float_tensor("U", U), task.D)
    V = _checks.square("V", _checks.as_float_tensor("V", V, like=U), task.D)
    return infinite_prompt_risk_unchecked(U, V, task)


def infinite_prompt_risk_unchecked(U: Tensor, V: Tensor, task: RegressionTask) -> Tensor:
    """:func:`infinite_prompt_risk` without argument checks (for gradient-flow loops)."""
    d, tau2, s2 = task.d, task.task_var, task.noise_var
    sigma = task.covariance.to(U)
    A_x, a_y, v_x, v_y = _block(U, V, d)
    sigma_vx = v_x @ sigma
    M = v_y[..., None, None] * (A_x.transpose(-1, -2) @ sigma) + a_y.unsqueeze(-1) * sigma_vx.unsqueeze(-2)
    c0 = (A_x.transpose(-1, -2) @ sigma_vx.unsqueeze(-1)).squeeze(-1) + (v_y * s2)[..., None] * a_y
    E = torch.eye(d, dtype=U.dtype, device=U.device) - M
    quad = lambda a, b: ((a @ sigma) * b).sum(-1)  # noqa: E731  a^T Sigma b
    tr_sigma, tr_sigma2 = torch.trace(sigma), torch.trace(sigma @ sigma)
    risk = (tau2 * (E * (sigma @ E)).sum((-1, -2)) + quad(c0, c0)
            + 2 * v_y * tau2 * tr_sigma * quad(c0, a_y)
            + v_y**2 * tau2**2 * (tr_sigma**2 + 2 * tr_sigma2) * quad(a_y, a_y))
    return 0.5 * risk + 0.5 * s2


def finite_prompt_covariance(L: int, task: RegressionTask) -> Tensor:
    r""":math:`\Gamma_L = (1 + \tfrac1L) \Sigma + \tfrac{\operatorname{tr}\Sigma + s^2/\tau^2}{L} I_d`, shape ``(d, d)``."""
    L = _checks.positive_int("L", L)
    sigma = task.covariance
    eye = torch.eye(task.d, dtype=sigma.dtype)
    return (1 + 1 / L) * sigma + (torch.trace(sigma) + task.noise_var / task.task_var) / L * eye


def optimal_linear_risk(L: int, task: RegressionTask) -> float:
    r"""Smallest risk of normalised linear attention at prompt length ``L`` (over all U, V).

    The optimum predicts :math:`\hat y = x_q^\top \Gamma_L^{-1} \tfrac1L \sum_i y_i x_i`, with risk
    :math:`\tfrac{\tau^2}{2}[\operatorname{tr}\Sigma - \operatorname{tr}(\Sigma \Gamma_L^{-1} \Sigma)] + \tfrac{s^2}{2}`.
    """
    gamma_L = finite_prompt_covariance(L, task)
    sigma = task.covariance
    excess = torch.trace(sigma) - torch.trace(sigma @ torch.linalg.solve(gamma_L, sigma))
    return float(0.5 * task.task_var * excess + 0.5 * task.noise_var)


def bayes_risk(L: int, task: RegressionTask, n_samples: int = 20_000, generator: torch.Generator | None = None,
               seed: int = 0) -> tuple[float, float]:
    r"""Risk of the Bayes-optimal (posterior-mean, i.e. ridge) predictor at prompt length ``L``, by Monte Carlo.

    .. math:: R_{\mathrm{Bayes}}(L) = \tfrac12 \mathbb{E}_X\big[\operatorname{tr}(\Sigma\, C_X)\big] + \tfrac{s^2}{2},
        \qquad C_X = \big(X^\top X / s^2 + I / \tau^2\big)^{-1}

    (:math:`C_X` is the posterior covariance of :math:`w`; with :math:`s = 0` it is
    :math:`\tau^2 (I - P_X)`, so the risk is 0 once :math:`L \ge d`.)

    Returns ``(estimate, standard_error)`` over ``n_samples`` draws of the inputs :math:`X` (``L x d``).
    """
    L = _checks.positive_int("L", L)
    n_samples = _checks.positive_int("n_samples", n_samples, minimum=2)
    if generator is None:
        generator = torch.Generator().manual_seed(seed)
    d = task.d
    sigma, chol = task.covariance, task._cholesky
    totals = []
    for start in range(0, n_samples, 4096):
        n = min(4096, n_samples - start)
        X = torch.randn(n, L, d, generator=generator, dtype=torch.float64) @ chol.T
        gram = X.transpose(-1, -2) @ X
        eye = torch.eye(d, dtype=torch.float64)
        if task.noise_var > 0:
            posterior = task.task_var * torch.linalg.inv(eye + (task.task_var / task.noise_var) * gram)
        else:
            posterior = task.task_var * (eye - torch.linalg.pinv(gram, hermitian=True) @ gram)
        totals.append(0.5 * (posterior * sigma).sum((-1, -2)))
    values = torch.cat(totals) + 0.5 * task.noise_var
    return float(values.mean()), float(values.std() / math.sqrt(n_samples))


def limit_parameters(task: RegressionTask, L: int | None = None) -> tuple[Tensor, Tensor]:
    r"""Limit of the gradient flow from the Assumption 5.1 initialisation (Remark 5.3, Zhang et al. 2024).

    .. math:: U^* = c^{-1} \begin{pmatrix} G^{-1} & 0 \\ 0 & 0 \end{pmatrix}, \quad V^* = c\, e_D e_D^\top,
        \quad c = \operatorname{tr}(G^{-2})^{1/4},

    with :math:`G = \Sigma` for infinite prompts and :math:`G = \Gamma_L` at prompt length ``L``.
    Returns ``(U*, V*)``, each ``(D, D)`` in float64.
    """
    G = task.covariance if L is None else finite_prompt_covariance(L, task)
    G_inv = torch.linalg.inv(G)
    c = torch.trace(G_inv @ G_inv) ** 0.25
    D = task.D
    U = torch.zeros(D, D, dtype=torch.float64)
    U[: task.d, : task.d] = G_inv / c
    V = torch.zeros(D, D, dtype=torch.float64)
    V[task.d, task.d] = c
    return U, V


def block_init(task: RegressionTask, alpha: float, theta=None) -> tuple[Tensor, Tensor]:
    r"""Initialisation of Assumption 5.1: :math:`U(0) = \alpha \begin{pmatrix}\Theta\Theta^\top & 0\\ 0 & 0\end{pmatrix}`,
    :math:`V(0) = \alpha\, e_D e_D^\top`.

    ``theta`` is a ``(d, k)`` matrix with :math:`\|\Theta\Theta^\top\|_F = 1`; the default has
    :math:`\Theta\Theta^\top = I_d/\sqrt d`. Returns ``(U0, V0)``, each ``(D, D)`` in float64.
    """
    alpha = _checks.positive_float("alpha", alpha)
    d = task.d
    if theta is None:
        gram = torch.eye(d, dtype=torch.float64) / math.sqrt(d)
    else:
        theta = _checks.finite("theta", _checks.as_float_tensor("theta", theta).to(torch.float64))
        if theta.ndim != 2 or theta.shape[0] != d:
            raise ValueError(f"theta must have shape ({d}, k), got {tuple(theta.shape)}")
        gram = theta @ theta.T
        norm = float(torch.linalg.matrix_norm(gram))
        if abs(norm - 1.0) > 1e-6:
            raise ValueError(f"theta must satisfy ||theta theta^T||_F = 1, got {norm:.6g}")
    U = torch.zeros(task.D, task.D, dtype=torch.float64)
    U[:d, :d] = alpha * gram
    V = torch.zeros(task.D, task.D, dtype=torch.float64)
    V[d, d] = alpha
    return U, V
