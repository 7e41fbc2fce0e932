"""Argument checks shared by the library: every failure is a ``ValueError`` naming the argument."""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import Tensor


def as_float_tensor(name: str, value, *, like: Tensor | None = None) -> Tensor:
    """Convert ``value`` to a floating tensor (on ``like``'s device and dtype when given)."""
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{name} must be a tensor or array of numbers, got {type(value).__name__}") from error
    if like is not None:
        return tensor.to(device=like.device, dtype=like.dtype)
    if not tensor.is_floating_point():
        tensor = tensor.to(torch.get_default_dtype())
    return tensor


def finite(name: str, tensor: Tensor) -> Tensor:
    """``tensor`` if every entry is finite, else a ``ValueError`` naming ``name``."""
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return tensor


def int_at_least(name: str, value, minimum: int) -> int:
    """``value`` as an int, or a ``ValueError`` unless it is a whole number ``>= minimum``.

    Accepted: any ``numbers.Integral`` but a bool (``int``, ``np.int64``), a whole float (``10.0``,
    ``np.float32(10)``), and a 0-dim integer tensor or array (``torch.tensor(10)``)."""
    whole = value
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0:
        whole = value.item()  # a Python int, float, bool or complex
    if isinstance(whole, (float, np.floating)) and math.isfinite(whole) and float(whole).is_integer():
        whole = int(whole)
    if isinstance(whole, (bool, np.bool_)) or not isinstance(whole, numbers.Integral) or int(whole) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(whole)


def positive_int(name: str, value) -> int:
    """``value`` as an int ``>= 1``, or a ``ValueError`` naming ``name``."""
    return int_at_least(name, value, 1)


def number(name: str, value) -> float:
    """``value`` as a finite float, or a ``ValueError`` naming ``name``."""
    try:
        result = float(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be a number, got {value!r}") from error
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def in_open_interval(name: str, value, low: float, high: float) -> float:
    """``value`` as a float in ``(low, high)``, or a ``ValueError`` naming ``name``."""
    result = number(name, value)
    if not low < result < high:
        raise ValueError(f"{name} must lie in ({low:g}, {high:g}), got {value!r}")
    return result


def positive_float(name: str, value, *, allow_zero: bool = False) -> float:
    """``value`` as a finite float ``> 0`` (``>= 0`` with ``allow_zero``), or a ``ValueError`` naming ``name``."""
    result = number(name, value)
    if result < 0 or (result == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return result


def vector(name: str, tensor: Tensor, dim: int | None = None) -> Tensor:
    """``tensor`` if it has shape ``(..., D)`` (with ``D == dim`` when given), else a ``ValueError`` naming ``name``."""
    if tensor.ndim < 1:
        raise ValueError(f"{name} must have shape (..., D), got a scalar")
    if dim is not None and tensor.shape[-1] != dim:
        raise ValueError(f"{name} must have last dimension {dim}, got shape {tuple(tensor.shape)}")
    return finite(name, tensor)


def square(name: str, tensor: Tensor, dim: int | None = None) -> Tensor:
    """``tensor`` if it has shape ``(..., D, D)`` (with ``D == dim`` when given), else a ``ValueError`` naming
    ``name``."""
    if tensor.ndim < 2 or tensor.shape[-1] != tensor.shape[-2]:
        raise ValueError(f"{name} must have shape (..., D, D), got {tuple(tensor.shape)}")
    if dim is not None and tensor.shape[-1] != dim:
        raise ValueError(f"{name} must be {dim} x {dim}, got shape {tuple(tensor.shape)}")
    return finite(name, tensor)


def covariance(name: str, tensor: Tensor, dim: int | None = None, *, definite: bool = True) -> Tensor:
    """Symmetric and positive definite (or semi-definite when ``definite`` is False)."""
    square(name, tensor, dim)
    scale = tensor.abs().amax().clamp_min(1.0)
    if not torch.allclose(tensor, tensor.transpose(-1, -2), atol=1e-6 * float(scale)):
        raise ValueError(f"{name} must be symmetric")
    smallest = torch.linalg.eigvalsh(tensor.double()).amin()
    tolerance = 1e-10 * float(scale)
    if definite and smallest <= tolerance:
        raise ValueError(f"{name} must be positive definite (smallest eigenvalue {float(smallest):.3g})")
    if not definite and smallest < -100 * torch.finfo(tensor.dtype).eps * float(scale):
        raise ValueError(f"{name} must be positive semi-definite (smallest eigenvalue {float(smallest):.3g})")
    return tensor


def one_of(name: str, value, choices) -> str:
    """``value`` if it is among ``choices``, else a ``ValueError`` naming ``name`` and listing the choices."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def number_list(name: str, text: str) -> list[float]:
    """Numbers typed as text, separated by commas or semicolons (``"1, 1; 0.2"``), or a ``ValueError`` naming
    ``name``."""
    if not isinstance(text, str):
        raise ValueError(f"{name} must be text, got {type(text).__name__}")
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    try:
        return [number(name, p) for p in parts]
    except ValueError:
        raise ValueError(f"{name} must be numbers separated by commas, got {text!r}") from None
