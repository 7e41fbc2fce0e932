r"""Mean and sample standard deviation of per-prompt losses summed in chunks, without cancellation.

The textbook :math:`\sum x^2/n - \bar x^2` loses every digit of the variance when the mean is large against the
spread (a risk of 1 with a standard deviation of :math:`10^{-8}` in float64). :class:`Moments` keeps instead the
centred sum of squares :math:`M_2 = \sum (x - \bar x)^2`, merging chunks with Chan, Golub and LeVeque's update
:math:`M_2 = M_2^a + M_2^b + \delta^2 n_a n_b / (n_a + n_b)`, :math:`\delta = \bar x_b - \bar x_a`; the mean is the
plain sum over ``n`` (the same bits as summing the chunks' sums).
"""
from __future__ import annotations

import torch
from torch import Tensor


class Moments:
    """Mean and sample standard deviation over the last axis of the chunks fed to :meth:`add`, in float64.

    ``add(values)`` with values ``(..., k)``; :attr:`mean` and :attr:`sd` ``(...)``; the standard error of the mean is
    ``sd / sqrt(n)``.
    """

    def __init__(self):
        self.n = 0
        self.total: Tensor | None = None
        self.m2: Tensor | None = None

    def add(self, values: Tensor) -> "Moments":
        """Take in ``values`` ``(..., k)``, ``k`` more values of every entry; returns ``self``."""
        values = torch.as_tensor(values).double()
        k = values.shape[-1]
        if k == 0:
            return self
        total = values.sum(-1)
        m2 = ((values - (total / k).unsqueeze(-1)) ** 2).sum(-1)
        if self.n == 0:
            self.total, self.m2 = total, m2
        else:
            delta = total / k - self.total / self.n
            self.m2 = self.m2 + m2 + delta**2 * (self.n * k / (self.n + k))
            self.total = self.total + total
        self.n += k
        return self

    @property
    def mean(self) -> Tensor:
        """Mean of the values taken in so far, ``(...)``."""
        return self.total / self.n

    @property
    def sd(self) -> Tensor:
        """Sample standard deviation (``n - 1`` in the denominator; 0 for a single value)."""
        return (self.m2.clamp_min(0) / max(self.n - 1, 1)).sqrt()
