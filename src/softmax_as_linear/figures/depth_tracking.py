"""Builder of the figure of Chapter 7's tracking experiment: distances to the infinite-prompt run against ``L``.

The data come from :func:`~softmax_as_linear.experiments.depth_tracking.depth_tracking`.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..core.stats import Estimate
from .depth import estimates_against_length


def tracking_sup_figure(lengths, estimates: dict[str, Estimate], *, quantity: str, n_seeds: int) -> go.Figure:
    """The supremum over training of ``quantity`` against ``L`` for each label (a depth, an activation), its mean
    over seeds with the :class:`~softmax_as_linear.core.stats.Estimate`'s interval over seeds as a band, and a
    :math:`1/L` guide."""
    return estimates_against_length(
        lengths, estimates, title=f"Finite-L training against the infinite-prompt run (mean over {n_seeds} seeds)",
        y_title=quantity)
