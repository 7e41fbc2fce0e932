r"""Token laws :math:`\mu` on :math:`\mathbb{R}^D` for prompts of i.i.d. tokens.

Each law has a known mean and covariance, so that Gaussian and non-Gaussian laws can be compared
at equal first two moments: the Gaussian one is where Lemma 2.1 makes softmax attention affine,
the others show what is special about it. Non-Gaussian laws are built as :math:`m + C \xi` where
:math:`C C^\top = \Gamma` and :math:`\xi` has i.i.d. standardised entries (uniform, Laplace), or as a
symmetric two-component Gaussian mixture with the same mean and covariance.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _checks

KINDS = ("gaussian", "uniform", "laplace", "mixture")


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
        self.kind = _checks.one_of("kind", kind, KINDS)
        mean = _checks.as_float_tensor("mean", mean).to(torch.float64)
        self.mean = _checks.vector("mean", mean)
        self.D = self.mean.shape[-1]
        cov = _checks.as_float_tensor("cov", cov).to(torch.float64)
        self.cov = _checks.covariance("cov", cov, self.D)
        self._chol = torch.linalg.cholesky(self.cov)
        if not 0.0 < float(separation) < 1.0:
            raise ValueError(f"separation must lie in (0, 1), got {separation!r}")
        eigvals, eigvecs = torch.linalg.eigh(self.cov)
        self._shift = math.sqrt(float(separation) * float(eigvals[-1])) * eigvecs[:, -1]
        inner = self.cov - torch.outer(self._shift, self._shift)
        self._inner_chol = torch.linalg.cholesky(inner)

    @classmethod
    def standard(cls, kind: str, D: int, scale: float = 1.0) -> "TokenLaw":
        """Centred law with covariance ``scale**2 * I_D``."""
        D = _checks.positive_int("D", D)
        scale = _checks.positive_float("scale", scale)
        return cls(kind, torch.zeros(D, dtype=torch.float64), scale**2 * torch.eye(D, dtype=torch.float64))

    def __repr__(self) -> str:
        return f"TokenLaw({self.kind!r}, D={self.D})"

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None,
               dtype=torch.float64) -> Tensor:
        """Draw i.i.d. tokens, shape ``(*shape, D)``, on the generator's device."""
        shape = tuple(_checks.positive_int("shape", s) for s in shape)
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
