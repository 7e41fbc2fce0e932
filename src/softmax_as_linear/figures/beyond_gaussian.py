"""Builders of Chapter 6's figures (covariate laws beyond the Gaussian), from the dicts of
:mod:`~softmax_as_linear.experiments.beyond_gaussian` and :mod:`~softmax_as_linear.theory.flow`:

- :func:`tilted_entry_figure`: the tilted mean :math:`k'_\\lambda(b)` of one input entry, per law;
- :func:`limit_gap_figure`: finite-:math:`L` softmax attention against its closed-form infinite-prompt output;
- :func:`block_flow_figure`: the infinite-prompt flows from Assumption 5.1, per law (excess risk and :math:`v_y`);
- :func:`tracking_figure`: Theorem 4.3 against :math:`L` (distance of each run to its infinite-prompt run);
- :func:`tracking_time_figure`: the same distances along training, with a slider over :math:`L`;
- :func:`final_figure`: the final risks against the references under the law;
- :func:`show_saved`: the paper-scale result of a law, or a note saying how to compute it.

Sliders switch between precomputed panels, so every figure works in the rendered book without a kernel.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..experiments.beyond_gaussian import reproduce_command, result_name
from ..registry import COVARIATE_NAMES
from . import style
from .paper import _RISK_AXIS_TICKS, _inside_legend, _room_for_slider, _seed_traces, _values, provenance_note

ACTIVATION_LABELS = {"softmax": "softmax attention", "linear": "linear attention"}


def tilted_entry_figure(b, means: dict, title: str = "Tilted mean of one input entry") -> go.Figure:
    """:math:`k'_\\lambda(b)` against :math:`b` for each law of ``means`` (covariate law -> values at ``b``)."""
    fig = style.new_figure(title, "tilt b", "k′(b): mean of ξ weighted by exp(bξ)")
    for covariates, values in means.items():
        fig.add_trace(go.Scatter(x=list(b), y=_values(values), mode="lines", name=COVARIATE_NAMES[covariates],
                                 line=dict(color=style.COVARIATE_COLORS[covariates], width=2.5)))
    return _inside_legend(fig, "top left")


def limit_gap_figure(data: dict, title: str = "Finite prompts against the closed-form limit") -> go.Figure:
    """:math:`L\\,\\mathbb{E}(\\hat y_L - \\hat y_\\infty)^2` against :math:`L` for each law of ``data``
    (covariate law -> ``{"lengths", "scaled", "low", "high", "constant", "constant_se"}``), with the delta-method limit
    :math:`\\mathbb{E}[C]` dashed: the curves flatten at it when the rate is :math:`1/L`."""
    fig = style.new_figure(title, "prompt length L", "L × E(ŷ_L − ŷ∞)²", logx=True, logy=True)
    for covariates, row in data.items():
        color = style.COVARIATE_COLORS[covariates]
        lengths = row["lengths"]
        fig.add_trace(style.band(lengths, row["low"], row["high"], color))
        fig.add_trace(go.Scatter(x=lengths, y=_values(row["scaled"]), mode="lines+markers",
                                 name=f"{COVARIATE_NAMES[covariates]}: measured (95 % interval)",
                                 line=dict(color=color, width=2.5)))
        fig.add_trace(go.Scatter(x=[lengths[0], lengths[-1]], y=[row["constant"]] * 2, mode="lines",
                                 name=f"{COVARIATE_NAMES[covariates]}: delta-method limit E[C]",
                                 line=dict(color=color, dash="dash")))
    return _inside_legend(fig, "bottom right")


def block_flow_figure(flows: dict, drift: dict | None = None, noise_var: float = 0.1,
                      title: str = "Infinite-prompt flows from Assumption 5.1") -> go.Figure:
    """Excess risk :math:`R_\\infty(t) - s^2/2` (solid, left axis) and :math:`v_y(t)` (dotted, right axis) of the flows
    of :func:`~softmax_as_linear.theory.flow.infinite_prompt_flow` (covariate law -> flow), with the uniform law's drift
    asymptotics (:func:`~softmax_as_linear.theory.flow.drift_asymptotics`) dashed."""
    fig = style.new_figure(title, "gradient-flow time t", "R∞(t) − s²/2", logx=True, logy=True)
    fig.update_layout(yaxis2=dict(title="v_y(t)", overlaying="y", side="right", type="log", showgrid=False),
                      margin=dict(r=70))
    for covariates, flow in flows.items():
        times = np.asarray(flow["times"])
        keep = times > 0
        excess = np.asarray(flow["risk"]) - noise_var / 2
        color = style.COVARIATE_COLORS[covariates]
        fig.add_trace(go.Scatter(x=times[keep], y=_values(np.where(excess > 1e-15, excess, np.nan)[keep]), mode="lines",
                                 name=f"{COVARIATE_NAMES[covariates]}: R∞ − s²/2",
                                 line=dict(color=color, width=2.5)))
        fig.add_trace(go.Scatter(x=times[keep], y=_values(np.asarray(flow["V"])[keep, -1, -1]), mode="lines",
                                 name=f"{COVARIATE_NAMES[covariates]}: v_y", yaxis="y2",
                                 line=dict(color=color, dash="dot")))
    if drift is not None:
        fig.add_trace(go.Scatter(x=drift["times"], y=_values(drift["excess"]), mode="lines",
                                 name="uniform, predicted K(24Kt)^(−2/3)", line=dict(color="#444", dash="dash")))
    return style.legend_below(fig, rows=4)


def tracking_figure(tracking: dict, title: str | None = None) -> go.Figure:
    """Theorem 4.3 against :math:`L` from :func:`~softmax_as_linear.experiments.beyond_gaussian.limit_tracking` data.

    Per activation, :math:`\\sup_{t \\le T}\\|\\theta_L(t) - \\theta_\\infty(t)\\|^2` (each run against the
    infinite-prompt run of its own activation; median and range over seeds); the distance between the two
    infinite-prompt runs (softmax's limit against linear attention's), and the paper's Figure-3 distance
    :math:`\\sup_t\\|\\theta^{\\mathrm{soft}}_L - \\theta^{\\mathrm{lin}}_L\\|^2`, which cannot fall below it.
    """
    lengths, seeds = tracking["lengths"], tracking["seeds"]
    name = COVARIATE_NAMES[tracking["covariates"]]
    title = title or f"Distance to the infinite-prompt run, {name} covariates (t ≤ {tracking['horizon']:g})"
    fig = style.new_figure(title, "prompt length L", "sup over t of the squared distance", logx=True, logy=True)
    for activation in ("softmax", "linear"):
        for trace in _seed_traces(lengths, tracking["sup"][activation], seeds, style.COLORS[activation],
                                  f"{ACTIVATION_LABELS[activation]} – its limit", markers=True):
            fig.add_trace(trace)
    paired = np.asarray(tracking["paired"])[..., np.asarray(tracking["times"]) <= tracking["horizon"] + 1e-12].max(-1)
    for trace in _seed_traces(lengths, paired, seeds, style.COLORS["optimal_linear"],
                              "softmax – linear, same L (Figure 3)",
                              markers=True, width=1.5):
        fig.add_trace(trace)
    limits = np.asarray(tracking["limits_sup"])
    fig.add_trace(style.band([lengths[0], lengths[-1]], [limits.min()] * 2, [limits.max()] * 2, style.COLORS["theory"],
                             name="softmax limit – linear limit (range of seeds)", showlegend=True))
    return style.legend_below(fig, rows=4)


def tracking_time_figure(tracking: dict, seed_index: int = 0, title: str | None = None) -> go.Figure:
    """The distances of :func:`tracking_figure` along training for one seed, with a slider over :math:`L`."""
    times = np.asarray(tracking["times"])
    keep = times > 0
    seed = tracking["seeds"][seed_index]
    limits = np.asarray(tracking["limits"])[seed_index]
    fixed = [go.Scatter(x=times[keep], y=_values(limits[keep]), mode="lines", name="softmax limit – linear limit",
                        line=dict(color=style.COLORS["theory"], width=4), opacity=0.5)]
    panels = []
    for l, L in enumerate(tracking["lengths"]):
        traces = [go.Scatter(x=times[keep], y=_values(np.asarray(tracking["distance"][a])[seed_index, l][keep]),
                             mode="lines", name=f"{ACTIVATION_LABELS[a]} at L = {L} – its limit",
                             line=dict(color=style.COLORS[a], width=2)) for a in ("softmax", "linear")]
        traces.append(go.Scatter(x=times[keep], y=_values(np.asarray(tracking["paired"])[seed_index, l][keep]),
                                 mode="lines", name=f"softmax – linear at L = {L}",
                                 line=dict(color=style.COLORS["optimal_linear"], width=1.5, dash="dash")))
        panels.append((str(L), traces))
    title = title or (f"Squared distances along training ({COVARIATE_NAMES[tracking['covariates']]} covariates, "
                      f"seed {seed})")
    fig = style.slider_figure(panels, slider_label="prompt length L", active=len(panels) - 1, title=title,
                              xtitle="gradient-flow time t = 2 · lr · k", ytitle="squared distance", logx=True,
                              logy=True, fixed=fixed)
    return _room_for_slider(_inside_legend(fig, "bottom right"))


def final_figure(final: dict, title: str | None = None) -> go.Figure:
    """Final risks on fresh prompts against :math:`L` from
    :func:`~softmax_as_linear.experiments.beyond_gaussian.final_comparison` data: trained softmax attention (fresh
    prompts) and linear attention (exact risk), against the :math:`L`-Bayes risk, the best linear attention under
    the law (and, dotted, under Gaussian covariates) and the floor :math:`s^2/2`."""
    lengths, seeds = final["lengths"], final["seeds"]
    name = COVARIATE_NAMES[final["covariates"]]
    title = title or f"Final risk, {name} covariates"
    fig = style.new_figure(title, "prompt length L", f"risk R = MSE/2 ({final['final_prompts']:,} fresh prompts)",
                           logx=True, logy=True)
    fig.update_yaxes(**_RISK_AXIS_TICKS)
    span = [lengths[0], lengths[-1]]
    fig.add_trace(go.Scatter(x=span, y=[final["noise_floor"]] * 2, mode="lines", name="label-noise floor s²/2",
                             line=dict(color=style.COLORS["noise"], dash="dot")))
    fig.add_trace(go.Scatter(x=lengths, y=_values(final["bayes"]), mode="lines", name=f"L-Bayes (ridge), {name} inputs",
                             line=dict(color=style.COLORS["bayes"], width=2)))
    fig.add_trace(go.Scatter(x=lengths, y=_values(final["optimal_linear"]), mode="lines",
                             name=f"best linear attention, {name} inputs",
                             line=dict(color=style.COLORS["optimal_linear"], width=2, dash="dash")))
    fig.add_trace(go.Scatter(x=lengths, y=_values(final["optimal_linear_gaussian"]), mode="lines",
                             name="best linear attention, Gaussian inputs",
                             line=dict(color=style.COLORS["optimal_linear"], width=1, dash="dot")))
    for trace in _seed_traces(lengths, final["risk"]["softmax"], seeds, style.COLORS["softmax"],
                              "trained softmax attention",
                              markers=True):
        fig.add_trace(trace)
    for trace in _seed_traces(lengths, final["linear_exact"], seeds, style.COLORS["linear"],
                              "trained linear attention, exact risk", markers=True):
        fig.add_trace(trace)
    return _inside_legend(fig)


def missing_note(covariates: str, preset: str = "paper") -> str:
    """Markdown saying that the result of the covariate law ``covariates`` at ``preset`` scale has not been computed,
    and how to compute it."""
    return (f"**Chapter 6 at {preset} scale has not been computed for {COVARIATE_NAMES[covariates]} covariates** "
            f"(no `results/{result_name(covariates, preset)}` in this copy of the course). It is written by\n\n"
            f"```\n{reproduce_command(covariates, preset)}\n```\n\n(about a minute per law expected on one GPU, not "
            "yet measured; "
            "see the script's help for a CPU run).")


def show_saved(covariates: str, data: dict | None, preset: str = "paper") -> dict | None:
    """Show the tracking and final-risk figures of ``data``, the saved result of the covariate law ``covariates`` at
    ``preset`` scale (:func:`~softmax_as_linear.experiments.beyond_gaussian.saved_result`), with a line saying where its
    data came from; or, when ``data`` is None, the note of :func:`missing_note`. Returns ``data``."""
    from IPython.display import Markdown, display

    if data is None:
        display(Markdown(missing_note(covariates, preset)))
        return None
    partial = "" if data.get("complete", True) else ", partial"
    style.show(tracking_figure(data["tracking"],
                               title=f"Distance to the infinite-prompt run, {COVARIATE_NAMES[covariates]} "
                               f"covariates<br><sup>{preset} settings{partial}</sup>"))
    style.show(final_figure(data["final"], title=f"Final risk, {COVARIATE_NAMES[covariates]} covariates"
                            f"<br><sup>{preset} settings{partial}</sup>"))
    display(Markdown(provenance_note({**data, "seeds": data["tracking"]["seeds"]})))
    return data
