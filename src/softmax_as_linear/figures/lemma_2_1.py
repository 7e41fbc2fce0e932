"""Builders of Chapter 2's figures: Lemma 2.1 drawn, the tilted measure and the affine map it makes of softmax
attention.

Plane points are ``(n, 2)`` tensors or arrays, drawn with :func:`~softmax_as_linear.figures.geometry.xy`; sliders
switch between precomputed panels, so they work in the rendered book without a kernel. The live panel's builder,
:func:`lemma_figure`, draws the data :func:`~softmax_as_linear.experiments.live_measures.lemma_in_the_plane` computes.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..registry import LAW_NAMES
from . import style
from .geometry import ellipse, plane_axes, xy

_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _tokens(length: int) -> str:
    """``100000`` -> ``10⁵``; other lengths with thousands separators."""
    exponent = len(str(length)) - 1
    return "10" + str(exponent).translate(_SUPERSCRIPTS) if length == 10**exponent and exponent > 1 else f"{length:,}"


def _ellipse_traces(center, cov, n_sds, name: str, line: dict) -> list[go.Scatter]:
    """Contours of ``n_sds`` standard deviations of :math:`N(c, \\Gamma)`, one legend entry."""
    return [go.Scatter(x=xy(ellipse(center, cov, k))[0], y=xy(ellipse(center, cov, k))[1], mode="lines",
                       name=name, showlegend=k == 1, line=line) for k in n_sds]


def tilted_measure_figure(samples, mean, cov, angles, resampled: list, centers: list, *, active: int,
                          x_range, y_range) -> go.Figure:
    """The tilted measure :math:`\\nu_z = N(m + \\Gamma U z, \\Gamma)` of Lemma 2.1 against samples of
    :math:`\\mu = N(m, \\Gamma)`, with a slider over the query's angle.

    ``samples`` ``(n, 2)`` of :math:`\\mu` (mean ``mean`` ``(2,)``, covariance ``cov`` ``(2, 2)``); for each of
    ``angles`` (degrees), ``resampled`` holds the samples redrawn with softmax weights ``(k, 2)`` and ``centers``
    the centre :math:`m + \\Gamma U z` ``(2,)``.
    """
    style.check_count("resampled", resampled, len(angles))
    style.check_count("centers", centers, len(angles))
    fixed = [go.Scatter(x=xy(samples)[0], y=xy(samples)[1], mode="markers", name="samples of μ",
                        marker=dict(color="#bbbbbb", size=4))]
    fixed += _ellipse_traces(mean, cov, (1, 2), "μ = N(m, Γ)", dict(color="#444", width=2))
    panels = []
    for degrees, picked, center in zip(angles, resampled, centers):
        traces = [go.Scatter(x=xy(picked)[0], y=xy(picked)[1], mode="markers", name="resampled with softmax weights",
                             marker=dict(color=style.COLORS["softmax"], size=5, opacity=0.35))]
        traces += _ellipse_traces(center, cov, (1, 2), "N(m + ΓUz, Γ)",
                                  dict(color=style.COLORS["softmax"], width=2.5, dash="dash"))
        panels.append((f"{degrees}°", traces))
    return style.slider_figure(panels, slider_label="query angle", active=active, title="The tilted measure ν_z",
                               xtitle="z′₁", ytitle="z′₂", fixed=fixed, height=520,
                               **plane_axes(x_range, y_range, scaleanchor="x"))


def output_cloud_figure(outputs, predicted_mean, predicted_cov, *, length: int) -> go.Figure:
    """Outputs ``(n, 2)`` of one prompt of ``length`` tokens at ``n`` queries :math:`z \\sim \\mu`, with the 1, 2 and 3
    standard-deviation contours of the predicted Gaussian law (``predicted_mean`` ``(2,)``, ``predicted_cov``
    ``(2, 2)``)."""
    fig = style.new_figure(f"Outputs T[μ̂_L](z) for {len(outputs):,} queries z ~ μ (one prompt, L = {length:,})",
                           "first coordinate", "second coordinate", yaxis=dict(scaleanchor="x"), height=480)
    fig.add_trace(go.Scatter(x=xy(outputs)[0], y=xy(outputs)[1], mode="markers", name="outputs",
                             marker=dict(color=style.COLORS["softmax"], size=4, opacity=0.45)))
    fig.add_traces(_ellipse_traces(predicted_mean, predicted_cov, (1, 2, 3), "predicted Gaussian (1, 2, 3 s.d.)",
                                   dict(color=style.COLORS["theory"], width=2)))
    return fig


def mean_shift_gap_figure(shifts, closed_gap, mc_shifts, mc_gap, mc_se, *, length: int, n_prompts: int) -> go.Figure:
    """:math:`\\|T[\\mu](z) - T_{lin}[\\mu](z)\\|` for the mean :math:`m = t m_0`: the closed form at ``shifts`` and
    prompts of ``length`` tokens (``n_prompts`` per point, two standard errors ``mc_se``) at ``mc_shifts``."""
    style.check_count("closed_gap", closed_gap, len(shifts))
    style.check_count("mc_gap", mc_gap, len(mc_shifts))
    style.check_count("mc_se", mc_se, len(mc_shifts))
    fig = style.new_figure("Softmax minus normalised linear attention, infinite prompt", "t  (mean m = t m₀)",
                           "‖T[μ](z) − T_lin[μ](z)‖")
    fig.add_trace(go.Scatter(x=shifts, y=closed_gap, mode="lines", name="closed form |1 − mᵀUz| ‖Vm‖",
                             line=dict(color=style.COLORS["theory"], width=2.5)))
    fig.add_trace(go.Scatter(x=mc_shifts, y=mc_gap, mode="markers",
                             name=f"prompts of {_tokens(length)} tokens ({n_prompts} per point)",
                             error_y=dict(type="data", array=2 * np.asarray(mc_se)),
                             marker=dict(color=style.COLORS["softmax"], size=9)))
    return fig


def _limit_curve_traces(softmax_curve, linear_curve, softmax_name: str, linear_name: str) -> list[go.Scatter]:
    """The images ``(n, 2)`` of a circle of queries under the softmax and linear limits."""
    return [go.Scatter(x=xy(softmax_curve)[0], y=xy(softmax_curve)[1], mode="lines", name=softmax_name,
                       line=dict(color=style.COLORS["softmax"], width=2.5)),
            go.Scatter(x=xy(linear_curve)[0], y=xy(linear_curve)[1], mode="lines", name=linear_name,
                       line=dict(color=style.COLORS["linear"], width=2.5, dash="dash"))]


def mean_shift_circle_figure(shifts, softmax_curves: list, linear_curves: list, *, radius: float,
                             x_range, y_range) -> go.Figure:
    """Images of the circle :math:`\\|z\\| = r` under the two Gaussian limits, :math:`Vm + V\\Gamma U z` (softmax) and
    :math:`V(\\Gamma + mm^\\top)Uz` (linear), with a slider over ``t`` in :math:`m = t m_0`; one ``(n, 2)`` curve
    per shift in each list."""
    style.check_count("softmax_curves", softmax_curves, len(shifts))
    style.check_count("linear_curves", linear_curves, len(shifts))
    panels = [(f"{t:.2f}", _limit_curve_traces(soft, lin, "softmax: Vm + VΓUz", "linear: V(Γ + mmᵀ)Uz"))
              for t, soft, lin in zip(shifts, softmax_curves, linear_curves)]
    return style.slider_figure(panels, slider_label="t",
                               title=f"Images of the circle ‖z‖ = {radius}, mean m = t m₀",
                               xtitle="first coordinate", ytitle="second coordinate",
                               **plane_axes(x_range, y_range, scaleanchor="x"))


def one_dimensional_figure(z_line, curves: dict, z_quad, quad_points: dict, z_mc, mc_points: dict, mc_errors: dict,
                           *, U, V, length: int) -> go.Figure:
    """:math:`T[\\mu](z)` in dimension 1 for standardised laws: the closed form on ``z_line`` ``(n, 1)``
    (``curves``: kind -> ``(n,)``), quadrature at ``z_quad`` (kind -> ``(k,)``) and prompts of ``length`` tokens
    at ``z_mc`` (kind -> means and standard errors, each ``(j,)``, drawn with two standard errors)."""
    fig = style.new_figure(f"Infinite-prompt softmax attention in dimension 1 (U = {float(U):g}, V = {float(V):g})",
                           "query z", "T[μ](z)")
    for kind in curves:
        show_legend = kind == next(iter(curves))
        fig.add_trace(go.Scatter(x=z_line[:, 0].numpy(), y=np.round(curves[kind].numpy(), 4), mode="lines",
                                 name=LAW_NAMES[kind], legendgroup=kind,
                                 line=dict(color=style.TOKEN_LAW_COLORS[kind], width=2.5)))
        fig.add_trace(go.Scatter(x=z_quad[:, 0].numpy(), y=quad_points[kind].numpy(), mode="markers",
                                 legendgroup=kind, name="quadrature", showlegend=show_legend,
                                 marker=dict(color=style.TOKEN_LAW_COLORS[kind], symbol="circle-open", size=10)))
        fig.add_trace(go.Scatter(x=z_mc[:, 0].numpy(), y=mc_points[kind].numpy(), mode="markers", legendgroup=kind,
                                 name=f"prompts of {_tokens(length)} tokens", showlegend=show_legend,
                                 error_y=dict(type="data", array=2 * mc_errors[kind].numpy()),
                                 marker=dict(color=style.TOKEN_LAW_COLORS[kind], symbol="x", size=8)))
    return fig


def one_dimensional_scale_figure(z_line, u_values, curves: list, *, active: int, y_range) -> go.Figure:
    """:math:`T[\\mu](z)` in dimension 1 for standardised laws, with a slider over ``U``; ``curves`` holds, for each
    of ``u_values``, a dict kind -> values ``(n,)`` on ``z_line`` ``(n, 1)``."""
    style.check_count("curves", curves, len(u_values))
    panels = [(f"{u:.2f}", [go.Scatter(x=z_line[:, 0].numpy(), y=np.round(panel[kind].numpy(), 4), mode="lines",
                                       name=LAW_NAMES[kind], line=dict(color=style.TOKEN_LAW_COLORS[kind], width=2.5))
                            for kind in panel])
              for u, panel in zip(u_values, curves)]
    return style.slider_figure(panels, slider_label="U", active=active,
                               title="T[μ](z) for standardised laws in dimension 1",
                               xtitle="query z", ytitle="T[μ](z)", yaxis=dict(range=list(y_range)))


def lemma_figure(mean, cov, tilted_mean, samples, weighted_mean, quadrature_mean, softmax_curve, linear_curve, outputs,
                 lemma, *, radius: float, length: int) -> go.Figure:
    """The live panel of Lemma 2.1 for a Gaussian :math:`\\mu = N(m, \\Gamma)` in the plane (data:
    :func:`~softmax_as_linear.experiments.live_measures.lemma_in_the_plane`).

    Left: ``samples`` ``(k, 2)`` of :math:`\\mu`, the contours of :math:`\\mu` (``mean`` ``(2,)``, ``cov``
    ``(2, 2)``) and of the tilted :math:`\\nu_z = N(m + \\Gamma U z, \\Gamma)` (``tilted_mean`` ``(2,)``), the
    importance-weighted mean of the tokens and the quadrature mean of :math:`\\nu_z` (each ``(2,)``). Right: the
    softmax and linear limits on the circle ``‖z‖ = radius`` (``(n, 2)`` each), the ``outputs`` ``(p, 2)`` of
    prompts of ``length`` tokens and the lemma's :math:`T[\\mu](z) = Vm + V\\Gamma U z` ``(2,)``.
    """
    n_prompts = len(outputs)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens: μ and the tilted ν_z", "outputs"))
    fig.update_layout(template=style.TEMPLATE, height=460)
    fig.add_trace(go.Scatter(x=xy(samples)[0], y=xy(samples)[1], mode="markers", name="samples of μ",
                             marker=dict(color="#bbbbbb", size=3)), 1, 1)
    for k in (1, 2):
        fig.add_trace(_ellipse_traces(mean, cov, (k,), "μ", dict(color="#444"))[0], 1, 1)
        fig.add_trace(_ellipse_traces(tilted_mean, cov, (k,), "ν_z = N(m + ΓUz, Γ)",
                                      dict(color=style.COLORS["softmax"], dash="dash"))[0], 1, 1)
    fig.add_trace(go.Scatter(x=[float(weighted_mean[0])], y=[float(weighted_mean[1])], mode="markers",
                             name="weighted mean", marker=dict(symbol="x", size=12, color="black")), 1, 1)
    fig.add_trace(go.Scatter(x=[float(quadrature_mean[0])], y=[float(quadrature_mean[1])], mode="markers",
                             name="quadrature", marker=dict(symbol="circle-open", size=16, color="black")), 1, 1)
    fig.add_trace(go.Scatter(x=xy(softmax_curve)[0], y=xy(softmax_curve)[1], mode="lines",
                             name=f"softmax limit on ‖z‖ = {radius:g}",
                             line=dict(color=style.COLORS["softmax"])), 1, 2)
    fig.add_trace(go.Scatter(x=xy(linear_curve)[0], y=xy(linear_curve)[1], mode="lines",
                             name=f"linear limit on ‖z‖ = {radius:g}",
                             line=dict(color=style.COLORS["linear"], dash="dash")), 1, 2)
    fig.add_trace(go.Scatter(x=xy(outputs)[0], y=xy(outputs)[1], mode="markers",
                             name=f"{n_prompts} prompts, L = {length:,}",
                             marker=dict(color=style.COLORS["softmax"], size=5, opacity=0.6)), 1, 2)
    fig.add_trace(go.Scatter(x=[float(lemma[0])], y=[float(lemma[1])], mode="markers", name="T[μ](z), lemma",
                             marker=dict(symbol="star", size=16, color=style.COLORS["softmax"],
                                         line=dict(color="black", width=1))), 1, 2)
    return fig


def query_outputs_figure(scales, softmax_curves: list, linear_curves: list, outputs: list, lemma_outputs: list, *,
                         radius: float, length: int, active: int, x_range, y_range) -> go.Figure:
    """Outputs of prompts of ``length`` tokens at a few queries on the circle :math:`\\|z\\| = r`, their limits (stars)
    and the images of the circle under the softmax and linear limits, with a slider over the scale of ``U``.

    For each of ``scales``: the two images ``(n, 2)``, the outputs ``(k * n_prompts, 2)`` and the limits
    ``(k, 2)`` at the ``k`` queries.
    """
    for name, values in (("softmax_curves", softmax_curves), ("linear_curves", linear_curves),
                         ("outputs", outputs), ("lemma_outputs", lemma_outputs)):
        style.check_count(name, values, len(scales))
    n_queries = len(lemma_outputs[0])
    n_prompts = len(outputs[0]) // n_queries
    panels = []
    for s, soft, lin, dots, stars in zip(scales, softmax_curves, linear_curves, outputs, lemma_outputs):
        limits = _limit_curve_traces(soft, lin, "softmax limit Vm + VΓUz", "linear limit V(Γ + mmᵀ)Uz")
        panels.append((f"{s:.2f}", limits + [
            go.Scatter(x=xy(dots)[0], y=xy(dots)[1], mode="markers", name=f"{n_prompts} prompts, L = {length:,}",
                       marker=dict(color=style.COLORS["softmax"], size=5, opacity=0.5)),
            go.Scatter(x=xy(stars)[0], y=xy(stars)[1], mode="markers", name="T[μ](z), lemma",
                       marker=dict(symbol="star", size=13, color=style.COLORS["softmax"],
                                   line=dict(color="black", width=1)))]))
    title = f"Outputs at {style.in_words(n_queries)} queries on ‖z‖ = {radius}, and the two limits"
    return style.slider_figure(panels, slider_label="scale of U", active=active, title=title,
                               xtitle="first coordinate", ytitle="second coordinate", height=520,
                               **plane_axes(x_range, y_range, scaleanchor="x"))
