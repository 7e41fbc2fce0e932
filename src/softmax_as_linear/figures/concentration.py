"""Builders of Chapter 3's figures: the gaps of finite-prompt attention to its infinite-prompt limit against ``L``.

The curves come from the estimators of :mod:`~softmax_as_linear.theory.concentration`; sliders switch between
precomputed panels, so they work in the rendered book without a kernel. The live panel's builder is
:func:`gap_figure`.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from . import style


def _gap_traces(curve, which: str, color: str, name: str, dash: str = "solid", band: bool = True) -> list:
    """The mean of one estimate of a :class:`~softmax_as_linear.theory.concentration.GapCurve` against ``L``, with its
    95% interval as a band."""
    estimate = getattr(curve, which)
    traces = [style.band(curve.lengths, estimate.low, estimate.high, color)] if band else []
    traces.append(go.Scatter(x=curve.lengths, y=estimate.mean, mode="lines+markers", name=name,
                             line=dict(color=color, dash=dash, width=2.2)))
    return traces


def output_gap_figure(curves: dict, slopes: dict) -> go.Figure:
    """The output gap :math:`E_L` of softmax attention against ``L`` (log-log) for Gaussian tokens
    :math:`N(0, \\sigma^2 I)`, one line per ``sigma`` (``curves``: sigma -> GapCurve; ``slopes``: sigma -> the
    fitted log-log slope named in the legend, for instance
    :meth:`~softmax_as_linear.theory.concentration.GapCurve.slope` over :math:`L \\ge 100`), and a line of
    slope -1 through the first curve's third point."""
    missing = [sigma for sigma in curves if sigma not in slopes]
    if missing:
        raise ValueError(f"slopes must give the fitted slope of every curve; missing sigma = {missing}")
    fig = style.new_figure("Output gap of softmax attention, tokens N(0, σ² I)",
                           "prompt length L", "E_L", logx=True, logy=True)
    for color, (sigma, curve) in zip(style.SEQUENCE, curves.items()):
        fig.add_traces(_gap_traces(curve, "output", color, f"σ = {sigma} (slope {float(slopes[sigma]):.2f})"))
    first = next(iter(curves.values()))
    lengths = first.lengths.tolist()
    reference = first.output.mean[2] * lengths[2] / np.array(lengths, dtype=float)
    fig.add_trace(go.Scatter(x=lengths, y=reference, mode="lines", name="slope −1",
                             line=dict(color=style.COLORS["noise"], dash="dash")))
    return fig


def ess_figure(curves: dict, D: int) -> go.Figure:
    """Mean effective sample size of the softmax weights over ``L`` for tokens :math:`N(0, \\sigma^2 I_D)`, one line
    per ``sigma`` (``curves``: sigma -> GapCurve), and its limit :math:`(1 + 2\\sigma^2)^{-D/2}` (dotted)."""
    fig = style.new_figure("Effective sample size of the softmax weights",
                           "prompt length L", "mean ESS / L", logx=True, logy=True)
    for color, (sigma, curve) in zip(style.SEQUENCE, curves.items()):
        lengths = curve.lengths.tolist()
        fig.add_trace(go.Scatter(x=lengths, y=curve.ess.mean / curve.lengths, mode="lines+markers",
                                 name=f"σ = {sigma}", line=dict(color=color, width=2.2)))
        limit = (1 + 2 * sigma**2) ** (-D / 2)
        fig.add_trace(go.Scatter(x=[lengths[0], lengths[-1]], y=[limit, limit], mode="lines",
                                 line=dict(color=color, dash="dot"), showlegend=False,
                                 hovertext=f"(1 + 2σ²)^(−D/2) for σ = {sigma}"))
    return fig


def gradient_gap_figure(curves: dict) -> go.Figure:
    """Mean squared Jacobian gaps in ``U`` (with bands) and ``V`` (dotted) against ``L`` (log-log), one colour per
    ``sigma`` (``curves``: sigma -> GapCurve computed with ``gradients=True``)."""
    fig = style.new_figure("Gradient gaps of softmax attention, tokens N(0, σ² I)",
                           "prompt length L", "mean squared Jacobian gap", logx=True, logy=True)
    for color, (sigma, curve) in zip(style.SEQUENCE, curves.items()):
        fig.add_traces(_gap_traces(curve, "grad_U", color, f"∇_U, σ = {sigma}"))
        fig.add_traces(_gap_traces(curve, "grad_V", color, f"∇_V, σ = {sigma}", dash="dot", band=False))
    return fig


def self_attention_gap_figure(inside, outside, *, query_norm: float, sigma: float) -> go.Figure:
    """The output gap of one query :math:`z = r e` with the query in the measure (Remark 3.2) and outside it, against
    ``L`` (two GapCurves)."""
    fig = style.new_figure(f"One self-attending query, z = {query_norm} e, σ = {sigma}",
                           "prompt length L", "mean squared output gap", logx=True, logy=True)
    fig.add_traces(_gap_traces(inside, "output", style.COLORS["softmax"], "query in the measure (Remark 3.2)"))
    fig.add_traces(_gap_traces(outside, "output", style.COLORS["linear"], "query outside the measure"))
    return fig


def query_in_measure_figure(kappas, curves: dict, *, sigma: float, active: int) -> go.Figure:
    """:math:`E_L` with and without the query in the measure, with a slider over :math:`\\kappa` in
    :math:`U = \\kappa U_0`; ``curves`` maps ``(kappa, include_query)`` to a GapCurve."""
    panels = []
    for kappa in kappas:
        traces = []
        for include_query, color, name in ((False, style.COLORS["linear"], "query outside"),
                                           (True, style.COLORS["softmax"], "query in the measure")):
            traces += _gap_traces(curves[(kappa, include_query)], "output", color, name)
        panels.append((kappa, traces))
    return style.slider_figure(panels, slider_label="κ", active=active, xtitle="prompt length L",
                               title=f"E_L with and without the query, U = κ U₀, σ = {sigma}",
                               ytitle="E_L", logx=True, logy=True)


def law_gap_figure(sigmas, kinds, curves: dict, slopes: dict, *, norm_U: float, active: int) -> go.Figure:
    """:math:`E_L` for several token laws, with a slider over ``sigma``; ``curves`` and ``slopes`` (the fitted
    log-log slopes) are keyed by ``(kind, sigma)``."""
    panels = []
    for sigma in sigmas:
        traces = []
        for color, kind in zip(style.SEQUENCE, kinds):
            curve = curves[(kind, sigma)]
            traces.append(go.Scatter(x=curve.lengths.tolist(), y=curve.output.mean, mode="lines+markers",
                                     line=dict(color=color, width=2.2),
                                     name=f"{kind} (slope {slopes[(kind, sigma)]:.2f})"))
        panels.append((sigma, traces))
    return style.slider_figure(panels, slider_label="σ", active=active, xtitle="prompt length L",
                               title=f"Output gap E_L for {style.in_words(len(kinds))} token laws, ‖U‖ = {norm_U}",
                               ytitle="E_L", logx=True, logy=True)


def gap_figure(curve, title: str) -> go.Figure:
    """The output gap :math:`E_L` of one GapCurve against ``L`` (log-log) with its 95% band (the live panel)."""
    fig = style.new_figure(title, "prompt length L", "E_L", logx=True, logy=True)
    fig.add_traces(_gap_traces(curve, "output", style.COLORS["softmax"], "E_L"))
    return fig
