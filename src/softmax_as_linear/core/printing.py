"""How a chapter prints a number that is zero up to rounding: as a bound, never as the noise one CPU left in it.

Another machine sums in another order and leaves other noise (``8e-18`` here, ``1e-17`` there, ``-0.`` or
``0.`` once rounded), so a printed zero says what it means: ``< 1e-12`` (:func:`bound`), or ``0.`` without a
sign (:func:`rounded`). The rule for what nbval compares is in CONTRIBUTING.md ("What nbval compares").
"""
from __future__ import annotations

import numpy as np


def bound(value: float, below: float = 1e-12, fmt: str = ".1e", equals: bool = False) -> str:
    """``"< {below}"`` when ``|value| < below`` (a zero up to rounding), else ``value`` formatted with ``fmt``
    (after ``"= "`` with ``equals``, so that ``f"R {bound(r, equals=True)}"`` reads either way).

    >>> bound(8e-18), bound(-1e-17), bound(3.2e-4), bound(3.2e-4, equals=True)
    ('< 1e-12', '< 1e-12', '3.2e-04', '= 3.2e-04')
    """
    if not below > 0:
        raise ValueError(f"below must be positive, not {below!r}")
    if abs(float(value)) < below:
        return f"< {below:g}"
    return ("= " if equals else "") + format(float(value), fmt)


def rounded(values, decimals: int) -> np.ndarray:
    """``np.round(values, decimals)`` with the sign of every zero dropped: an entry that rounds to zero prints
    ``0.``, whatever the sign of the rounding noise it held (``-1e-17`` and ``1e-17`` alike)."""
    return np.round(np.asarray(values, dtype=float), decimals) + 0.0
