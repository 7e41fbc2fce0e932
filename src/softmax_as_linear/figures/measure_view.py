"""Builders of the figures of Chapters 0 and 1: a prompt's tokens and attention outputs against their token law.

Chapters 0 and 1 compute their data with the library's estimators; these builders draw it in the style of
:mod:`~softmax_as_linear.figures.style`. :math:`T[\\hat\\mu_L](z)` is softmax attention of a prompt of ``L`` tokens,
:math:`T[\\mu](z)` its infinite-prompt limit. Plane points are ``(n, 2)`` tensors or arrays, drawn with
:func:`~softmax_as_linear.figures.geometry.xy` (rounded to four decimals so that stored figures stay small). Sliders
switch between precomputed panels, so they work in the rendered book without a kernel. The live panel's builder,
:func:`measure_view_figure`, draws the data :mod:`~softmax_as_linear.experiments.live_measures` computes from the
setting a widget chooses. Chapter 2's figures are in :mod:`~softmax_as_linear.figures.lemma_2_1`, Chapter 3's in
:mod:`~softmax_as_linear.figures.concentration`.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..core import checks
from ..registry import LAW_NAMES
from . import style
from .geometry import plane_axes, xy

# --- Chapter 0: the quick tour ---------------------------------------------------------------------------------

def prompt_error_figure(lengths, mean_error, standard_error) -> go.Figure:
    """Mean squared gap :math:`E\\|T[\\hat\\mu_L](z) - T[\\mu](z)\\|^2` against ``L`` (log-log), within two standard
    errors, and a line of slope -1 (the rate 1/L) through the first point.

    ``lengths`` ``(n,)``; ``mean_error`` and ``standard_error`` ``(n,)`` arrays.
    """
    mean_error, standard_error = np.asarray(mean_error, dtype=float), np.asarray(standard_error, dtype=float)
    style.check_count("mean_error", mean_error, len(lengths))
    style.check_count("standard_error", standard_error, len(lengths))
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
    style.check_count("pairs", pairs, len(lengths))
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
        style.check_count(f"rms[{kind!r}]", values, len(lengths))
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
        style.check_count(f"clouds[{kind!r}]", cloud, len(lengths))
    n_prompts = next(iter(clouds.values())).shape[1]
    panels = [(f"{L:,}", [trace for kind in clouds for trace in _cloud_traces(clouds[kind][i], limits[kind], kind)])
              for i, L in enumerate(lengths)]
    return style.slider_figure(panels, slider_label="L", active=active,
                               title=f"Outputs of {n_prompts} prompts of length L",
                               xtitle="first coordinate of T[μ̂_L](z)", ytitle="second coordinate",
                               **plane_axes(x_range, y_range))


def circle_image_figure(scales, curves: dict, *, radius: float, active: int, x_range, y_range) -> go.Figure:
    """Images :math:`z \\mapsto T[\\mu](z)` of the circle of queries :math:`\\|z\\| = r`, one curve per token law (the
    Gaussian law's solid: an ellipse), with a slider over the scale of ``U``.

    ``curves`` maps a law's kind to one ``(n, 2)`` image per scale.
    """
    for kind, images in curves.items():
        style.check_count(f"curves[{kind!r}]", images, len(scales))
    panels = [(f"{s:.1f}", [go.Scatter(x=xy(curves[kind][i])[0], y=xy(curves[kind][i])[1], mode="lines",
                                       name=LAW_NAMES[kind],
                                       line=dict(color=style.TOKEN_LAW_COLORS[kind], width=2.5,
                                                 dash="solid" if kind == "gaussian" else "dot"))
                            for kind in curves])
              for i, s in enumerate(scales)]
    return style.slider_figure(panels, slider_label="scale of U", active=active,
                               title=f"Image of the circle of queries ‖z‖ = {radius} under z ↦ T[μ](z)",
                               xtitle="first coordinate of T[μ](z)", ytitle="second coordinate",
                               **plane_axes(x_range, y_range, scaleanchor="x"))


def normalisation_figure(lengths, unnormalised, linear_rms, softmax_rms, n_prompts: int) -> go.Figure:
    """Linear attention without the factor 1/L (its norm grows like ``L``) against normalised linear and softmax
    attention (their distance to the limit decays), log-log; each argument ``(len(lengths),)``."""
    fig = style.new_figure("Linear attention with and without the factor 1/L (Gaussian tokens)",
                           "prompt length L", f"mean over {n_prompts} prompts", logx=True, logy=True)
    for values, name, color in [(unnormalised, "‖Σᵢ (zᵢᵀUz) V zᵢ‖ (no 1/L)", "noise"),
                                (linear_rms, "RMS ‖T_lin[μ̂_L](z) − V M₂ U z‖", "linear"),
                                (softmax_rms, "RMS ‖T[μ̂_L](z) − T[μ](z)‖", "softmax")]:
        style.check_count("values", values, len(lengths))
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
    style.check_count("clouds", clouds, len(directions))
    style.check_count("limits", limits, len(directions))
    fixed = [go.Scatter(x=xy(curve)[0], y=xy(curve)[1], mode="lines", legendgroup=kind, showlegend=False,
                        line=dict(color=style.TOKEN_LAW_COLORS[kind], width=1.5), hoverinfo="skip")
             for kind, curve in curves.items()]
    panels = [(f"{degrees}°", [trace for kind in cloud for trace in _cloud_traces(cloud[kind], limit[kind], kind)])
              for degrees, cloud, limit in zip(directions, clouds, limits)]
    n_prompts = len(next(iter(clouds[0].values())))
    title = f"{n_prompts} prompts of L = {length:,} tokens, queries on the circle ‖z‖ = {radius}"
    return style.slider_figure(panels, slider_label="query angle", active=active, fixed=fixed, title=title,
                               xtitle="first coordinate of T[μ̂_L](z)", ytitle="second coordinate",
                               **plane_axes(x_range, y_range, scaleanchor="x"))
