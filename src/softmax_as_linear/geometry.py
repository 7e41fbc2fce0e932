"""Plane geometry of the measure-view chapters (1 and 2): rotations, and points as x/y coordinates for plotting."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from . import _checks


def rotation(degrees: float, dtype=torch.float64) -> Tensor:
    r"""The ``(2, 2)`` rotation by ``degrees``, :math:`\begin{pmatrix}\cos\theta & -\sin\theta\\ \sin\theta & \cos\theta\end{pmatrix}`."""
    angle = math.radians(_checks.number("degrees", degrees))
    return torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=dtype)


def xy(points, decimals: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """x and y coordinates ``(n,)`` of points ``(n, 2)``, rounded to ``decimals`` so that stored figures stay small."""
    points = np.asarray(points)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"points must have shape (n, 2), got {points.shape}")
    points = np.round(points, decimals)
    return points[:, 0], points[:, 1]
