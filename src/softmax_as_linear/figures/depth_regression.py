"""Builder of Chapter 7's regression figure: trained one- and two-layer attention against the references.

The data are a result of :mod:`~softmax_as_linear.experiments.depth_regression` and its
:func:`~softmax_as_linear.experiments.depth_regression.depth_summary`.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from . import style


def depth_risk_figure(summary: dict, references: dict, warm_risk=None) -> go.Figure:
    """Final risks against ``L`` of the four trained models (means over seeds, two standard errors over seeds) with
    :math:`R^*_{\\mathrm{lin}}(L)`, two steps of preconditioned gradient descent with the best preconditioners and the
    :math:`L`-Bayes risk; with ``warm_risk (S, nL)``, two-layer softmax trained from the two-layer linear weights."""
    lengths = np.asarray(summary["lengths"], dtype=float)
    fig = style.new_figure(f"One and two attention layers on in-context regression ({len(summary['seeds'])} seeds)",
                           "prompt length L", "risk R = MSE/2 on fresh prompts", logx=True, logy=True)
    for name, label, color, dash in (("optimal_linear", "R*_lin(L): best one-layer linear", "optimal_linear", "dash"),
                                     ("pgd_2", "2 steps of preconditioned GD, best preconditioners", "theory",
                                      "dashdot"),
                                     ("bayes", "L-Bayes (ridge)", "bayes", "dot")):
        fig.add_trace(go.Scatter(x=lengths, y=references[name], mode="lines", name=label,
                                 line=dict(color=style.COLORS[color], dash=dash, width=2)))
    for model, label, color, symbol in (("softmax_1", "softmax, 1 layer", "softmax", "circle-open"),
                                        ("softmax_2", "softmax, 2 layers", "softmax", "circle"),
                                        ("linear_1", "linear, 1 layer", "linear", "square-open"),
                                        ("linear_2", "linear, 2 layers", "linear", "square")):
        fig.add_trace(go.Scatter(x=lengths, y=summary["mean"][model], mode="lines+markers", name=label,
                                 error_y=dict(type="data", array=2 * np.nan_to_num(summary["se"][model])),
                                 line=dict(color=style.COLORS[color], dash="solid" if model.endswith("2") else "dot"),
                                 marker=dict(symbol=symbol, size=9)))
    if warm_risk is not None:
        warm = np.asarray(warm_risk, dtype=float)
        se = warm.std(0, ddof=1) / np.sqrt(warm.shape[0]) if warm.shape[0] > 1 else np.zeros(warm.shape[1])
        fig.add_trace(go.Scatter(x=lengths, y=warm.mean(0), mode="lines+markers",
                                 name="softmax, 2 layers, from the linear weights",
                                 error_y=dict(type="data", array=2 * se),
                                 line=dict(color=style.COLORS["softmax"], dash="dash"),
                                 marker=dict(symbol="diamond", size=10)))
    return style.legend_below(fig, rows=5)
