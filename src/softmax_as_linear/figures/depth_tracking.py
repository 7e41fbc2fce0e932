"""Builder of the figure of Chapter 7's tracking experiment: distances to the infinite-prompt run against ``L``.

The data come from :func:`~softmax_as_linear.experiments.depth_tracking.depth_tracking`.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..core.stats import Estimate
from . import style


def tracking_sup_figure(lengths, estimates: dict[str, Estimate], *, quantity: str, n_seeds: int) -> go.Figure:
    """The supremum over training of ``quantity`` against ``L`` for each label (a depth, an activation), its mean
    over seeds with the :class:`~softmax_as_linear.core.stats.Estimate`'s interval over seeds as a band, and a
    :math:`1/L` guide."""
    lengths = np.asarray(lengths, dtype=float)
    fig = style.new_figure(f"Finite-L training against the infinite-prompt run (mean over {n_seeds} seeds)",
                           "prompt length L", quantity, logx=True, logy=True)
    for index, (label, est) in enumerate(estimates.items()):
        if est.mean.shape != lengths.shape:
            raise ValueError(f"estimate {label!r} has {est.mean.size} points for {lengths.size} lengths")
        color = style.SEQUENCE[index % len(style.SEQUENCE)]
        fig.add_trace(style.band(lengths, np.maximum(est.low, est.mean * 1e-3), est.high, color))
        fig.add_trace(go.Scatter(x=lengths, y=est.mean, mode="lines+markers", name=label, line=dict(color=color)))
    first = next(iter(estimates.values())).mean[0]
    fig.add_trace(go.Scatter(x=lengths, y=first * lengths[0] / lengths, mode="lines", name="slope −1",
                             line=dict(color=style.COLORS["noise"], dash="dash")))
    return fig
