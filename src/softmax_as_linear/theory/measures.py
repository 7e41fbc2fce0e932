r"""Token laws :math:`\mu` on :math:`\mathbb{R}^D` for prompts of i.i.d. tokens.

Each law has a known mean and covariance, so that Gaussian and non-Gaussian laws can be compared
at equal first two moments: the Gaussian one is where Lemma 2.1 makes softmax attention affine,
the others show what is special about it. Non-Gaussian laws are built as :math:`m + C \xi` where
:math:`C C^\top = \Gamma` and :math:`\xi` has i.i.d. standardised entries (uniform, Laplace), or as a
symmetric two-component Gaussian mixture with the same mean and covariance.

Besides sampling, each law knows its density, its cumulant generating function
:math:`K_\mu(u) = \log \mathbb{E}_\mu[e^{u^\top z}]` and the gradient :math:`\nabla K_\mu(u)`, which is
the mean of the tilted measure :math:`d\nu_u(z) \propto e^{u^\top z} d\mu(z)`; with :math:`u = U z_q`
this is the infinite-prompt softmax attention of the law (see :mod:`~softmax_as_linear.theory.tilting`).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core import checks
from ..registry import LAW_KINDS
from .covariates import langevin, log_cosh, log_sinhc


class OutsideTiltDomain(ValueError):
    r"""The tilt :math:`e^{u^\top z}` of a Laplace law is not integrable: some :math:`|(C^\top u)_j| \ge \sqrt 2`
    (``largest`` is the largest of them). A panel turns it into words about its own controls."""

    def __init__(self, largest: float, prefix: str = "", suffix: str = "; use a smaller u"):
        self.largest = largest
        super().__init__(f"{prefix}u lies outside the domain of the Laplace law's tilt: e^{{u^T z}} is not integrable "
                         f"unless every |(C^T u)_j| < sqrt(2), got {largest:.3g}{suffix}")


class TokenLaw:
    r"""A probability measure on :math:`\mathbb{R}^D` with mean ``mean`` and covariance ``cov``.

    Args:
        kind: ``"gaussian"``, ``"uniform"``, ``"laplace"`` or ``"mixture"``.
        mean: ``(D,)`` mean :math:`m`.
        cov: ``(D, D)`` covariance :math:`\Gamma`, positive definite.
        separation: for ``"mixture"``, the fraction in ``(0, 1)`` of the covariance carried by the
            split between the two components :math:`N(m \pm \delta, \Gamma - \delta\delta^\top)`,
            along the top eigenvector of :math:`\Gamma`.
    """

    def __init__(self, kind: str, mean, cov, separation: float = 0.8):
        self.kind = checks.one_of("kind", kind, LAW_KINDS)
        mean = checks.as_float_tensor("mean", mean).to(torch.float64)
        self.mean = checks.vector("mean", mean)
        self.D = self.mean.shape[-1]
        cov = checks.as_float_tensor("cov", cov).to(torch.float64)
        self.cov = checks.covariance("cov", cov, self.D)
        self._chol = torch.linalg.cholesky(self.cov)
        if not 0.0 < float(separation) < 1.0:
            raise ValueError(f"separation must lie in (0, 1), got {separation!r}")
        eigvals, eigvecs = torch.linalg.eigh(self.cov)
        self._shift = math.sqrt(float(separation) * float(eigvals[-1])) * eigvecs[:, -1]
        inner = self.cov - torch.outer(self._shift, self._shift)
        self._inner_chol = torch.linalg.cholesky(inner)

    @property
    def cholesky(self) -> Tensor:
        r"""Lower Cholesky factor :math:`C` of :math:`\Gamma = C C^\top`, ``(D, D)`` float64: a token is
        :math:`z = m + C\xi` with :math:`\xi` of the standard law of ``kind``."""
        return self._chol

    @classmethod
    def standard(cls, kind: str, D: int, scale: float = 1.0) -> "TokenLaw":
        """Centred law with covariance ``scale**2 * I_D``."""
        D = checks.positive_int("D", D)
        scale = checks.positive_float("scale", scale)
        return cls(kind, torch.zeros(D, dtype=torch.float64), scale**2 * torch.eye(D, dtype=torch.float64))

    def __repr__(self) -> str:
        return f"TokenLaw({self.kind!r}, D={self.D})"

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None,
               dtype=torch.float64) -> Tensor:
        """Draw i.i.d. tokens, shape ``(*shape, D)``, on the generator's device."""
        shape = tuple(checks.positive_int("shape", s) for s in shape)
        device = generator.device if generator is not None else None
        full = (*shape, self.D)
        kwargs = dict(generator=generator, dtype=dtype, device=device)
        if self.kind == "gaussian":
            xi = torch.randn(*full, **kwargs)
        elif self.kind == "uniform":
            xi = (torch.rand(*full, **kwargs) * 2 - 1) * math.sqrt(3.0)
        elif self.kind == "laplace":
            u = torch.rand(*full, **kwargs) - 0.5
            xi = -torch.sign(u) * torch.log1p(-2 * u.abs()) / math.sqrt(2.0)
        else:
            sign = torch.randint(0, 2, shape, generator=generator, device=device).to(dtype) * 2 - 1
            noise = torch.randn(*full, **kwargs) @ self._inner_chol.to(device=device, dtype=dtype).T
            return self.mean.to(device=device, dtype=dtype) + sign.unsqueeze(-1) * self._shift.to(noise) + noise
        return self.mean.to(device=device, dtype=dtype) + xi @ self._chol.to(device=device, dtype=dtype).T

    # ------------------------------------------------------------------ densities and tilts
    @property
    def second_moment(self) -> Tensor:
        r""":math:`M_2(\mu) = \mathbb{E}_\mu[z z^\top] = \Gamma + m m^\top`, shape ``(D, D)``."""
        return self.cov + torch.outer(self.mean, self.mean)

    def _whiten(self, points: Tensor) -> Tensor:
        r""":math:`\xi = C^{-1}(z - m)` with :math:`C C^\top = \Gamma` (Cholesky), shape ``(..., D)``."""
        centred = (points - self.mean).unsqueeze(-1)
        return torch.linalg.solve_triangular(self._chol, centred, upper=False).squeeze(-1)

    def _vector(self, name: str, value) -> Tensor:
        value = checks.as_float_tensor(name, value).to(torch.float64)
        return checks.vector(name, value, self.D)

    def log_density(self, points) -> Tensor:
        r"""Log density of the law at ``points (..., D)``, shape ``(...)`` (``-inf`` off the support).

        With :math:`\xi = C^{-1}(z - m)`: the density is :math:`p_\xi(\xi) / \det C`, where :math:`p_\xi` is
        the product of standardised one-dimensional densities (Gaussian; uniform on
        :math:`[-\sqrt3, \sqrt3]`; Laplace of scale :math:`1/\sqrt2`); the mixture is
        :math:`\frac12 N(m + \delta, \Gamma_0) + \frac12 N(m - \delta, \Gamma_0)`,
        :math:`\Gamma_0 = \Gamma - \delta\delta^\top`.
        """
        points = self._vector("points", points)
        log_det = torch.log(torch.diagonal(self._chol)).sum()
        if self.kind == "mixture":
            return torch.logsumexp(torch.stack([self._inner_gaussian_log_density(points - self.mean - self._shift),
                                                self._inner_gaussian_log_density(points - self.mean + self._shift)]),
                                   dim=0) - math.log(2.0)
        xi = self._whiten(points)
        if self.kind == "gaussian":
            per_coordinate = -0.5 * xi**2 - 0.5 * math.log(2 * math.pi)
        elif self.kind == "uniform":
            inside = xi.abs() <= math.sqrt(3.0)
            per_coordinate = torch.where(inside, torch.full_like(xi, -math.log(2 * math.sqrt(3.0))),
                                         torch.full_like(xi, -math.inf))
        else:
            per_coordinate = -0.5 * math.log(2.0) - math.sqrt(2.0) * xi.abs()
        return per_coordinate.sum(-1) - log_det

    def _inner_gaussian_log_density(self, centred: Tensor) -> Tensor:
        xi = torch.linalg.solve_triangular(self._inner_chol, centred.unsqueeze(-1), upper=False).squeeze(-1)
        log_det = torch.log(torch.diagonal(self._inner_chol)).sum()
        return -0.5 * (xi**2).sum(-1) - 0.5 * self.D * math.log(2 * math.pi) - log_det

    def log_mgf(self, u) -> Tensor:
        r"""Cumulant generating function :math:`K_\mu(u) = \log \mathbb{E}_\mu[e^{u^\top z}]`, ``(..., D) -> (...)``.

        With :math:`b = C^\top u` and :math:`a = \sqrt3`:

        - Gaussian: :math:`m^\top u + \frac12 u^\top \Gamma u`;
        - uniform: :math:`m^\top u + \sum_j \log \frac{\sinh(a b_j)}{a b_j}`;
        - Laplace: :math:`m^\top u - \sum_j \log(1 - b_j^2 / 2)`, and :math:`+\infty` unless every
          :math:`|b_j| < \sqrt2` (the tilt is not integrable there);
        - mixture: :math:`m^\top u + \frac12 u^\top \Gamma_0 u + \log\cosh(\delta^\top u)`.
        """
        u = self._vector("u", u)
        linear = u @ self.mean
        if self.kind == "mixture":
            return linear + 0.5 * (u @ self._inner_chol).pow(2).sum(-1) + log_cosh(u @ self._shift)
        b = u @ self._chol
        if self.kind == "gaussian":
            return linear + 0.5 * (b**2).sum(-1)
        if self.kind == "uniform":
            return linear + log_sinhc(math.sqrt(3.0) * b).sum(-1)
        inside = (b.abs() < math.sqrt(2.0)).all(-1)
        safe = torch.where(b.abs() < math.sqrt(2.0), b, torch.zeros_like(b))
        value = linear - torch.log1p(-0.5 * safe**2).sum(-1)
        return torch.where(inside, value, torch.full_like(value, math.inf))

    def tilted_mean(self, u) -> Tensor:
        r"""Mean of the tilted law :math:`d\nu_u(z) \propto e^{u^\top z} d\mu(z)`, i.e. :math:`\nabla K_\mu(u)`,
        ``(..., D)``.

        Infinite-prompt softmax attention is :math:`T[\mu](z_q) = V \nabla K_\mu(U z_q)`. With
        :math:`b = C^\top u` and :math:`a = \sqrt3`:

        - Gaussian: :math:`m + \Gamma u` (Lemma 2.1);
        - uniform: :math:`m + C g(b)`, :math:`g(b)_j = a \coth(a b_j) - 1/b_j` (bounded by :math:`a`);
        - Laplace: :math:`m + C h(b)`, :math:`h(b)_j = b_j / (1 - b_j^2/2)`, defined only for
          :math:`|b_j| < \sqrt2` (``ValueError`` otherwise);
        - mixture: :math:`m + \Gamma_0 u + \tanh(\delta^\top u)\, \delta`.
        """
        u = self._vector("u", u)
        if self.kind == "mixture":
            return (self.mean + u @ self._inner_chol @ self._inner_chol.T
                    + torch.tanh(u @ self._shift).unsqueeze(-1) * self._shift)
        b = u @ self._chol
        if self.kind == "gaussian":
            shape = b
        elif self.kind == "uniform":
            shape = math.sqrt(3.0) * langevin(math.sqrt(3.0) * b)
        else:
            largest = float(b.detach().abs().max()) if b.numel() else 0.0
            if largest >= math.sqrt(2.0):
                raise OutsideTiltDomain(largest)
            shape = b / (1 - 0.5 * b**2)
        return self.mean + shape @ self._chol.T

    def tilted_moments(self, u) -> tuple[Tensor, Tensor]:
        r"""Mean and covariance of the tilted law :math:`\nu_u`: :math:`\nabla K_\mu(u)` ``(..., D)`` and
        :math:`\nabla^2 K_\mu(u)` ``(..., D, D)``, float64.

        The mean is :meth:`tilted_mean`; the covariance is its Jacobian, by automatic differentiation
        of that closed form. For a Gaussian law they are :math:`(m + \Gamma u, \Gamma)`, Lemma 2.1
        (:func:`~softmax_as_linear.theory.attention.tilted_gaussian` gives them directly). Softmax attention of
        the whole law is :math:`V \nabla K_\mu(U z)`, and its Jacobian in :math:`U` uses the covariance.
        """
        u = self._vector("u", u).detach().requires_grad_(True)
        with torch.enable_grad():
            mean = self.tilted_mean(u)
            rows = [torch.autograd.grad(mean[..., k].sum(), u, retain_graph=k < self.D - 1)[0] for k in range(self.D)]
        return mean.detach(), torch.stack(rows, dim=-2)
