r"""Builder of Chapter 9's map: how far trained softmax attention is from linear attention at each prompt length,
one curve per regime.

The data are :func:`~softmax_as_linear.experiments.linearity_map.linearity_map` (the measure
:math:`\Delta(L) = (R_{\mathrm{lin}} - R_{\mathrm{soft}})/R_0` or its variant, mean over seeds with a Student-t
interval) and :func:`~softmax_as_linear.experiments.linearity_map.limits` (its values at :math:`L = \infty` where
theory gives them, drawn as stars at a position marked ∞ on the axis).
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from . import style

#: Where the axis puts :math:`L = \infty` (a decade beyond the longest prompt of the course's files).
INFINITY_AT = 1e5
#: Colour, dash and marker of each regime: a regime that shares its colour with another differs by dash and marker.
REGIME_STYLES = {
    "isotropic": (style.COVARIATE_COLORS["gaussian"], "solid", "circle"),
    "anisotropic": (style.SEQUENCE[2], "solid", "square"),
    "anisotropic_published": (style.SEQUENCE[2], "dash", "square-open"),
    "rademacher": (style.COVARIATE_COLORS["rademacher"], "solid", "diamond"),
    "uniform": (style.COVARIATE_COLORS["uniform"], "solid", "triangle-up"),
    "two_layers": (style.SEQUENCE[3], "solid", "x"),
    "nonlinear": (style.SEQUENCE[4], "solid", "hexagon"),
    "nonlinear_optima": (style.SEQUENCE[4], "dash", "diamond-open"),
}
#: The regimes whose value at :math:`L = \infty` is Lemma 2.1's 0: one star stands for all of them.
GAUSSIAN_TOKENS = ("isotropic", "anisotropic", "anisotropic_published")
YTITLES = {"zero": "Δ = (R_lin − R_soft) / R_0",
           "excess": "(R_lin − R_soft) / (R_lin − R_Bayes)"}


def linearity_map_figure(maps: dict[str, dict], limits: dict[str, float] | None = None,
                         variant: str = "zero") -> go.Figure:
    """One curve per regime of ``maps`` (name -> :func:`~softmax_as_linear.experiments.linearity_map.regime_map`):
    the mean over seeds against ``L`` on a log axis, with error bars from the Student-t interval over seeds; optima
    (kind ``"optima"``) dashed with open markers. ``limits`` (name -> value at :math:`L = \\infty`) are drawn as
    stars at :data:`INFINITY_AT`, ticked ∞ (one star for the Gaussian regimes, whose value is Lemma 2.1's 0). A dotted
    line marks 0, where the two attentions' risks coincide."""
    if variant not in YTITLES:
        raise ValueError(f"variant must be one of {tuple(YTITLES)}, got {variant!r}")
    if not maps:
        raise ValueError("maps must hold at least one regime")
    limits = {} if limits is None else {k: v for k, v in limits.items() if k in maps}
    title = ("Risk softmax attention saves over linear attention" if variant == "zero"
             else "Share of linear attention's excess risk softmax removes")
    fig = style.new_figure(title, "prompt length L", YTITLES[variant], logx=True)
    longest = max(max(m["lengths"]) for m in maps.values())
    right = INFINITY_AT if limits else longest
    fig.add_trace(go.Scatter(x=[min(min(m["lengths"]) for m in maps.values()), right], y=[0.0, 0.0], mode="lines",
                             name="0: equal risks", line=dict(color=style.COLORS["noise"], dash="dot", width=1.5),
                             hoverinfo="skip"))
    for name, m in maps.items():
        color, dash, symbol = REGIME_STYLES[name]
        mean, low, high = (np.asarray(m[k], dtype=float) for k in ("mean", "low", "high"))
        label = f"{m['regime'].label} (Ch. {m['regime'].chapter}, {len(m['seeds'])} " \
                f"{'replicates' if m['regime'].kind == 'optima' else 'seeds'})"
        fig.add_trace(go.Scatter(x=np.asarray(m["lengths"], dtype=float), y=mean, mode="lines+markers", name=label,
                                 error_y=dict(type="data", symmetric=False, array=high - mean,
                                              arrayminus=mean - low, thickness=1.2, width=3),
                                 line=dict(color=color, dash=dash, width=2), marker=dict(symbol=symbol, size=8)))
    gaussian = [name for name in limits if name in GAUSSIAN_TOKENS]
    stars = ([("theory at L = ∞: Gaussian tokens (Lemma 2.1)", limits[gaussian[0]], style.COLORS["theory"])]
             if gaussian else [])
    stars += [(f"theory at L = ∞: {maps[name]['regime'].label}", value, REGIME_STYLES[name][0])
              for name, value in limits.items() if name not in GAUSSIAN_TOKENS]
    for label, value, color in stars:
        fig.add_trace(go.Scatter(x=[INFINITY_AT], y=[value], mode="markers", name=label,
                                 marker=dict(symbol="star", size=14, color=color, line=dict(color="#222", width=1))))
    if limits:
        ticks = [10.0 ** k for k in range(1, int(np.log10(longest)) + 1)]
        fig.update_xaxes(tickvals=[*ticks, INFINITY_AT], ticktext=[*(f"10<sup>{k}</sup>" for k in
                                                                     range(1, len(ticks) + 1)), "∞"])
    return style.fit_phone(fig)
