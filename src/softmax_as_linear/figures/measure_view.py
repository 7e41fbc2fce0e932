"""Builders of the figures of the measure-view chapters: token clouds, attention outputs, Lemma 2.1, concentration gaps.

Chapters 0 to 3 compute their data with the library's estimators; these builders draw it in the style of
:mod:`~softmax_as_linear.figures.style`. :math:`T[\\hat\\mu_L](z)` is softmax attention of a prompt of ``L`` tokens,
:math:`T[\\mu](z)` its infinite-prompt limit. Plane points are ``(n, 2)`` tensors or arrays, drawn with
:func:`~softmax_as_linear.figures.geometry.xy` (rounded to four decimals so that stored figures stay small). Sliders
switch between precomputed panels, so they work in the rendered book without a kernel. The two live panels'
builders, :func:`measure_view_figure` and :func:`lemma_figure`, draw the data
:mod:`~softmax_as_linear.experiments.live_measures` computes from the setting a widget chooses.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..core import checks
from ..registry import LAW_NAMES
from . import style
from .geometry import ellipse, xy

_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _in_words(count: int) -> str:
    return _WORDS[count] if count < len(_WORDS) else f"{count:,}"


def _tokens(length: int) -> str:
    """``100000`` -> ``10⁵``; other lengths with thousands separators."""
    exponent = len(str(length)) - 1
    return "10" + str(exponent).translate(_SUPERSCRIPTS) if length == 10**exponent and exponent > 1 else f"{length:,}"


def _check_count(name: str, values, expected: int) -> None:
    if len(values) != expected:
        raise ValueError(f"{name} must hold {expected} entries (one per slider step or length), got {len(values)}")


def _plane_axes(x_range, y_range, **yaxis) -> dict:
    return dict(xaxis=dict(range=list(x_range)), yaxis=dict(range=list(y_range), **yaxis))


# --- Chapter 0: the quick tour ---------------------------------------------------------------------------------

def prompt_error_figure(lengths, mean_error, standard_error) -> go.Figure:
    """Mean squared gap :math:`E\\|T[\\hat\\mu_L](z) - T[\\mu](z)\\|^2` against ``L`` (log-log), within two standard
    errors, and a line of slope -1 (the rate 1/L) through the first point.

    ``lengths`` ``(n,)``; ``mean_error`` and ``standard_error`` ``(n,)`` arrays.
    """
    mean_error, standard_error = np.asarray(mean_error, dtype=float), np.asarray(standard_error, dtype=float)
    _check_count("mean_error", mean_error, len(lengths))
    _check_count("standard_error", standard_error, len(lengths))
    fig = style.new_figure("Finite prompt vs infinite prompt", "prompt length L",
                           "E ‖T[μ̂_L](z) − T[μ](z)‖²", logx=True, logy=True)
    fig.add_trace(style.band(lengths, mean_error - 2 * standard_error, mean_error + 2 * standard_error,
                             style.COLORS["softmax"], name="± 2 standard errors", showlegend=True))
    fig.add_trace(go.Scatter(x=lengths, y=mean_error, mode="lines+markers", name="softmax attention",
                             line=dict(color=style.COLORS["softmax"], width=2.5)))
    reference = mean_error[0] * lengths[0] / np.array(lengths, dtype=float)
    fig.add_trace(go.Scatter(x=lengths, y=reference, mode="lines", name="slope −1 (rate 1/L)",
                             line=dict(color=style.COLORS["noise"], dash="dash")))
    return fig


def limit_scatter_figure(lengths, pairs) -> go.Figure:
    """First coordinate of :math:`T[\\hat\\mu_L](z)` against that of :math:`T[\\mu](z)`, one point per prompt, with a
    slider over ``L`` and the diagonal.

    ``pairs`` holds, for each of ``lengths``, the arrays ``(limit, finite)``, each ``(n_prompts,)``.
    """
    _check_count("pairs", pairs, len(lengths))
    span = 1.05 * max(np.abs(np.concatenate(pair)).max() for pair in pairs)
    diagonal = go.Scatter(x=[-span, span], y=[-span, span], mode="lines", name="T[μ̂_L](z) = T[μ](z)",
                          line=dict(color=style.COLORS["noise"], dash="dash"))
    panels = [(f"{L:,}", [go.Scatter(x=limit, y=finite, mode="markers", name="one prompt",
                                      marker=dict(color=style.COLORS["softmax"], size=6, opacity=0.6))])
              for L, (limit, finite) in zip(lengths, pairs)]
    return style.slider_figure(panels, slider_label="prompt length L", title="Finite-prompt output against its limit",
                               xtitle="T[μ](z), first coordinate", ytitle="T[μ̂_L](z), first coordinate",
                               fixed=[diagonal], xaxis=dict(range=[-span, span]), yaxis=dict(range=[-span, span]))


# --- Chapter 1: the measure view ------------------------------------------------------------------------------

def lln_figure(lengths, rms: dict, n_prompts: int) -> go.Figure:
    """RMS of :math:`\\|T[\\hat\\mu_L](z) - T[\\mu](z)\\|` against ``L`` (log-log), one line per token law, and a line
    of slope -1/2 through the Gaussian law's third point.

    ``rms`` maps a law's kind to its ``(len(lengths),)`` RMS over ``n_prompts`` prompts.
    """
    for kind, values in rms.items():
        _check_count(f"rms[{kind!r}]", values, len(lengths))
    fig = style.new_figure("Law of large numbers: finite prompts approach T[μ](z)", "prompt length L",
                           f"RMS of ‖T[μ̂_L](z) − T[μ](z)‖ over {n_prompts} prompts", logx=True, logy=True)
    for kind, values in rms.items():
        fig.add_trace(go.Scatter(x=lengths, y=values, mode="lines+markers", name=LAW_NAMES[kind],
                                 line=dict(color=style.TOKEN_LAW_COLORS[kind], width=2)))
    reference = rms["gaussian"][2] * (np.array(lengths) / lengths[2]) ** -0.5
    fig.add_trace(go.Scatter(x=lengths, y=reference, mode="lines", name="slope −1/2",
                             line=dict(color=style.COLORS["noise"], dash="dash")))
    return fig


def _cloud_traces(points, limit, kind: str, showlegend: bool = True) -> list[go.Scatter]:
    """Outputs ``points`` ``(n, 2)`` of prompts of one law, and their limit ``limit`` ``(2,)`` as a star."""
    x, y = xy(points)
    return [go.Scatter(x=x, y=y, mode="markers", name=LAW_NAMES[kind], legendgroup=kind, showlegend=showlegend,
                       marker=dict(color=style.TOKEN_LAW_COLORS[kind], size=6, opacity=0.6)),
            go.Scatter(x=[float(limit[0])], y=[float(limit[1])], mode="markers", name=f"T[μ](z), {LAW_NAMES[kind]}",
                       legendgroup=kind, showlegend=False,
                       marker=dict(color=style.TOKEN_LAW_COLORS[kind], size=16, symbol="star",
                                   line=dict(color="black", width=1)))]


def cloud_figure(lengths, clouds: dict, limits: dict, *, active: int, x_range, y_range) -> go.Figure:
    """Outputs :math:`T[\\hat\\mu_L](z)` of many prompts around their limit :math:`T[\\mu](z)` (a star), one colour per
    token law, with a slider over ``L``.

    ``clouds`` maps a law's kind to its outputs ``(len(lengths), n_prompts, 2)``; ``limits`` to its limit ``(2,)``.
    """
    for kind, cloud in clouds.items():
        _check_count(f"clouds[{kind!r}]", cloud, len(lengths))
    n_prompts = next(iter(clouds.values())).shape[1]
    panels = [(f"{L:,}", [trace for kind in clouds for trace in _cloud_traces(clouds[kind][i], limits[kind], kind)])
              for i, L in enumerate(lengths)]
    return style.slider_figure(panels, slider_label="L", active=active,
                               title=f"Outputs of {n_prompts} prompts of length L",
                               xtitle="first coordinate of T[μ̂_L](z)", ytitle="second coordinate",
                               **_plane_axes(x_range, y_range))


def circle_image_figure(scales, curves: dict, *, radius: float, active: int, x_range, y_range) -> go.Figure:
    """Images :math:`z \\mapsto T[\\mu](z)` of the circle of queries :math:`\\|z\\| = r`, one curve per token law (the
    Gaussian law's solid: an ellipse), with a slider over the scale of ``U``.

    ``curves`` maps a law's kind to one ``(n, 2)`` image per scale.
    """
    for kind, images in curves.items():
        _check_count(f"curves[{kind!r}]", images, len(scales))
    panels = [(f"{s:.1f}", [go.Scatter(x=xy(curves[kind][i])[0], y=xy(curves[kind][i])[1], mode="lines",
                                       name=LAW_NAMES[kind],
                                       line=dict(color=style.TOKEN_LAW_COLORS[kind], width=2.5,
                                                 dash="solid" if kind == "gaussian" else "dot"))
                            for kind in curves])
              for i, s in enumerate(scales)]
    return style.slider_figure(panels, slider_label="scale of U", active=active,
                               title=f"Image of the circle of queries ‖z‖ = {radius} under z ↦ T[μ](z)",
                               xtitle="first coordinate of T[μ](z)", ytitle="second coordinate",
                               **_plane_axes(x_range, y_range, scaleanchor="x"))


def normalisation_figure(lengths, unnormalised, linear_rms, softmax_rms, n_prompts: int) -> go.Figure:
    """Linear attention without the factor 1/L (its norm grows like ``L``) against normalised linear and softmax
    attention (their distance to the limit decays), log-log; each argument ``(len(lengths),)``."""
    fig = style.new_figure("Linear attention with and without the factor 1/L (Gaussian tokens)",
                           "prompt length L", f"mean over {n_prompts} prompts", logx=True, logy=True)
    for values, name, color in [(unnormalised, "‖Σᵢ (zᵢᵀUz) V zᵢ‖ (no 1/L)", "noise"),
                                (linear_rms, "RMS ‖T_lin[μ̂_L](z) − V M₂ U z‖", "linear"),
                                (softmax_rms, "RMS ‖T[μ̂_L](z) − T[μ](z)‖", "softmax")]:
        _check_count("values", values, len(lengths))
        fig.add_trace(go.Scatter(x=lengths, y=values, mode="lines+markers", name=name,
                                 line=dict(color=style.COLORS[color], width=2)))
    return fig


def measure_view_figure(curve, reference, outputs, limit, *, kind: str, reference_kind: str, length: int) -> go.Figure:
    """The live panel of Chapter 1 (data: :func:`~softmax_as_linear.experiments.live_measures.prompt_against_law`):
    the outputs ``(n, 2)`` of prompts of ``length`` tokens of the law ``kind`` and their limit :math:`T[\\mu](z)`
    ``(2,)``, on the image ``curve`` ``(m, 2)`` of a circle of queries under :math:`T[\\mu]`, drawn with its image
    ``reference`` under the Gaussian law ``reference_kind`` (dashed; left out when the two laws are of the same kind,
    since the two images coincide).
    """
    length = checks.positive_int("length", length)
    fig = style.new_figure(f"{LAW_NAMES[kind]} tokens, L = {length:,}", "first coordinate", "second coordinate",
                           yaxis=dict(scaleanchor="x"))
    if kind != reference_kind:
        fig.add_trace(go.Scatter(x=xy(reference)[0], y=xy(reference)[1], mode="lines",
                                 name="T[μ] on the circle, Gaussian law", line=dict(color="#999", dash="dash")))
    fig.add_trace(go.Scatter(x=xy(curve)[0], y=xy(curve)[1], mode="lines",
                             name=f"T[μ] on the circle, {LAW_NAMES[kind]}",
                             line=dict(color=style.TOKEN_LAW_COLORS[kind])))
    fig.add_traces(_cloud_traces(outputs, limit, kind, showlegend=False))
    return fig


def query_angle_figure(directions, clouds: list, limits: list, curves: dict, *, length: int, radius: float,
                       active: int, x_range, y_range) -> go.Figure:
    """Outputs of prompts of ``length`` tokens of each law around their limits, with a slider over the query's angle,
    over the image of the circle of queries under each law's :math:`T[\\mu]` (thin lines).

    For each of ``directions`` (degrees), ``clouds`` holds a dict kind -> outputs ``(n_prompts, 2)`` and ``limits``
    a dict kind -> limit ``(2,)``; ``curves`` maps a kind to the image of the circle ``(n, 2)``.
    """
    _check_count("clouds", clouds, len(directions))
    _check_count("limits", limits, len(directions))
    fixed = [go.Scatter(x=xy(curve)[0], y=xy(curve)[1], mode="lines", legendgroup=kind, showlegend=False,
                        line=dict(color=style.TOKEN_LAW_COLORS[kind], width=1.5), hoverinfo="skip")
             for kind, curve in curves.items()]
    panels = [(f"{degrees}°", [trace for kind in cloud for trace in _cloud_traces(cloud[kind], limit[kind], kind)])
              for degrees, cloud, limit in zip(directions, clouds, limits)]
    n_prompts = len(next(iter(clouds[0].values())))
    title = f"{n_prompts} prompts of L = {length:,} tokens, queries on the circle ‖z‖ = {radius}"
    return style.slider_figure(panels, slider_label="query angle", active=active, fixed=fixed, title=title,
                               xtitle="first coordinate of T[μ̂_L](z)", ytitle="second coordinate",
                               **_plane_axes(x_range, y_range, scaleanchor="x"))


# --- Chapter 2: Lemma 2.1 -------------------------------------------------------------------------------------

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
    _check_count("resampled", resampled, len(angles))
    _check_count("centers", centers, len(angles))
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
                               **_plane_axes(x_range, y_range, scaleanchor="x"))


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
    _check_count("closed_gap", closed_gap, len(shifts))
    _check_count("mc_gap", mc_gap, len(mc_shifts))
    _check_count("mc_se", mc_se, len(mc_shifts))
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
    _check_count("softmax_curves", softmax_curves, len(shifts))
    _check_count("linear_curves", linear_curves, len(shifts))
    panels = [(f"{t:.2f}", _limit_curve_traces(soft, lin, "softmax: Vm + VΓUz", "linear: V(Γ + mmᵀ)Uz"))
              for t, soft, lin in zip(shifts, softmax_curves, linear_curves)]
    return style.slider_figure(panels, slider_label="t",
                               title=f"Images of the circle ‖z‖ = {radius}, mean m = t m₀",
                               xtitle="first coordinate", ytitle="second coordinate",
                               **_plane_axes(x_range, y_range, scaleanchor="x"))


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
    _check_count("curves", curves, len(u_values))
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
    softmax and linear limits on the circle ``‖z‖ = radius`` (``(n, 2)`` each), the ``outputs`` ``(p, 2)`` of prompts
    of ``length`` tokens and the lemma's :math:`T[\\mu](z) = Vm + V\\Gamma U z` ``(2,)``.
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
        _check_count(name, values, len(scales))
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
    title = f"Outputs at {_in_words(n_queries)} queries on ‖z‖ = {radius}, and the two limits"
    return style.slider_figure(panels, slider_label="scale of U", active=active, title=title,
                               xtitle="first coordinate", ytitle="second coordinate", height=520,
                               **_plane_axes(x_range, y_range, scaleanchor="x"))


# --- Chapter 3: concentration ---------------------------------------------------------------------------------

def _gap_traces(curve, which: str, color: str, name: str, dash: str = "solid", band: bool = True) -> list:
    """The mean of one estimate of a :class:`~softmax_as_linear.theory.concentration.GapCurve` against ``L``, with its 95%
    interval as a band."""
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
                               title=f"Output gap E_L for {_in_words(len(kinds))} token laws, ‖U‖ = {norm_U}",
                               ytitle="E_L", logx=True, logy=True)


def gap_figure(curve, title: str) -> go.Figure:
    """The output gap :math:`E_L` of one GapCurve against ``L`` (log-log) with its 95% band (the live panel)."""
    fig = style.new_figure(title, "prompt length L", "E_L", logx=True, logy=True)
    fig.add_traces(_gap_traces(curve, "output", style.COLORS["softmax"], "E_L"))
    return fig
