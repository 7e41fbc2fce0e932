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


def shaped(name: str, value, dims: str, sizes: dict | None = None, *, dtype: torch.dtype | None = torch.float64,
           allow_empty: bool = False, check_finite: bool = True) -> Tensor:
    """``value`` (a tensor, NumPy array or nested list of numbers) as a finite floating tensor of shape ``dims``, or a
    ``ValueError`` naming ``name``.

    ``dims`` reads as the docstrings write shapes: ``"(m, d)"``, ``"(m,)"``, ``"(..., m)"`` (any leading
    dimensions), with names (bound in ``sizes`` on first sight, with the argument they came from, and checked against
    it after: ``omega (m, d)`` then ``cov (d, d)``, whose error names both) or numbers. A named dimension must be at
    least 1 unless ``allow_empty``; the leading ``...`` may be empty. ``dtype`` None keeps the value's floating
    dtype (a NumPy array's included, an integer one as the default dtype). ``check_finite`` False skips the
    finiteness check (which reads every entry, and on an accelerator waits for it)."""
    sizes = {} if sizes is None else sizes
    tensor = as_float_tensor(name, value)
    if dtype is not None:
        tensor = tensor.to(dtype)
    parts = [p.strip() for p in dims.strip("()").split(",") if p.strip()]
    batch = bool(parts) and parts[0] == "..."
    named = parts[1:] if batch else parts
    wanted = "(" + ", ".join(str(sizes.get(p, p)) for p in parts) + ("," if len(parts) == 1 else "") + ")"
    if (tensor.ndim < len(named)) if batch else (tensor.ndim != len(named)):
        raise ValueError(f"{name} must have shape {wanted}, got {tuple(tensor.shape)}")
    for part, size in zip(named, tensor.shape[tensor.ndim - len(named):]):
        if not part.isdigit() and part not in sizes:
            sizes[part], sizes[f"{part} from"] = size, name
        expected = int(part) if part.isdigit() else sizes[part]
        if size != expected or (size == 0 and not allow_empty):
            origin = sizes.get(f"{part} from")
            where = f" with {part} = {expected}" + (f" (from {origin})" if origin and origin != name else "")
            raise ValueError(f"{name} must have shape {wanted}{where if not part.isdigit() else ''}, got "
                             f"{tuple(tensor.shape)}" + (" (empty)" if tensor.numel() == 0 else ""))
    return finite(name, tensor) if check_finite else tensor


def has_attributes(name: str, value, *attributes: str, kind: str = "object"):
    """``value`` if it has every one of ``attributes``, else a ``ValueError`` naming ``name`` and ``kind``."""
    missing = [a for a in attributes if not hasattr(value, a)]
    if missing:
        raise ValueError(f"{name} must be a {kind} (with {', '.join(missing)}), got {type(value).__name__}")
    return value


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
