r"""Laws of the standardised input entries of in-context regression: draws, cumulants, moments, quadrature.

A regression input is :math:`x = F\xi` with :math:`F F^\top = \Sigma` and :math:`\xi \in \mathbb{R}^d` of
i.i.d. entries of mean 0 and variance 1 from one of three laws :math:`\lambda`
(:data:`~softmax_as_linear.registry.COVARIATES`):

- ``"gaussian"``: :math:`N(0, 1)` (the paper's Section 5);
- ``"uniform"``: uniform on :math:`[-\sqrt3, \sqrt3]`;
- ``"rademacher"``: :math:`\pm 1` with probability :math:`\frac12` each.

What the infinite-prompt softmax output needs is the cumulant generating function of one entry,
:math:`k_\lambda(b) = \log \mathbb{E}[e^{b\xi}]`, and its derivatives: :math:`k'_\lambda(b)` is the mean of the
entry tilted by :math:`e^{b\xi}` and :math:`k''_\lambda(b)` its variance.

- Gaussian: :math:`k(b) = b^2/2`, :math:`k'(b) = b`, :math:`\mathbb{E}\xi^4 = 3`;
- uniform: :math:`k(b) = \log\frac{\sinh(ab)}{ab}`, :math:`k'(b) = a\coth(ab) - 1/b` with :math:`a = \sqrt3`,
  :math:`\mathbb{E}\xi^4 = 9/5`;
- Rademacher: :math:`k(b) = \log\cosh b`, :math:`k'(b) = \tanh b`, :math:`\mathbb{E}\xi^4 = 1`.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from ..core import checks
from ..registry import COVARIATES

_ROOT3 = math.sqrt(3.0)

#: Exact moments :math:`\mathbb{E}\xi^k` for ``k = 4, 6``.
MOMENTS = {"gaussian": {4: 3.0, 6: 15.0}, "uniform": {4: 9 / 5, 6: 27 / 7}, "rademacher": {4: 1.0, 6: 1.0}}


def check_covariates(covariates) -> str:
    """``covariates`` if it names a covariate law of :data:`~softmax_as_linear.registry.COVARIATES`, else a
    ``ValueError`` naming the argument."""
    return checks.one_of("covariates", covariates, COVARIATES)


def fill_(covariates: str, out: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Fill ``out`` (any shape, possibly a strided view) in place with i.i.d. standardised entries of the covariate law
    ``covariates``.

    Gaussian: ``normal_`` (the draws of :func:`torch.randn`); uniform: ``uniform_`` on :math:`[-\\sqrt3, \\sqrt3]`;
    Rademacher: ``bernoulli_(1/2)`` mapped to :math:`\\pm 1`. Returns ``out``.

    On a CPU the Rademacher entries are drawn as what ``bernoulli_(1/2)`` draws there, a float64 ``uniform_`` on
    :math:`[0, 1)` per entry compared with :math:`\\frac12`: the same signs and the same generator state after,
    in half the time (``tests/theory/test_covariates.py`` checks that they agree).
    """
    if covariates == "gaussian":
        return out.normal_(generator=generator)
    if covariates == "uniform":
        return out.uniform_(-_ROOT3, _ROOT3, generator=generator)
    if covariates == "rademacher":
        if out.device.type == "cpu":
            uniform = torch.empty(out.shape, dtype=torch.float64).uniform_(generator=generator)
            return out.copy_(torch.where(uniform < 0.5, 1.0, -1.0))
        return out.bernoulli_(0.5, generator=generator).mul_(2).sub_(1)
    raise ValueError(f"covariates must be one of {COVARIATES}, got {covariates!r}")


def draw(covariates: str, *shape: int, generator: torch.Generator | None = None, dtype=torch.float64,
         device=None) -> Tensor:
    """A new tensor of shape ``shape`` filled by :func:`fill_` (on the generator's device when one is given)."""
    if generator is not None:
        device = generator.device
    return fill_(covariates, torch.empty(*shape, dtype=dtype, device=device), generator)


def cgf(covariates: str, b: Tensor) -> Tensor:
    r"""Cumulant generating function :math:`k_\lambda(b) = \log \mathbb{E} e^{b\xi}` of one entry, elementwise."""
    if covariates == "gaussian":
        return 0.5 * b**2
    if covariates == "uniform":
        return log_sinhc(_ROOT3 * b)
    if covariates == "rademacher":
        return log_cosh(b)
    raise ValueError(f"covariates must be one of {COVARIATES}, got {covariates!r}")


def tilted_mean(covariates: str, b: Tensor) -> Tensor:
    r""":math:`k'_\lambda(b)`, the mean of one entry under the tilt :math:`e^{b\xi}`, elementwise (odd, bounded by
    :math:`\sqrt3` for the uniform law and by 1 for the Rademacher law)."""
    if covariates == "gaussian":
        return b
    if covariates == "uniform":
        return _ROOT3 * langevin(_ROOT3 * b)
    if covariates == "rademacher":
        return torch.tanh(b)
    raise ValueError(f"covariates must be one of {COVARIATES}, got {covariates!r}")


def tilted_variance(covariates: str, b: Tensor) -> Tensor:
    r""":math:`k''_\lambda(b)`, the variance of one entry under the tilt :math:`e^{b\xi}`, elementwise."""
    if covariates == "gaussian":
        return torch.ones_like(b)
    if covariates == "uniform":
        x = _ROOT3 * b
        small = x.abs() < 1e-3
        safe = torch.where(small, torch.ones_like(x), x)
        exact = 1 / safe**2 - 1 / torch.sinh(safe) ** 2
        return 3.0 * torch.where(small, 1 / 3 - x**2 / 15, exact)
    if covariates == "rademacher":
        return 1 - torch.tanh(b) ** 2
    raise ValueError(f"covariates must be one of {COVARIATES}, got {covariates!r}")


def moment(covariates: str, k: int) -> float:
    r""":math:`\mathbb{E}\xi^k` for ``k`` in 2, 4, 6 (odd moments are 0)."""
    check_covariates(covariates)
    if k == 2:
        return 1.0
    if k not in (4, 6):
        raise ValueError(f"k must be 2, 4 or 6, got {k!r}")
    return MOMENTS[covariates][k]


def quadrature(covariates: str, n: int = 24) -> tuple[Tensor, Tensor]:
    r"""Nodes and weights ``(m,)`` of a rule for :math:`\mathbb{E} f(\xi)`, float64.

    Rademacher: the two atoms (exact); uniform: ``n``-point Gauss-Legendre on :math:`[-\sqrt3, \sqrt3]`;
    Gaussian: ``n``-point Gauss-Hermite (probabilists'). Exact for polynomials of degree below ``2n``.
    """
    check_covariates(covariates)
    nodes, weights = _rule(covariates, checks.int_at_least("n", n, 1))
    return nodes.clone(), weights.clone()


@functools.lru_cache(maxsize=None)
def _rule(covariates: str, n: int) -> tuple[Tensor, Tensor]:
    # computed once per (law, n): the flows of Chapter 6 ask for the same rule at every evaluation of the risk,
    # and NumPy's Gauss-Legendre solve costs far more than the risk itself
    if covariates == "rademacher":
        return torch.tensor([-1.0, 1.0], dtype=torch.float64), torch.tensor([0.5, 0.5], dtype=torch.float64)
    if covariates == "uniform":
        x, w = np.polynomial.legendre.leggauss(n)
        return torch.from_numpy(x * _ROOT3), torch.from_numpy(w / 2)
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return torch.from_numpy(x), torch.from_numpy(w / w.sum())


def log_cosh(x: Tensor) -> Tensor:
    r""":math:`\log\cosh(x)`, stable for large :math:`|x|`."""
    return x.abs() + torch.log1p(torch.exp(-2 * x.abs())) - math.log(2.0)


def log_sinhc(x: Tensor) -> Tensor:
    r""":math:`\log(\sinh(x) / x)`, stable for small and large :math:`|x|`."""
    small = x.abs() < 1e-3
    big = x.abs().clamp_min(1e-3)
    exact = big - torch.log(2 * big) + torch.log1p(-torch.exp(-2 * big))
    return torch.where(small, x**2 / 6 - x**4 / 180, exact)


def langevin(x: Tensor) -> Tensor:
    r"""Langevin function :math:`\coth(x) - 1/x`, stable near 0."""
    small = x.abs() < 1e-3
    safe = torch.where(small, torch.ones_like(x), x)
    return torch.where(small, x / 3 - x**3 / 45, 1 / torch.tanh(safe) - 1 / safe)
