"""Builders of Chapter 8's figures: the tilted limit for nonlinear labels, its concentration, the risks of trained
softmax and linear attention against the references, and the learned window against the prompt length.

The data come from :mod:`~softmax_as_linear.theory.tilted_limit` and from results of
:mod:`~softmax_as_linear.experiments.nonlinear` (``nonlinear_<preset>.json``),
:mod:`~softmax_as_linear.experiments.nonlinear_optima` and :mod:`~softmax_as_linear.experiments.nonlinear_window`.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..experiments.nonlinear import kernel_smoothers
from . import style


def limit_figure(t, target, softmax_limit, linear_limit, finite: dict) -> go.Figure:
    """Predictions along a line of queries :math:`x_q = t e_1`: the task's :math:`f(x_q)`, the two infinite-prompt
    limits, and finite-prompt softmax attention (``finite``: ``{L: predictions}``, each the mean over prompts) as
    markers. All arrays ``(n,)`` over ``t``."""
    fig = style.new_figure("Softmax's limit: a smoothed f at a linear image of the query",
                           "query coordinate t (x_q = t e_1)", "prediction")
    fig.add_trace(go.Scatter(x=t, y=target, mode="lines", name="f(x_q), the conditional mean",
                             line=dict(color=style.COLORS["bayes"], dash="dot", width=2)))
    fig.add_trace(go.Scatter(x=t, y=softmax_limit, mode="lines", name="softmax, L = ∞ (closed form)",
                             line=dict(color=style.COLORS["softmax"], width=3)))
    fig.add_trace(go.Scatter(x=t, y=linear_limit, mode="lines", name="linear attention, L = ∞ (closed form)",
                             line=dict(color=style.COLORS["linear"], dash="dash", width=2)))
    for (L, values), symbol in zip(sorted(finite.items()), ("circle-open", "diamond", "square-open")):
        fig.add_trace(go.Scatter(x=t, y=values, mode="markers", name=f"softmax, L = {L:,} (mean of prompts)",
                                 marker=dict(color=style.COLORS["softmax"], symbol=symbol, size=8)))
    return style.fit_phone(fig)


def gap_figure(lengths, gaps: dict, gap_se: dict) -> go.Figure:
    """The mean squared gap :math:`\\mathbb{E}(\\hat y_L - \\hat y_\\infty)^2` against :math:`L` for each activation
    (``gaps`` and ``gap_se``: ``{activation: (nL,)}``; bars: :math:`\\pm 2` standard errors), with a line of slope -1
    through the first point."""
    lengths = np.asarray(lengths, dtype=float)
    fig = style.new_figure("Finite prompts approach the closed-form limit", "prompt length L",
                           "mean squared gap to the L = ∞ prediction", logx=True, logy=True)
    for name, symbol in (("softmax", "circle"), ("linear", "square")):
        if name not in gaps:
            continue
        y = np.asarray(gaps[name], dtype=float)
        fig.add_trace(go.Scatter(x=lengths, y=y, mode="lines+markers", name=f"{name} attention (±2 s.e.)",
                                 error_y=dict(type="data", array=2 * np.asarray(gap_se[name], dtype=float)),
                                 line=dict(color=style.COLORS[name]), marker=dict(symbol=symbol, size=9)))
        fig.add_trace(go.Scatter(x=lengths, y=y[0] * lengths[0] / lengths, mode="lines",
                                 name=f"slope -1 through the first {name} point",
                                 line=dict(color=style.COLORS[name], dash="dot", width=1)))
    return style.fit_phone(fig)


def risk_figure(data: dict, linear_bound: float | None = None) -> go.Figure:
    """Final risks against :math:`L` of trained softmax and linear attention (mean over seeds, bars from the
    smallest to the largest seed's; softmax over the seeds whose runs read as kernel smoothers at every :math:`L`,
    :func:`~softmax_as_linear.experiments.nonlinear.kernel_smoothers`, the others drawn apart) with the
    :math:`L`-Bayes risk, Nadaraya-Watson at its best :math:`w`, the best affine predictor that knows :math:`f`, the
    noise floor and, when given, ``linear_bound``: the best linear function of the query without
    intercept that knows :math:`f`, below which no linear attention network goes. ``data``: a
    ``nonlinear_<preset>.json`` result."""
    ref, final = data["references"], data["final"]
    lengths = np.asarray(ref["lengths"], dtype=float)
    risk = np.asarray(final["risk"], dtype=float)
    fig = style.new_figure("A nonlinear task: trained attention against the references",
                           "prompt length L", "risk R = MSE/2 on fresh prompts", logx=True, logy=True)
    flat = np.ones_like(lengths)
    if linear_bound is not None:
        fig.add_trace(go.Scatter(x=lengths, y=linear_bound * flat, mode="lines",
                                 name="best linear map of x_q that knows f: linear attention's bound",
                                 line=dict(color=style.COLORS["linear"], dash="dot", width=2)))
    for y, label, color, dash in ((ref["best_affine"] * flat, "best affine predictor that knows f", "optimal_linear",
                                   "dash"),
                                  (ref["nadaraya_watson"], "Nadaraya-Watson, best w at each L", "theory", "dashdot"),
                                  (ref["bayes"], "L-Bayes (Gaussian-process posterior mean)", "bayes", "dot"),
                                  (ref["noise_floor"] * flat, "noise floor s²/2", "noise", "longdash")):
        fig.add_trace(go.Scatter(x=lengths, y=y, mode="lines", name=label,
                                 line=dict(color=style.COLORS[color], dash=dash, width=2)))
    soft = data["models"].index("softmax")
    kept = kernel_smoothers(data["windows"], soft).all(axis=1)  # (S,)
    for a, model in enumerate(data["models"]):
        values = risk[:, :, a]
        if model == "softmax" and kept.any() and not kept.all():
            others = np.flatnonzero(~kept)
            for s in others:
                fig.add_trace(go.Scatter(x=lengths, y=values[s], mode="markers", showlegend=bool(s == others[0]),
                                         name="softmax attention, trained: a seed not a kernel smoother at every L",
                                         marker=dict(color=style.COLORS[model], symbol="x", size=9)))
            values = values[kept]
        which = " kernel-like" if model == "softmax" and kept.any() and not kept.all() else ""
        mean, low, high = (f(values, axis=0) for f in (np.nanmean, np.nanmin, np.nanmax))  # a range: > 0 on a log axis
        seeds = f"{len(values)}{which} seed" + ("s" if len(values) > 1 else "")
        fig.add_trace(go.Scatter(x=lengths, y=mean, mode="lines+markers",
                                 name=f"{model} attention, trained: mean of {seeds} (bars: range)",
                                 error_y=dict(type="data", symmetric=False, array=high - mean, arrayminus=mean - low),
                                 line=dict(color=style.COLORS[model]),
                                 marker=dict(symbol="circle" if model == "softmax" else "square", size=9)))
    return style.fit_phone(fig)


def window_figure(data: dict, heuristic_exponent: float | None = None) -> go.Figure:
    """The final window :math:`w = \\operatorname{tr}(U_{xx})/d` of trained softmax attention against :math:`L` (every
    seed; runs that do not read as kernel smoothers,
    :func:`~softmax_as_linear.experiments.nonlinear.kernel_smoothers`, drawn apart), with the best Nadaraya-Watson
    :math:`w` and, when given, a line of slope ``heuristic_exponent`` through its point at the first :math:`L \\ge 100`
    (the heuristic is for long prompts; its first point, when no length reaches 100). ``data``: a
    ``nonlinear_<preset>.json`` result. No power law is fitted to the trained windows: at a fixed step budget they
    record where training stopped,
    not an optimum."""
    ref, windows = data["references"], data["windows"]
    lengths = np.asarray(ref["lengths"], dtype=float)
    soft = data["models"].index("softmax")
    w = np.asarray(windows["w"], dtype=float)[:, :, soft]
    kept = kernel_smoothers(windows, soft)
    steps = data["config"].get("steps")
    fig = style.new_figure(f"Trained windows ({steps:,} steps) and Nadaraya-Watson's best"
                           if steps else "Trained windows and Nadaraya-Watson's best",
                           "prompt length L", "window w (score w x_iᵀx_q; kernel width 1/√w)", logx=True, logy=True)
    for s, row in enumerate(w):
        fig.add_trace(go.Scatter(x=lengths[kept[s]], y=row[kept[s]], mode="markers",
                                 name="trained softmax, each seed (kernel-like runs)", showlegend=s == 0,
                                 marker=dict(color=style.COLORS["softmax"], symbol="circle-open", size=9)))
    if (~kept).any():
        fig.add_trace(go.Scatter(x=np.broadcast_to(lengths, w.shape)[~kept], y=w[~kept], mode="markers",
                                 name="trained softmax, runs that are not kernel smoothers",
                                 marker=dict(color=style.COLORS["softmax"], symbol="x", size=9)))
    fig.add_trace(go.Scatter(x=lengths, y=ref["nadaraya_watson_w"], mode="lines+markers",
                             name="best Nadaraya-Watson w (grid argmin)",
                             line=dict(color=style.COLORS["theory"], dash="dashdot"),
                             marker=dict(symbol="diamond", size=8)))
    if heuristic_exponent is not None:
        anchor = int(np.searchsorted(lengths, 100.0)) if lengths[-1] >= 100 else 0
        first = float(ref["nadaraya_watson_w"][anchor])
        fig.add_trace(go.Scatter(x=lengths, y=first * (lengths / lengths[anchor]) ** heuristic_exponent, mode="lines",
                                 name=f"slope {heuristic_exponent:.2f} (smooth-f heuristic, through L = "
                                      f"{lengths[anchor]:g})",
                                 line=dict(color=style.COLORS["noise"], dash="dot")))
    return style.fit_phone(fig)


def window_paths_figure(data: dict, seed_index: int = 1) -> go.Figure:
    """Trained softmax attention's window :math:`w` along training, one line per prompt length, for the seed at
    ``seed_index`` of a ``nonlinear_<preset>.json`` result (its ``trajectories["w"]``, ``(S, nL, nA, T)``)."""
    tr, lengths = data["trajectories"], data["references"]["lengths"]
    seeds = data["config"]["seeds"]
    if not 0 <= seed_index < len(seeds):
        raise ValueError(f"seed_index: choose 0 to {len(seeds) - 1}, got {seed_index!r}")
    soft = data["models"].index("softmax")
    paths = np.asarray(tr["w"], dtype=float)[seed_index, :, soft]
    steps = np.asarray(tr["steps"], dtype=float)
    fig = style.new_figure(f"The window along training, seed {seeds[seed_index]}: one line per prompt length",
                           "step", "window w", logy=True)
    dashes = ("dot", "dash", "solid", "dashdot", "longdash", "longdashdot")
    for i, (L, path) in enumerate(zip(lengths, paths)):
        fig.add_trace(go.Scatter(x=steps[1:], y=path[1:], mode="lines", name=f"L = {L:,}",
                                 line=dict(color=style.COLORS["softmax"], dash=dashes[i % len(dashes)],
                                           width=1 + 0.6 * i)))
    return style.fit_phone(fig)


def kernel_figure(angles, labels, weights: dict, query_angle: float, truth=None) -> go.Figure:
    """A prompt on the circle (inputs by their angle, labels as points) with the softmax weights of a few windows
    (``weights``: ``{w: (L,)}``, drawn as bars scaled to the labels' range) around the query's angle."""
    order = np.argsort(angles)
    angles, labels = np.asarray(angles)[order], np.asarray(labels)[order]
    fig = style.new_figure("On the circle, softmax attention is a kernel smoother", "input angle (radians)",
                           "label, and attention weight (scaled)")
    if truth is not None:
        grid, values = truth
        fig.add_trace(go.Scatter(x=grid, y=values, mode="lines", name="f",
                                 line=dict(color=style.COLORS["bayes"], dash="dot")))
    fig.add_trace(go.Scatter(x=angles, y=labels, mode="markers", name="prompt tokens (x_i, y_i)",
                             marker=dict(color=style.COLORS["noise"], size=5)))
    span = float(np.ptp(labels)) or 1.0
    for (w, a), color in zip(sorted(weights.items()), (style.COLORS["linear"], style.COLORS["softmax"],
                                                       style.COLORS["theory"])):
        a = np.asarray(a)[order]
        fig.add_trace(go.Scatter(x=angles, y=labels.min() + span * a / a.max(), mode="lines",
                                 name=f"weights at w = {w:g} (scaled)", line=dict(color=color, width=2)))
    fig.add_vline(x=query_angle, line=dict(color=style.COLORS["bayes"], width=1, dash="dash"))
    return style.fit_phone(fig)


#: The widest band, high / low at ±2 standard errors of log w, of a best window the figures draw as determined.
UNDETERMINED = 4.0


def _log_band(summary: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Geometric-mean window over replicates and its ±2 standard-error band, from ``log_w`` and ``log_w_se``."""
    log_w = np.asarray(summary["log_w"], dtype=float)
    se = np.asarray(summary["log_w_se"], dtype=float)
    return np.exp(log_w), np.exp(log_w - 2 * se), np.exp(log_w + 2 * se)


def optimum_window_figure(optima: dict, data: dict | None = None, settled: dict | None = None) -> go.Figure:
    """The best window of the one-layer softmax layer over all its weights and Nadaraya-Watson's best window against
    :math:`L`, each the geometric mean over independent replicates with a band of :math:`\\pm 2` standard errors of
    :math:`\\log w` (``optima``: a ``nonlinear_optima_<preset>.json`` result); with ``data`` (a
    ``nonlinear_<preset>.json`` result), the trained softmax windows of every seed whose run reads as a kernel
    smoother; with ``settled`` (a ``nonlinear_window_<preset>.json`` result), each seed's window trained on the log
    scale, its geometric mean over the last quarter of training. A best window whose band is wider than
    :data:`UNDETERMINED` (a factor 2 either way), or (the softmax layer's) whose small-set bias the pooled refits do not
    bound within its standard error (:func:`~softmax_as_linear.experiments.optima_precision.bias_bounds`), is drawn as
    an open marker, outside the line and the band: the replicates alone do not determine it."""
    from ..experiments.optima_precision import bias_bounds

    lengths = np.asarray(optima["lengths"], dtype=float)
    bias = bias_bounds(optima)
    fig = style.new_figure("The best windows: the softmax layer's, Nadaraya-Watson's; the trained ones",
                           "prompt length L", "window w (score w x_iᵀx_q; kernel width 1/√w)", logx=True, logy=True)
    for model, label, color, dash, symbol in (("softmax", "best softmax layer (all weights)", "softmax", "solid",
                                               "circle"),
                                              ("nadaraya_watson", "best Nadaraya-Watson (v_y = 1)", "theory",
                                               "dashdot", "diamond")):
        w, low, high = _log_band(optima["summary"][model])
        known = high / low <= UNDETERMINED
        if model == "softmax":
            se = np.asarray(optima["summary"][model]["log_w_se"], dtype=float)
            known &= np.array([bias.get(int(L), 0.0) <= s for L, s in zip(lengths, se)])
        fig.add_trace(style.band(lengths[known], low[known], high[known], style.COLORS[color],
                                 name=f"{label}: ±2 s.e."))
        fig.add_trace(go.Scatter(x=lengths[known], y=w[known], mode="lines+markers",
                                 name=f"{label}, {optima['replicates']} replicates",
                                 error_y=dict(type="data", symmetric=False, array=(high - w)[known],
                                              arrayminus=(w - low)[known]),
                                 line=dict(color=style.COLORS[color], dash=dash), marker=dict(symbol=symbol, size=8)))
        if not known.all():
            fig.add_trace(go.Scatter(x=lengths[~known], y=w[~known], mode="markers",
                                     name=f"{label}: not determined (±2 s.e. beyond ×/÷ 2"
                                          + (", or its bias not bounded)" if model == "softmax" else ")"),
                                     error_y=dict(type="data", symmetric=False, array=(high - w)[~known],
                                                  arrayminus=(w - low)[~known]),
                                     marker=dict(symbol=f"{symbol}-open", size=9, color=style.COLORS[color])))
    if data is not None:
        soft = data["models"].index("softmax")
        trained = np.asarray(data["windows"]["w"], dtype=float)[:, :, soft]
        kept = kernel_smoothers(data["windows"], soft)
        steps = data["config"].get("steps")
        trained_lengths = np.broadcast_to(np.asarray(data["references"]["lengths"], dtype=float), trained.shape)
        fig.add_trace(go.Scatter(x=trained_lengths[kept], y=trained[kept], mode="markers",
                                 name=f"trained softmax, each seed ({steps:,} steps)" if steps else
                                 "trained softmax, each seed",
                                 marker=dict(color=style.COLORS["softmax"], symbol="square-open", size=9)))
    if settled is not None:
        from ..experiments.nonlinear_window import window_levels

        steps = settled["steps"]
        w = window_levels(settled["per_seed"]["w"], steps, steps[-1])["w_final"]  # (S, nL)
        x = np.broadcast_to(np.asarray(settled["lengths"], dtype=float), w.shape)
        fig.add_trace(go.Scatter(x=x.ravel(), y=w.ravel(), mode="markers",
                                 name=f"trained, w on a log scale ({steps[-1]:,} steps), each seed",
                                 marker=dict(color=style.SEQUENCE[4], symbol="x-thin-open", size=11,
                                             line=dict(width=2.5, color=style.SEQUENCE[4]))))
    return style.fit_phone(fig)


def settling_figure(settled: dict, optima: dict | None = None) -> go.Figure:
    """The window along training on the log scale (``settled``: a ``nonlinear_window_<preset>.json`` result), every
    seed, one colour per prompt length, with the step of the learning rate's decay; with ``optima``, each length's
    best window of the layer as a band of :math:`\\pm 2` standard errors in the same colour."""
    steps = np.asarray(settled["steps"], dtype=float)
    w = np.asarray(settled["per_seed"]["w"], dtype=float)  # (S, nL, T)
    fig = style.new_figure("The window trained on the log scale; bands: the layer's best window",
                           "step", "window w", logy=True)
    for i, L in enumerate(settled["lengths"]):
        color = style.SEQUENCE[i % len(style.SEQUENCE)]
        if optima is not None and L in optima["lengths"]:
            j = optima["lengths"].index(L)
            summary = optima["summary"]["softmax"]
            low, high = (np.exp(summary["log_w"][j] + k * 2 * summary["log_w_se"][j]) for k in (-1, 1))
            fig.add_trace(style.band(steps[[0, -1]], [low, low], [high, high], color, name=f"best w*, L = {L:,}",
                                     opacity=0.25))
        for s, path in enumerate(w[:, i]):
            fig.add_trace(go.Scatter(x=steps[1:], y=path[1:], mode="lines", name=f"L = {L:,}", legendgroup=str(L),
                                     showlegend=s == 0, line=dict(color=color, width=1.2)))
    fig.add_vline(x=settled["decay_step"], line=dict(color=style.COLORS["noise"], width=1, dash="dash"))
    return style.fit_phone(fig)


def optimum_risk_figure(optima: dict) -> go.Figure:
    """The held-out risks of the optimised models against :math:`L` (mean over replicates, ±2 standard errors), with
    the :math:`L = \\infty` risks of the best linear map of the query (linear attention's bound), of the best affine
    predictor and the noise floor (``optima``: a ``nonlinear_optima_<preset>.json`` result)."""
    lengths = np.asarray(optima["lengths"], dtype=float)
    limits, summary = optima["limits"], optima["summary"]
    fig = style.new_figure("The best one-layer risks at each L against the L = ∞ references", "prompt length L",
                           "risk R = MSE/2 on fresh prompts", logx=True, logy=True)
    flat = np.ones_like(lengths)
    for y, label, color, dash in ((limits["linear"], "best linear map of x_q (L = ∞): linear attention's bound",
                                   "linear", "dot"),
                                  (limits["affine"], "best affine predictor (L = ∞)", "optimal_linear", "dash"),
                                  (limits["noise_floor"], "noise floor s²/2", "noise", "longdash")):
        fig.add_trace(go.Scatter(x=lengths, y=y * flat, mode="lines", name=label,
                                 line=dict(color=style.COLORS[color], dash=dash, width=2)))
    names = {"softmax": ("best softmax layer", "softmax", "circle"),
             "nadaraya_watson": ("best Nadaraya-Watson", "theory", "diamond"),
             "linear": ("best linear attention", "linear", "square"),
             "affine": ("best linear attention + mean token", "optimal_linear", "triangle-up")}
    for model in optima["models"]:
        label, color, symbol = names[model]
        mean = np.asarray(summary[model]["held_out"], dtype=float)
        se = np.asarray(summary[model]["held_out_se"], dtype=float)
        fig.add_trace(go.Scatter(x=lengths, y=mean, mode="lines+markers", name=f"{label} (±2 s.e.)",
                                 error_y=dict(type="data", array=2 * se), line=dict(color=style.COLORS[color]),
                                 marker=dict(symbol=symbol, size=8)))
    return style.fit_phone(fig)
