"""Plane geometry of the figures: ellipses, points as x/y coordinates to plot, axes, and the plane rotation (defined in
:mod:`~softmax_as_linear.theory.depth` with Chapter 7's plane weights, which the theory layer needs)."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ..theory.depth import rotation  # noqa: F401  (the plane rotation, defined with Chapter 7's plane weights)


def ellipse(center, cov, n_sd: float = 1.0, n: int = 61) -> Tensor:
    r"""The contour :math:`\{c + k\, C e : \|e\| = 1\}` of ``n_sd`` = :math:`k` standard deviations of a plane law.

    ``center`` ``(2,)`` is :math:`c`, ``cov`` ``(2, 2)`` the covariance :math:`C C^\top`; ``n`` points, shape ``(n, 2)``
    (the first and last coincide, closing the curve).
    """
    t = torch.linspace(0, 2 * math.pi, n, dtype=torch.float64)
    circle = torch.stack([t.cos(), t.sin()], dim=-1)
    return center + n_sd * circle @ torch.linalg.cholesky(cov).T


def xy(points, decimals: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """x and y coordinates ``(n,)`` of points ``(n, 2)``, rounded to ``decimals`` so that stored figures stay small."""
    points = np.asarray(points)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"points must have shape (n, 2), got {points.shape}")
    points = np.round(points, decimals)
    return points[:, 0], points[:, 1]


def plane_axes(x_range, y_range, **yaxis) -> dict:
    """Layout of a plane figure's axes with the ranges ``x_range`` and ``y_range`` (``yaxis``: more y-axis settings,
    ``scaleanchor="x"`` for equal scales)."""
    return dict(xaxis=dict(range=list(x_range)), yaxis=dict(range=list(y_range), **yaxis))
