r"""Chapter 8's result files read: differences paired by seed, the window's local exponent, and the gap between
linear and softmax attention split into what each reference explains.

- :func:`paired_difference`: a difference between two settings of the same seeds, its mean and standard error over
  seeds (seeds share their initialisation across settings, so the difference is paired);
- :func:`local_exponent`: :math:`\log(w_b / w_a) / \log(L_b / L_a)`, per seed, between two prompt lengths;
- :func:`gap_decomposition`: :math:`R_{\mathrm{lin}} - R_{\mathrm{soft}}` as linear attention's excess over its bound
  :math:`R^*_{\mathrm{lin}}`, the intercept share :math:`R^*_{\mathrm{lin}} - R^*_{\mathrm{aff}}`, and what softmax
  attention gains below the best affine predictor, :math:`R^*_{\mathrm{aff}} - R_{\mathrm{soft}}` (locality).
"""
from __future__ import annotations

import numpy as np

from ..core import stats


def paired_difference(values, settings, first, second) -> tuple[float, float]:
    """Mean and standard error over seeds of ``values[first] - values[second]``, seed by seed.

    ``values``: ``(n_settings, S)``, one row per entry of ``settings`` (a list of hashable settings, such as
    ``(gamma, s2)`` tuples) and one column per seed, the same seeds in every row."""
    values = np.asarray(values, dtype=float)
    settings = [tuple(s) if isinstance(s, (list, tuple)) else s for s in settings]
    if values.ndim != 2 or values.shape[0] != len(settings):
        raise ValueError(f"values must have shape (len(settings), seeds) = ({len(settings)}, S), got {values.shape}")
    for name, setting in (("first", first), ("second", second)):
        if setting not in settings:
            raise ValueError(f"{name}: {setting!r} is not one of the settings {settings}")
    return stats.mean_se(values[settings.index(first)] - values[settings.index(second)])


def local_exponent(lengths, w, first: int, last: int) -> np.ndarray:
    r"""The exponent of :math:`w \propto L^p` read between the lengths at indices ``first`` and ``last``, per seed:
    :math:`\log(w_{\text{last}} / w_{\text{first}}) / \log(L_{\text{last}} / L_{\text{first}})`. ``w``: ``(S, nL)``
    positive windows; returns ``(S,)``."""
    lengths, w = np.asarray(lengths, dtype=float), np.asarray(w, dtype=float)
    if w.ndim != 2 or w.shape[1] != lengths.size:
        raise ValueError(f"w must have shape (seeds, {lengths.size}), got {w.shape}")
    if lengths[last] == lengths[first]:
        raise ValueError("first and last must name two different lengths")
    if (w[:, [first, last]] <= 0).any():
        raise ValueError("w must be positive at the two lengths")
    return np.log(w[:, last] / w[:, first]) / np.log(lengths[last] / lengths[first])


def gap_decomposition(linear, softmax, linear_bound: float, affine: float) -> dict[str, np.ndarray]:
    r"""The gap :math:`R_{\mathrm{lin}} - R_{\mathrm{soft}}` (arrays of the same shape) split into three parts that
    add up to it:

    - ``"linear_excess"``: :math:`R_{\mathrm{lin}} - R^*_{\mathrm{lin}}`, linear attention above its bound (at finite
      :math:`L`, the noise of the prompt's moments; at the end of training, what training left);
    - ``"intercept"``: :math:`R^*_{\mathrm{lin}} - R^*_{\mathrm{aff}}`, what a constant term alone gains, which a
      normalised softmax layer has (its output at small scores is :math:`v^\top\bar z`) and linear attention has not;
    - ``"locality"``: :math:`R^*_{\mathrm{aff}} - R_{\mathrm{soft}}`, what softmax attention gains below every affine
      function of the query.
    """
    linear, softmax = np.asarray(linear, dtype=float), np.asarray(softmax, dtype=float)
    parts = {"gap": linear - softmax, "linear_excess": linear - linear_bound,
             "intercept": np.full(np.broadcast_shapes(linear.shape, softmax.shape), linear_bound - affine),
             "locality": affine - softmax}
    return parts
