"""The book's plotly style, and the few figure helpers every chapter shares.

Figures are shown with :func:`show`, which stores a small ``<div>`` in the notebook (the rendered
book loads one local copy of plotly.js) together with plotly's own JSON, which JupyterLab renders
natively. Figures whose control should work without a kernel are built with :func:`slider_figure`.
"""
from __future__ import annotations

import base64
import hashlib
import json
import sys
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from ..registry import LAW_KINDS

COLORS = {
    "softmax": "#c0392b",
    "linear": "#1f6f8b",
    "bayes": "#2d2d2d",
    "optimal_linear": "#e0a100",
    "noise": "#8c8c8c",
    "theory": "#6a3d9a",
    "flow": "#6a3d9a",
}
SEQUENCE = ["#1f6f8b", "#c0392b", "#e0a100", "#2e8b57", "#6a3d9a", "#8c564b", "#d45087", "#4d4d4d"]
LAW_COLORS = dict(zip(LAW_KINDS, SEQUENCE))  # one colour per token law, in every chapter

# A self-contained template (no plotly_white base): every stored figure carries its template, so
# keeping it to the few settings the book uses keeps notebooks and pages small.
pio.templates["softmax_as_linear"] = go.layout.Template(
    layout=dict(
        font=dict(family="Inter, Helvetica, Arial, sans-serif", size=13, color="#222"),
        colorway=SEQUENCE,
        paper_bgcolor="white",
        plot_bgcolor="white",
        margin=dict(l=70, r=20, t=60, b=60),
        height=430,
        hovermode="closest",
        legend=dict(bgcolor="rgba(255,255,255,0.8)", borderwidth=0),
        xaxis=dict(showline=True, linecolor="#444", ticks="outside", gridcolor="#e6e6e6", zeroline=False,
                   exponentformat="power",
                   mirror=True),
        yaxis=dict(showline=True, linecolor="#444", ticks="outside", gridcolor="#e6e6e6", zeroline=False,
                   exponentformat="power",
                   mirror=True),
    )
)
TEMPLATE = "softmax_as_linear"


def new_figure(title: str = "", xtitle: str = "", ytitle: str = "", *, logx: bool = False, logy: bool = False,
               **layout) -> go.Figure:
    """An empty figure in the book's style with labelled (optionally logarithmic) axes.

    Its height is set on the figure, not only in the template: JupyterLab's plotly renderer draws a
    figure without its own height 360 px tall, where long axis titles run into the title.
    """
    fig = go.Figure()
    layout.setdefault("height", pio.templates[TEMPLATE].layout.height)
    fig.update_layout(template=TEMPLATE, title=dict(text=title, x=0.01, xanchor="left"), **layout)
    fig.update_xaxes(title_text=xtitle, type="log" if logx else "linear")
    fig.update_yaxes(title_text=ytitle, type="log" if logy else "linear")
    return fig


def _in_colab() -> bool:
    return "google.colab" in sys.modules


def show(fig: go.Figure) -> None:
    """Display ``fig`` compactly: a ``<div>`` for the book plus plotly JSON for JupyterLab.

    The ``<div>`` id is a hash of the figure, so re-executing a notebook gives the same output.
    In Colab, which renders neither, the figure is shown with plotly's Colab renderer.
    """
    from IPython.display import display

    if _in_colab():
        fig.show(renderer="colab")
        return
    spec = _compact(fig.to_plotly_json())
    payload = json.dumps(spec, sort_keys=True)
    div_id = "fig-" + hashlib.sha1(payload.encode()).hexdigest()[:12]
    html = pio.to_html(spec, full_html=False, include_plotlyjs=False, div_id=div_id, validate=False,
                       config={"displaylogo": False, "responsive": True})
    title = fig.layout.title.text or "figure"
    display({"application/vnd.plotly.v1+json": json.loads(payload), "text/html": html,
             "text/plain": f"<plotly figure: {title}>"}, raw=True)


def _compact(value):
    """The figure's JSON with float64 arrays stored as float32 (half the size in notebooks and pages)."""
    if isinstance(value, dict):
        if value.get("dtype") == "f8" and "bdata" in value:
            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.float64).astype(np.float32)
            return {**value, "dtype": "f4", "bdata": base64.b64encode(array.tobytes()).decode()}
        return {k: _compact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_compact(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def slider_figure(panels: Sequence[tuple[str, Sequence[go.BaseTraceType]]], *, slider_label: str,
                  active: int = 0, title: str = "", xtitle: str = "", ytitle: str = "", logx: bool = False,
                  logy: bool = False, fixed: Sequence[go.BaseTraceType] = (), **layout) -> go.Figure:
    """A figure with one slider that switches between precomputed panels, no kernel needed.

    ``panels`` is a list of ``(label, traces)``; the slider step ``label`` shows that panel's traces
    and hides the others. Traces in ``fixed`` are drawn under every panel (stored once, not per
    panel). Axis ranges stay fixed unless given in ``layout``.
    """
    if not panels:
        raise ValueError("panels must hold at least one (label, traces) pair")
    if not 0 <= active < len(panels):
        raise ValueError(f"active must index a panel (0..{len(panels) - 1}), got {active}")
    fig = new_figure(title, xtitle, ytitle, logx=logx, logy=logy, **layout)
    owner = []
    for trace in fixed:
        fig.add_trace(trace)
        owner.append(None)
    for index, (_, traces) in enumerate(panels):
        for trace in traces:
            trace.visible = index == active
            fig.add_trace(trace)
            owner.append(index)
    steps = [dict(method="update", label=str(label),
                  args=[{"visible": [o is None or o == index for o in owner]}])
             for index, (label, _) in enumerate(panels)]
    fig.update_layout(sliders=[dict(active=active, steps=steps, pad=dict(t=50),
                                    currentvalue=dict(prefix=f"{slider_label} = "))],
                      margin=dict(b=110), height=fig.layout.height + 50)  # the slider's room, below the axes
    return fig


def band(x, low, high, color: str, name: str = "", opacity: float = 0.18, showlegend: bool = False) -> go.Scatter:
    """A filled band between ``low`` and ``high`` (for confidence intervals)."""
    x = np.asarray(x)
    return go.Scatter(x=np.concatenate([x, x[::-1]]), y=np.concatenate([np.asarray(high), np.asarray(low)[::-1]]),
                      mode="lines", fill="toself", fillcolor=_rgba(color, opacity), line=dict(width=0), hoverinfo="skip",
                      name=name, showlegend=showlegend)


def _rgba(hex_color: str, alpha: float) -> str:
    hex_color = hex_color.lstrip("#")
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"

