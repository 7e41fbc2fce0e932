"""Builders of the course's figures, drawn from the dicts of :mod:`~softmax_as_linear.experiments.paper_figures`
and :mod:`~softmax_as_linear.theory.flow` in the style of :mod:`~softmax_as_linear.figures.style`.

The same builders draw the lecture sweep computed live in a chapter and the paper-scale artifacts
saved by ``python -m softmax_as_linear reproduce figN --preset paper``:

- :func:`final_risk_figure`: paper Figure 2 / 6, final risk against the prompt length ``L``;
- :func:`parameter_gap_figure`: Figure 3 / 7, :math:`\\|\\theta_{soft} - \\theta_{lin}\\|^2` along training;
- :func:`risk_trajectory_figure`: Figure 4 / 8, risk along training, with a slider over ``L``;
- :func:`show_saved`: one of these figures from its paper-scale artifact, or a note saying how to make it;
- :func:`flow_figure`: Theorem 4.3, trajectories at finite ``L`` against the infinite-prompt gradient flow;
- :func:`flow_convergence_figure`, :func:`flow_matrices_figure`: the infinite-prompt flow reaching the
  limit of Remark 5.3;
- :func:`run_figure` (the live panels) and :func:`seed_figure` (one point per seed, diverged runs marked).

Sliders switch between precomputed panels, so they work in the rendered book without a kernel.

Every risk is the theory's :math:`R = \\tfrac12 \\mathrm{MSE}`.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..core import checks
from ..core.stats import seed_summary
from ..experiments.paper_figures import reproduce_command, result_name
from ..registry import PAPER_SEED, TRAINING_FIGURES
from . import style

RISK_AXIS = "risk R = MSE/2 (held-out prompts)"
ACTIVATION_NAMES = {"softmax": "softmax attention", "linear": "linear attention"}


def _values(values) -> np.ndarray:
    """Floats with None for NaN (a gap in a plotly line)."""
    array = np.asarray(values, dtype=float)
    return np.where(np.isnan(array), None, array)


def _diverged_note(data: dict, activation: str) -> str:
    counts = data.get(f"{activation}_diverged")
    total = int(np.sum(counts)) if counts is not None else 0
    return f" ({total} diverged run{'s' if total != 1 else ''} left out)" if total else ""


def _inside_legend(fig: go.Figure, corner: str = "top right") -> go.Figure:
    """Put the legend inside the plotting area (the book's text column is narrow)."""
    y, x = corner.split()
    fig.update_layout(legend=dict(x=0.99 if x == "right" else 0.01, xanchor=x, y=0.99 if y == "top" else 0.01,
                                  yanchor=y, bgcolor="rgba(255,255,255,0.85)", font=dict(size=11)))
    return fig


def _room_for_slider(fig: go.Figure) -> go.Figure:
    """Move the slider below the x-axis title, on room added below, so that the axes keep their height
    (and a long y-axis title stays clear of the figure's title)."""
    fig.layout.sliders[0].pad = dict(t=65)
    margin = fig.layout.margin.b if fig.layout.margin.b is not None else 60
    fig.update_layout(margin=dict(b=125), height=(fig.layout.height or 430) + 125 - margin)
    return fig


#: Seed band of the training figures: the 10 % and 90 % quantiles over seeds, drawn from three seeds on.
BAND_QUANTILES, BAND_MIN_SEEDS = (0.1, 0.9), 3
#: Below this many seeds a 10-90 % band would be an interpolation between two seeds: draw their range.
QUANTILE_BAND_SEEDS = 10
#: Labelled ticks of risk axes (log scale): plain numbers rather than 10^-1 with bare digits around it.
RISK_TICKS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4,
              0.5, 0.7, 1, 1.5, 2, 3, 4, 5, 7, 10, 20, 50, 100, 1000)
_RISK_AXIS_TICKS = dict(tickvals=RISK_TICKS, ticktext=[f"{v:g}" for v in RISK_TICKS])


def _seed_traces(x, per_seed, seeds, color: str, name: str, *, markers: bool = False, width: float = 2.5,
                 legend: bool = True, group: str | None = None) -> list:
    """Median over seeds with a band and the paper's seed 327 highlighted (from three seeds), or the mean
    of one or two seeds. The band is the 10-90 % range of the seeds from ten seeds on, their whole range
    (lowest to highest) below that (:func:`~softmax_as_linear.core.stats.seed_summary`)."""
    values = np.asarray(per_seed, dtype=float)
    mode = "lines+markers" if markers else "lines"
    x = np.asarray(x)
    few = values.shape[0] < QUANTILE_BAND_SEEDS
    summary = seed_summary(values, (0.0, 1.0) if few else BAND_QUANTILES)
    if values.shape[0] < BAND_MIN_SEEDS:
        return [go.Scatter(x=x, y=_values(summary["mean"]), mode=mode, name=name, legendgroup=group,
                           showlegend=legend, line=dict(color=color, width=width), marker=dict(size=8))]
    ok = np.isfinite(summary["low"]) & np.isfinite(summary["high"])
    q_low, q_high = (int(round(100 * q)) for q in BAND_QUANTILES)
    band = f"range of {values.shape[0]} seeds" if few else f"{q_low}-{q_high} % of {values.shape[0]} seeds"
    traces = [style.band(x[ok], summary["low"][ok], summary["high"][ok], color, name=band),
              go.Scatter(x=x, y=_values(summary["median"]), mode=mode,
                         name=f"{name} (median of {values.shape[0]} seeds)",
                         legendgroup=group, showlegend=legend, line=dict(color=color, width=width),
                         marker=dict(size=7))]
    if PAPER_SEED in list(seeds):
        row = values[list(seeds).index(PAPER_SEED)]
        traces.append(go.Scatter(x=x, y=_values(row), mode=mode, name=f"seed {PAPER_SEED} (the paper's)",
                                 legendgroup=group, showlegend=False, line=dict(color=color, width=1, dash="dot"),
                                 marker=dict(size=5, symbol="circle-open")))
    return traces


def provenance_note(data: dict) -> str:
    """One line saying where a saved figure's data came from (device, torch, commit, seeds, sampler, date)."""
    origin = data.get("provenance")
    if not origin:
        return "Provenance: not recorded in this file."
    settings = origin.get("settings", {})
    seeds = settings.get("seeds", data.get("seeds", []))
    device = origin.get("gpu") or origin.get("device_name") or origin.get("device")
    commit = ((origin.get("commit") or "unknown")[:10]
              + (" (with uncommitted changes)" if origin.get("uncommitted_changes") else ""))
    steps = settings.get("steps")
    if not isinstance(steps, int):
        trained = ""
    elif data.get("complete", True):
        trained = f"{steps:,} steps"
    else:
        trained = f"stopped at step {_last_step(data):,} of {steps:,} (partial)"
    # a sweep records its training time (summed over resumptions); a concentration figure its wall time
    spent = (f"{origin['training_seconds']:g} s of training" if "training_seconds" in origin
             else f"{origin.get('wall_seconds', '?')} s wall time")
    count = f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}"
    if len(seeds) >= BAND_MIN_SEEDS:  # how the figure draws them (see _seed_traces)
        q_low, q_high = (int(round(100 * q)) for q in BAND_QUANTILES)
        shaded = "range" if len(seeds) < QUANTILE_BAND_SEEDS else f"{q_low}-{q_high} % range"
        dotted = f"; dotted: seed {PAPER_SEED}" if PAPER_SEED in seeds else ""
        count += f" (lines: their median; shaded: their {shaded}{dotted})"
    parts = [f"{origin.get('preset', '?')} preset", count,
             f"sampler {settings.get('sampler', 'paper')}", trained, f"computed on {device}",
             f"torch {origin.get('torch', '?')}", f"commit {commit}", spent, origin.get("date", "")]
    return "Data: " + ", ".join(p for p in parts if p) + "."


def _level(y: float, name: str, color: str, dash: str, x_range) -> go.Scatter:
    return go.Scatter(x=list(x_range), y=[y, y], mode="lines", name=name, line=dict(color=color, dash=dash, width=1.5))


def final_risk_figure(data: dict, title: str | None = None) -> go.Figure:
    """The course's version of the paper's Figure 2 (isotropic) or 6 (anisotropic) from
    :func:`~softmax_as_linear.experiments.paper_figures.final_risks` data.

    Final held-out risk of each activation against ``L`` (log-log), with the three references: the
    L-Bayes-optimal ridge risk, the best normalised linear attention at that ``L`` and the noise floor
    :math:`s^2/2`. Diverged runs are left out of the means and counted in the legend. With three seeds
    or more, each activation is the median over seeds with a band (the seeds' range, or their 10-90 %
    range from ten seeds on) and the paper's seed 327 dotted; when the data carry the exact risk of the
    trained linear runs (``linear_exact_per_seed``), linear attention is drawn with it, free of sampling
    noise, against the best linear attention at ``L``.
    """
    lengths = data["lengths"]
    title = title or f"Final risk after {data['steps']:,} steps ({data['covariance']} inputs)"
    axis = RISK_AXIS if "final_prompts" not in data else f"risk R = MSE/2 ({data['final_prompts']:,} fresh prompts)"
    fig = style.new_figure(title, "prompt length L", axis, logx=True, logy=True)
    fig.update_xaxes(dtick="D2")  # label 2 and 5 between the decades, not every digit
    fig.update_yaxes(**_RISK_AXIS_TICKS)
    fig.add_trace(_level(data["noise_floor"], "label-noise floor s²/2", style.COLORS["noise"], "dot",
                         (lengths[0], lengths[-1])))
    fig.add_trace(go.Scatter(x=lengths, y=_values(data["bayes"]), mode="lines", name="L-Bayes-optimal (ridge)",
                             line=dict(color=style.COLORS["bayes"], width=2)))
    fig.add_trace(go.Scatter(x=lengths, y=_values(data["optimal_linear"]), mode="lines",
                             name="best linear attention at L", line=dict(color=style.COLORS["optimal_linear"],
                                                                          width=2, dash="dash")))
    seeds = data.get("seeds", [])
    for activation in ("softmax", "linear"):
        if activation not in data:
            continue
        name = f"trained {ACTIVATION_NAMES[activation]}{_diverged_note(data, activation)}"
        per_seed = data.get(f"{activation}_per_seed", [data[activation]])
        if activation == "linear" and "linear_exact_per_seed" in data:
            per_seed, name = data["linear_exact_per_seed"], name + ", exact risk"
        for trace in _seed_traces(lengths, per_seed, seeds, style.COLORS[activation], name, markers=True):
            fig.add_trace(trace)
    return _inside_legend(fig)


def parameter_gap_figure(data: dict, title: str | None = None) -> go.Figure:
    """The course's version of the paper's Figure 3 / 7 from
    :func:`~softmax_as_linear.experiments.paper_figures.parameter_gaps` data: the squared distance between the paired
    softmax and linear parameters along training, one line per ``L`` (log scale; step 0, where
    both start from the same weights, is left out)."""
    steps = np.asarray(data["steps"])
    title = title or f"Softmax and linear training paths ({data['covariance']} inputs)"
    fig = style.new_figure(title, "training step k", "‖θ_soft(k) − θ_lin(k)‖²", logy=True)
    fig.update_xaxes(exponentformat="SI")                                   # 50k rather than 0.5×10⁵
    keep = steps > 0
    per_seed = data.get("gap_per_seed")  # (S, nL, T)
    for index, L in enumerate(data["lengths"]):
        color = style.SEQUENCE[index % len(style.SEQUENCE)]
        rows = np.asarray(per_seed, dtype=float)[:, index] if per_seed is not None else np.asarray([data["gap"][index]])
        for trace in _seed_traces(steps[keep], rows[:, keep], data.get("seeds", []), color, f"L = {L}", width=2):
            fig.add_trace(trace)
    return _inside_legend(fig, "bottom right")


def risk_trajectory_figure(data: dict, title: str | None = None, active: int | None = None) -> go.Figure:
    """The course's version of the paper's Figure 4 / 8 from
    :func:`~softmax_as_linear.experiments.paper_figures.risk_trajectories` data, with a slider over ``L``.

    Each panel shows the held-out risk of both activations along training at one ``L`` and that
    ``L``'s references (Bayes, best linear attention, noise floor). Works without a kernel.
    """
    steps = data["steps"]
    span = (steps[0], steps[-1])
    panels = []
    for index, L in enumerate(data["lengths"]):
        traces = [_level(data["bayes"][index], "L-Bayes-optimal (ridge)", style.COLORS["bayes"], "solid", span),
                  _level(data["optimal_linear"][index], "best linear attention at L", style.COLORS["optimal_linear"],
                         "dash", span)]
        for activation in ("softmax", "linear"):
            if activation in data:
                per_seed = data.get(f"{activation}_per_seed")  # (S, nL, T)
                rows = (np.asarray(per_seed, dtype=float)[:, index] if per_seed is not None
                        else np.asarray([data[activation][index]], dtype=float))
                traces += _seed_traces(steps, rows, data.get("seeds", []), style.COLORS[activation],
                                       ACTIVATION_NAMES[activation], width=2)
        panels.append((str(L), traces))
    floor = _level(data["noise_floor"], "label-noise floor s²/2", style.COLORS["noise"], "dot", span)
    every = [v for a in ("softmax", "linear") if a in data for row in data[a] for v in row if v is not None]
    finite = np.asarray(every, dtype=float)
    finite = finite[np.isfinite(finite) & (finite > 0)]
    top = float(np.log10(finite.max())) + 0.05 if finite.size else 0.0
    bottom = float(np.log10(0.9 * data["noise_floor"]))
    title = title or f"Risk along training ({data['covariance']} inputs)"
    fig = style.slider_figure(panels, slider_label="prompt length L", title=title, xtitle="training step k",
                                ytitle=RISK_AXIS, logy=True, fixed=[floor],
                                active=len(panels) // 2 if active is None else active,
                                yaxis=dict(range=[bottom, top], **_RISK_AXIS_TICKS))
    fig.update_xaxes(exponentformat="SI")
    return _room_for_slider(_inside_legend(fig))


def flow_figure(data: dict, title: str = "Finite-L training against the infinite-prompt gradient flow") -> go.Figure:
    """Theorem 4.3 from :func:`~softmax_as_linear.experiments.analysis.flow_gap` data, with a slider over ``L``.

    Each panel shows, along gradient-flow time :math:`t`, the infinite-prompt risk
    :math:`R_\\infty(\\theta(t))` of the flow and of the runs trained at that ``L`` (all from the same
    initialisation), so that the curves coincide when the finite-prompt dynamics follow the flow.
    """
    times = data["times"]
    fixed = [go.Scatter(x=times, y=_values(data["flow_risk"]), mode="lines", name="infinite-prompt gradient flow",
                        line=dict(color=style.COLORS["flow"], width=5), opacity=0.45)]
    panels = []
    for index, L in enumerate(data["lengths"]):
        traces = [go.Scatter(x=times, y=_values(data["risk"][activation][index]), mode="lines",
                             name=f"{ACTIVATION_NAMES[activation]}, L = {L}",
                             line=dict(color=style.COLORS[activation], width=2))
                  for activation in data["activations"]]
        panels.append((str(L), traces))
    fig = style.slider_figure(panels, slider_label="prompt length L", title=title,
                                xtitle="gradient-flow time t = 2 · lr · k", ytitle="R∞(U(t), V(t))", logy=True,
                                fixed=fixed)
    return _room_for_slider(_inside_legend(fig))


def run_figure(result, references: dict, seed: int | None = None) -> go.Figure:
    """Held-out risk along training of every run of one seed of a sweep (the live panels' figure).

    ``references`` (:func:`~softmax_as_linear.experiments.paper_figures.baselines` at the sweep's lengths): for each
    ``L``, best linear attention and the Bayes risk (dashed, solid), and the noise floor (dotted). A diverged
    run's line stops where it diverged, is named as diverged and marked with a cross; a stopped sweep says so in
    the title.
    """
    cfg = result.config
    seed = cfg.seeds[0] if seed is None else seed
    s = result.index(cfg.models[0], cfg.lengths[0], seed)[0]
    steps = np.asarray(result.steps)
    stopped = "" if result.complete else f", stopped at step {int(steps[-1]):,}"
    fig = style.new_figure(f"{cfg.covariance} inputs, seed {seed}{stopped}", "training step k", RISK_AXIS, logy=True)
    fig.update_yaxes(**_RISK_AXIS_TICKS)
    span = (0, max(int(steps[-1]), 1))
    for key in ("optimal_linear", "bayes"):
        if len(references[key]) != len(cfg.lengths):
            raise ValueError(f"references[{key!r}] must hold one risk per length of the sweep ({len(cfg.lengths)}), "
                             f"got {len(references[key])}")
    fig.add_trace(_level(references["noise_floor"], "label-noise floor s²/2", style.COLORS["noise"], "dot", span))
    for l, L in enumerate(cfg.lengths):
        fig.add_trace(_level(references["optimal_linear"][l], f"best linear attention, L = {L}",
                             style.COLORS["optimal_linear"], "dash", span))
        fig.add_trace(_level(references["bayes"][l], f"Bayes (ridge), L = {L}", style.COLORS["bayes"], "solid", span))
        for a, activation in enumerate(cfg.models):
            risk = result.eval_risk[s, l, a]
            at = int(result.diverged_at[s, l, a])
            label = f"{ACTIVATION_NAMES[activation]}, L = {L}" + (f": DIVERGED at step {at:,}" if at >= 0 else "")
            fig.add_trace(go.Scatter(x=steps, y=_values(risk), mode="lines", name=label,
                                     line=dict(color=style.COLORS[activation], width=2,
                                               dash="solid" if l == 0 else "dashdot")))
            if at >= 0:   # the cross sits on the last finite record, or at the label noise s² when none is
                alive = risk[np.isfinite(risk)]
                fig.add_trace(go.Scatter(x=[at], y=[float(alive[-1]) if alive.size else 2 * references["noise_floor"]],
                                         mode="markers", name=f"{activation} diverged", showlegend=False,
                                         marker=dict(symbol="x", size=14, color=style.COLORS[activation])))
    return _inside_legend(fig)


def flow_convergence_figure(flows: dict, title: str = "Infinite-prompt gradient flow from Assumption 5.1") -> go.Figure:
    """Convergence of infinite-prompt gradient flows to the limit of Remark 5.3 (log scale).

    ``flows`` maps a label to ``(flow, (U*, V*), noise_floor)``: ``flow`` the dict of
    :func:`~softmax_as_linear.theory.flow.infinite_prompt_flow`, ``(U*, V*)`` ``(D, D)`` each its limit (Remark
    5.3's, :func:`~softmax_as_linear.theory.flow_limits.limit_parameters`, or for a degenerate :math:`\\Sigma`
    :func:`~softmax_as_linear.theory.flow_limits.degenerate_limit_parameters`) and ``noise_floor`` :math:`s^2/2`.
    For each, the excess risk :math:`R_\\infty(t) - s^2/2` (solid) and
    :math:`\\|U(t) - U^*\\|_F^2 + \\|V(t) - V^*\\|_F^2` (dashed).
    """
    fig = style.new_figure(title, "gradient-flow time t", "excess risk, squared distance", logy=True)
    for index, (label, (flow, limit, noise_floor)) in enumerate(flows.items()):
        color = style.SEQUENCE[index % len(style.SEQUENCE)]
        U_star, V_star = (np.asarray(m) for m in limit)
        distance = ((flow["U"] - U_star) ** 2).sum((-1, -2)) + ((flow["V"] - V_star) ** 2).sum((-1, -2))
        excess = np.asarray(flow["risk"]) - noise_floor
        floor = 1e-16  # below float64 resolution of these quantities: drawn as a gap
        fig.add_trace(go.Scatter(x=flow["times"], y=_values(np.where(excess > floor, excess, np.nan)), mode="lines",
                                 name=f"R∞ − s²/2, {label}", line=dict(color=color, width=2.5)))
        fig.add_trace(go.Scatter(x=flow["times"], y=_values(np.where(distance > floor, distance, np.nan)),
                                 mode="lines", name=f"‖θ(t) − θ*‖², {label}",
                                 line=dict(color=color, width=2, dash="dash")))
    return _inside_legend(fig)


def flow_matrices_figure(flow: dict, limit, every: int = 1, min_change: float = 0.05,
                         title: str = "U(t) | V(t) along the flow") -> go.Figure:
    """Heat maps of :math:`U(t)` (left) and :math:`V(t)` (right) with a slider over the flow's times, then
    ``limit`` :math:`(U^*, V^*)` ``(D, D)`` each (Remark 5.3's:
    :func:`~softmax_as_linear.theory.flow_limits.limit_parameters`) as the last slider step.

    Of every ``every``-th recorded time, a step is kept only when some entry moved by at least
    ``min_change`` times the colour scale since the last kept step, and differs that much from the
    limit: a slider step that would redraw the same picture is left out.
    """
    if every < 1:
        raise ValueError(f"every must be a positive integer, got {every}")
    if not 0 <= min_change < 1:
        raise ValueError(f"min_change must lie in [0, 1), got {min_change}")

    U_star, V_star = (np.asarray(m) for m in limit)
    D = U_star.shape[0]
    gap = np.full((D, 1), np.nan)
    scale = float(max(np.abs(flow["U"]).max(), np.abs(flow["V"]).max(), np.abs(U_star).max(), np.abs(V_star).max()))

    def heat(U, V):
        z = np.round(np.concatenate([U, gap, V], axis=1), 4)
        return go.Heatmap(z=np.where(np.isnan(z), None, z), zmin=-scale, zmax=scale, colorscale="RdBu",
                          reversescale=True,
                          colorbar=dict(title="entry"), hovertemplate="row %{y}, column %{x}: %{z}<extra></extra>")

    def moved(a, b) -> bool:
        return max(np.abs(a[0] - b[0]).max(), np.abs(a[1] - b[1]).max()) >= min_change * scale

    kept = []
    for t, U, V in list(zip(flow["times"], flow["U"], flow["V"]))[::every]:
        if (not kept or moved((U, V), kept[-1][1:])) and moved((U, V), (U_star, V_star)):
            kept.append((t, U, V))
    panels = [(f"{t:g}", [heat(U, V)]) for t, U, V in kept]
    panels.append(("U*, V*", [heat(U_star, V_star)]))
    ticks = list(range(D)) + list(range(D + 1, 2 * D + 1))
    fig = style.slider_figure(panels, slider_label="t", title=title, height=470,
                                xaxis=dict(tickvals=ticks, ticktext=[str(i + 1) for i in range(D)] * 2, title="column"),
                                yaxis=dict(autorange="reversed", tickvals=list(range(D)),
                                           ticktext=[str(i + 1) for i in range(D)], title="row", scaleanchor="x"))
    return _room_for_slider(fig)


def seed_figure(outcomes: dict, title: str = "Final risk of every seed") -> go.Figure:
    """Final held-out risk of every seed, for several sweeps (e.g. learning rates), from
    :func:`~softmax_as_linear.experiments.analysis.seed_outcomes` dicts; ``outcomes`` maps a label to one of them (first
    ``L`` only).
    A diverged run is drawn as a cross at the top of the axis."""
    fig = style.new_figure(title, "seed", RISK_AXIS, logy=True)
    values = [v for o in outcomes.values() for a in o["final"] for row in o["final"][a] for v in row[:1]]
    values = np.asarray(values, dtype=float)
    top = float(np.nanmax(values)) * 1.6 if np.isfinite(values).any() else 1.0
    symbols = ["circle", "square", "diamond", "triangle-up"]
    for index, (label, o) in enumerate(outcomes.items()):
        for activation, rows in o["final"].items():
            final = np.asarray(rows, dtype=float)[:, 0]
            seeds = np.asarray(o["seeds"])
            color, symbol = style.COLORS[activation], symbols[index % len(symbols)]
            fig.add_trace(go.Scatter(x=seeds, y=_values(final), mode="markers", name=f"{activation}, {label}",
                                     marker=dict(color=color, symbol=symbol, size=10, opacity=0.8)))
            diverged = np.isnan(final)
            if diverged.any():
                fig.add_trace(go.Scatter(x=seeds[diverged], y=[top] * int(diverged.sum()), mode="markers",
                                         name=f"{activation}, {label}: diverged",
                                         marker=dict(color=color, symbol="x", size=13)))
    fig.update_layout(legend=dict(orientation="h", x=0, y=-0.18, yanchor="top"), margin=dict(b=120))
    return fig


BUILDERS = {"final": final_risk_figure, "gap": parameter_gap_figure, "trajectory": risk_trajectory_figure}


def figure_from_data(name: str, data: dict, title: str | None = None) -> go.Figure:
    """The figure of paper figure ``name`` (``"fig2"`` ... ``"fig8"``) from its data dict."""
    return BUILDERS[TRAINING_FIGURES[checks.one_of("name", name, TRAINING_FIGURES)][1]](data, title)


def missing_note(name: str, preset: str = "paper", sampler: str = "paper") -> str:
    """Markdown saying that the artifact of ``name`` (``sampler``: the KMS inputs of Figures 6-8) has not
    been generated, and the command that generates it."""
    return (f"**Figure {name[3:]} at {preset} scale has not been generated yet** "
            f"(no `results/{result_name(name, preset, sampler)}` in this copy of the course). It is written, "
            f"with the other figures of its sweep, by\n\n"
            f"```\n{reproduce_command(name, preset, sampler)}\n```")


def show_saved(name: str, data: dict | None, preset: str = "paper", sampler: str = "paper") -> bool:
    """Show figure ``name`` from ``data``, its saved artifact at ``preset`` scale
    (:func:`~softmax_as_linear.experiments.file_names.saved_figure`; ``sampler``: the KMS inputs of Figures
    6-8), with a line saying where its data came from; or, when ``data`` is None (no artifact), a note with the
    command that generates it.

    Returns True when there was an artifact to show.
    """
    from IPython.display import Markdown, display

    if data is None:
        display(Markdown(missing_note(name, preset, sampler)))
        return False
    partial = "" if data.get("complete", True) else f", partial: training stopped at step {_last_step(data):,}"
    # the course's reproduction (its sampler, R = MSE/2), not the paper's published figure
    drawn = "" if sampler == "paper" else f", {sampler} sampler"
    title = (f"Course reproduction of the paper's Figure {name[3:]}"
             f"<br><sup>{preset} settings{drawn}, R = MSE/2{partial}</sup>")
    style.show(figure_from_data(name, data, title=title))
    display(Markdown(provenance_note(data)))
    return True


def _last_step(data: dict) -> int:
    steps = data["steps"]
    return int(steps[-1] if isinstance(steps, list) else steps)


def concentration_along_training_figure(data: dict, title: str | None = None) -> go.Figure:
    """Section 4's stability of concentration from
    :func:`~softmax_as_linear.experiments.concentration_figures.concentration_along_training` data.

    Along the training time :math:`t`, the mean squared output gap (slider: or gradient gap) between
    finite-``L`` softmax attention and its infinite-prompt limit at the trained parameters, one line
    per evaluation length ``L`` with its confidence band; the dotted line is :math:`\\|U(t)\\|_F`.
    """
    times = data["times"]
    if title is None:
        title = (f"Concentration along training ({data['activation']} run trained at L = {data['trained_length']}, "
                 f"{data['init']} initialisation)")
    names = {"output": "mean squared output gap", "gradient": "mean squared gradient gap"}
    panels = []
    for which, label in names.items():
        traces = []
        for index, L in enumerate(data["lengths"]):
            color = style.SEQUENCE[index % len(style.SEQUENCE)]
            traces.append(style.band(times, data[which]["low"][index], data[which]["high"][index], color))
            traces.append(go.Scatter(x=times, y=data[which]["mean"][index], mode="lines+markers",
                                     name=f"L = {L}", line=dict(color=color, width=2), marker=dict(size=4)))
        panels.append((label, traces))
    norm = go.Scatter(x=times, y=data["norm_U"], mode="lines", name="‖U(t)‖_F (right axis)", yaxis="y2",
                      line=dict(color=style.COLORS["noise"], dash="dot", width=2))
    fig = style.slider_figure(panels, slider_label="gap", title=title, xtitle="gradient-flow time t = 2 · lr · k",
                              ytitle="gap (95% interval over prompts)", logy=True, fixed=[norm],
                              yaxis2=dict(title="‖U‖_F", overlaying="y", side="right", showgrid=False))
    return _room_for_slider(_inside_legend(fig, "bottom right"))


def concentration_gap_figure(data: dict, title: str | None = None) -> go.Figure:
    r"""Figure 1 / 5 (:func:`~softmax_as_linear.experiments.concentration_figures.concentration_figure`): softmax
    against normalised linear attention at the initialisation, against the prompt length, on log-log axes.

    Four curves with their 95% bands: the squared prediction gap, the squared gradient gap in the four
    matrices and in :math:`(U, V)`, and the gradient gap relative to the squared norm of the linear
    model's gradient (dashed; present in files written since it was added). A dotted line marks
    :math:`L = 1000`, the end of the paper's grid. Interval ends below zero are drawn at the bottom of
    the axis (a log axis has no room for them).
    """
    L = np.asarray(data["lengths"], dtype=float)
    covariance = data.get("settings", {}).get("covariance", "isotropic")
    number = {"fig1": 1, "fig5": 5}.get(data.get("figure"), 1)
    if title is None:
        title = f"Course reproduction of Figure {number} ({covariance} inputs, {data.get('preset', '')} preset)"
    fig = style.new_figure(title, "prompt length L", "squared gap (batch MSE = 2R)", logx=True, logy=True)
    series = [("output", "predictions: E(ŷ_soft − ŷ_lin)²", style.COLORS["softmax"], "solid"),
              ("grad_weights", "gradients, four matrices: ‖∇_θ soft − ∇_θ lin‖²", style.COLORS["linear"],
               "solid"),
              ("grad_uv", "gradients in (U, V)", style.COLORS["theory"], "solid"),
              ("relative_grad", "relative gradient gap ‖∇_θ soft − ∇_θ lin‖² / ‖∇_θ lin‖²",
               style.COLORS["linear"], "dash")]
    present = [s for s in series if s[0] in data]
    floor = min(float(np.nanmin(np.asarray(data[key]["mean"], dtype=float))) for key, *_ in present) / 10
    for key, name, color, dash in present:
        est = data[key]
        fig.add_trace(style.band(L, np.maximum(np.asarray(est["low"], dtype=float), floor), est["high"], color))
        fig.add_trace(go.Scatter(x=L, y=est["mean"], mode="lines+markers", name=name,
                                 line=dict(color=color, width=2.2, dash=dash)))
    top = max(max(data[key]["high"]) for key, *_ in present)
    fig.add_trace(go.Scatter(x=[1000, 1000], y=[floor, top], mode="lines", name="end of the paper's grid",
                             line=dict(color=style.COLORS["noise"], dash="dot")))
    return _inside_legend(fig, "bottom left")
