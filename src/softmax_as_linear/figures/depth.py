"""Builders of Chapter 7's figures: token clouds layer by layer, distances to the Gaussian recursion, tail indices.

The data come from :mod:`~softmax_as_linear.theory.depth`; plane points are ``(n, 2)`` tensors or arrays. The
layer slider switches between precomputed panels, so it works in the rendered book without a kernel.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from ..core.stats import Estimate
from . import style
from .geometry import ellipse, xy


def _ellipses(center, cov, name: str, color: str) -> list[go.Scatter]:
    center, cov = torch.as_tensor(np.asarray(center, dtype=float)), torch.as_tensor(np.asarray(cov, dtype=float))
    return [go.Scatter(x=xy(ellipse(center, cov, k))[0], y=xy(ellipse(center, cov, k))[1], mode="lines", name=name,
                       showlegend=k == 1, line=dict(color=color, width=2, dash="solid" if k == 1 else "dot"))
            for k in (1, 2)]


def layer_cloud_figure(tokens, means, covs, queries=None, limit_queries=None, *, length: int, title: str = "",
                       x_range=None, y_range=None) -> go.Figure:
    """Token cloud of one prompt after every layer against the recursion's 1 and 2 standard-deviation ellipses.

    tokens ``(K + 1, n, 2)`` (index 0: the input prompt), means ``(K + 1, 2)``, covs ``(K + 1, 2, 2)``; optionally the
    finite network's queries ``(K + 1, q, 2)`` and the recursion's ``(K + 1, q, 2)`` at the same inputs. A slider picks
    the layer.
    """
    tokens, means, covs = np.asarray(tokens), np.asarray(means), np.asarray(covs)
    if tokens.ndim != 3 or tokens.shape[-1] != 2 or means.shape != (tokens.shape[0], 2) \
            or covs.shape != (tokens.shape[0], 2, 2):
        raise ValueError(f"tokens (K + 1, n, 2), means (K + 1, 2) and covs (K + 1, 2, 2) must agree, got "
                         f"{tokens.shape}, {means.shape}, {covs.shape}")
    if x_range is None or y_range is None:
        low, high = tokens.reshape(-1, 2).min(0), tokens.reshape(-1, 2).max(0)
        pad = 0.05 * (high - low) + 1e-9
        x_range = x_range or (float(low[0] - pad[0]), float(high[0] + pad[0]))
        y_range = y_range or (float(low[1] - pad[1]), float(high[1] + pad[1]))
    panels = []
    for layer in range(tokens.shape[0]):
        traces = [go.Scatter(x=xy(tokens[layer])[0], y=xy(tokens[layer])[1], mode="markers",
                             name=f"tokens of one prompt (L = {length:,})",
                             marker=dict(color=style.COLORS["softmax"], size=4, opacity=0.45))]
        traces += _ellipses(means[layer], covs[layer], "recursion N(m_ℓ, Γ_ℓ), 1 and 2 s.d.",
                            style.COLORS["theory"])
        if queries is not None:
            q, r = np.asarray(queries)[layer], np.asarray(limit_queries)[layer]
            traces.append(go.Scatter(x=xy(q)[0], y=xy(q)[1], mode="markers", name="queries, finite network",
                                     marker=dict(color=style.COLORS["linear"], size=9, symbol="circle-open")))
            traces.append(go.Scatter(x=xy(r)[0], y=xy(r)[1], mode="markers", name="queries, recursion",
                                     marker=dict(color=style.COLORS["theory"], size=7, symbol="x")))
        panels.append((str(layer), traces))
    fig = style.slider_figure(panels, slider_label="layer ℓ", active=len(panels) - 1,
                              title=title or "Tokens after ℓ layers against the Gaussian recursion",
                              xtitle="first coordinate", ytitle="second coordinate",
                              xaxis=dict(range=list(x_range)), yaxis=dict(range=list(y_range), scaleanchor="x"),
                              height=500)
    return style.legend_above(fig, rows=2 if queries is None else 3)


def depth_gap_figure(lengths, estimates: dict[str, Estimate], *, n_prompts: int) -> go.Figure:
    """:math:`E_L` (mean squared distance of the query to the recursion) against ``L`` for each label (K), with the
    intervals of each :class:`~softmax_as_linear.core.stats.Estimate` as bands and a :math:`1/L` guide."""
    return estimates_against_length(lengths, estimates,
                                    title=f"Distance to the infinite-prompt recursion ({n_prompts} prompts per point)",
                                    y_title="E_L = E‖z_q⁽ᴷ⁾(μ̂_L) − z_q⁽ᴷ⁾(μ)‖²")


def estimates_against_length(lengths, estimates: dict[str, Estimate], *, title: str, y_title: str) -> go.Figure:
    """One curve per label against ``L`` on log-log axes: each :class:`~softmax_as_linear.core.stats.Estimate`'s mean
    with its interval as a band, and a :math:`1/L` guide through the first label's first point."""
    lengths = np.asarray(lengths, dtype=float)
    fig = style.new_figure(title, "prompt length L", y_title, logx=True, logy=True)
    for index, (label, est) in enumerate(estimates.items()):
        if est.mean.shape != lengths.shape:
            raise ValueError(f"estimate {label!r} has {est.mean.size} points for {lengths.size} lengths")
        color = style.SEQUENCE[index % len(style.SEQUENCE)]
        fig.add_trace(style.band(lengths, np.maximum(est.low, est.mean * 1e-3), est.high, color))
        fig.add_trace(go.Scatter(x=lengths, y=est.mean, mode="lines+markers", name=label, line=dict(color=color)))
    first = next(iter(estimates.values())).mean[0]
    fig.add_trace(go.Scatter(x=lengths, y=first * lengths[0] / lengths, mode="lines", name="slope −1",
                             line=dict(color=style.COLORS["noise"], dash="dash")))
    return style.legend_below(fig, rows=1 + len(estimates) // 3)


def tail_index_figure(indices: dict[str, np.ndarray]) -> go.Figure:
    """Chapter 3's light-tail index :math:`a_\\ell` of every layer for each family of weights, against the threshold
    1/2."""
    fig = style.new_figure("Light-tail index of each layer", "layer ℓ", "a_ℓ", logy=True)
    for index, (label, values) in enumerate(indices.items()):
        values = np.asarray(values, dtype=float)
        fig.add_trace(go.Scatter(x=np.arange(1, values.size + 1), y=values, mode="lines+markers", name=label,
                                 line=dict(color=style.SEQUENCE[index % len(style.SEQUENCE)])))
    fig.add_hline(y=0.5, line=dict(color=style.COLORS["noise"], dash="dash"),
                  annotation_text="a = 1/2: heavier above", annotation_position="top left")
    return style.legend_below(fig, rows=len(indices))


def separation_figure(finite_gap, finite_se, recursion_gap, *, length: int, n_prompts: int) -> go.Figure:
    """Size of the softmax-minus-linear difference of the query after each layer (tokens of non-zero mean): the finite
    networks on the same prompts (mean norm over ``n_prompts``, two standard errors) and the two recursions (mean
    over the same queries). Arrays ``(K + 1,)``."""
    layers = np.arange(len(recursion_gap))
    # the y title is kept within the axes' height: a longer one ran into the figure's title
    fig = style.new_figure("Softmax and linear networks separate layer by layer", "layer ℓ",
                           "mean ‖z_q⁽ˡ⁾(softmax) − z_q⁽ˡ⁾(linear)‖")
    fig.add_trace(go.Scatter(x=layers, y=recursion_gap, mode="lines+markers", name="the two recursions",
                             line=dict(color=style.COLORS["theory"], width=2.5)))
    fig.add_trace(go.Scatter(x=layers, y=finite_gap, mode="markers", name=f"finite networks, L = {length:,}",
                             error_y=dict(type="data", array=2 * np.asarray(finite_se)),
                             marker=dict(color=style.COLORS["softmax"], size=9)))
    return style.legend_below(fig, rows=2)
