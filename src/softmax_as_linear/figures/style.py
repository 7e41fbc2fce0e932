"""The book's plotly style, and the few figure helpers every chapter shares.

Figures are shown with :func:`show`, which stores a small ``<div>`` in the notebook (the rendered
book loads one local copy of plotly.js) together with plotly's own JSON, which JupyterLab renders
natively. The ``<div>`` sits in a ``<figure>`` named by the figure's title and captioned with what
it shows (:func:`describe`), its text alternative. Figures whose control should work without a
kernel are built with :func:`slider_figure`; the book lets the keyboard move their slider.

The colours that carry meaning (softmax and linear attention, the references, the laws) stay apart
for readers with protanopia, deuteranopia or tritanopia: softmax and linear attention are the
vermilion and blue of Okabe and Ito's palette, and the laws (the token laws of Chapters 1-3,
:data:`TOKEN_LAW_COLORS`, and the covariate laws of Chapter 6, :data:`COVARIATE_COLORS`, which gives Gaussian and
uniform inputs the colours of Gaussian and uniform tokens) differ by at least 20 CIELAB units under each of the
three (``tests/figures/test_style.py`` checks both).
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import sys
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from ..registry import LAW_KINDS

COLORS = {
    "softmax": "#d55e00",         # vermilion
    "linear": "#0072b2",          # blue
    "bayes": "#2d2d2d",           # the references also differ by their dash (solid, dashed, dotted)
    "optimal_linear": "#8c564b",
    "noise": "#8c8c8c",
    "theory": "#332288",
    "flow": "#332288",
}
# Token laws first (TOKEN_LAW_COLORS), then further series; every colour has a contrast of at least 3:1 on white.
SEQUENCE = ["#0072b2", "#d55e00", "#332288", "#8c564b", "#009e73", "#cc79a7", "#999933", "#4d4d4d"]
#: One colour per token law of Chapters 1-3 (:data:`~softmax_as_linear.registry.LAW_KINDS`).
TOKEN_LAW_COLORS = dict(zip(LAW_KINDS, SEQUENCE))
#: One colour per covariate law of Chapter 6 (:data:`~softmax_as_linear.registry.COVARIATES`): Gaussian and uniform
#: inputs keep the colours of Gaussian and uniform tokens, so that a name has one colour in every chapter; Rademacher
#: takes reddish purple, the next colour that stays 20 CIELAB units from the token laws' under deuteranopia, where
#: green does not.
COVARIATE_COLORS = {"gaussian": TOKEN_LAW_COLORS["gaussian"], "uniform": TOKEN_LAW_COLORS["uniform"],
                    "rademacher": SEQUENCE[5]}

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
    """Display ``fig`` compactly: a ``<div>`` for the book (with its text alternative) plus plotly JSON
    for JupyterLab.

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
    div = pio.to_html(spec, full_html=False, include_plotlyjs=False, div_id=div_id, validate=False,
                      config={"displaylogo": False, "responsive": True})
    title = fig.layout.title.text or "figure"
    display({"application/vnd.plotly.v1+json": json.loads(payload), "text/html": accessible_figure(div, spec, div_id),
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


def legend_below(fig: go.Figure, rows: int) -> go.Figure:
    """Put the legend under the x-axis title, horizontal, on ``rows`` lines of room added below the axes (the axes
    keep their height): at a phone's width a legend at the right would take half of it from the axes, and one
    inside them would hide data. ``rows``: the lines the legend takes in the book's text column."""
    room = 30 + 22 * rows
    margin = fig.layout.margin.b if fig.layout.margin.b is not None else 60
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.16, yanchor="top",
                                  bgcolor="rgba(255,255,255,0)", font=dict(size=11)),
                      margin=dict(b=margin + room), height=(fig.layout.height or 430) + room)
    return fig


def legend_above(fig: go.Figure, rows: int) -> go.Figure:
    """Put the legend between the title and the axes, horizontal, on ``rows`` lines of room added above the axes
    (for a figure whose slider holds the room below them); the title moves to the top edge."""
    room = 10 + 22 * rows
    margin = fig.layout.margin.t if fig.layout.margin.t is not None else 60
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom",
                                  bgcolor="rgba(255,255,255,0)", font=dict(size=11)),
                      title=dict(y=1, yanchor="top", yref="container", pad=dict(t=12)),
                      margin=dict(t=margin + room), height=(fig.layout.height or 430) + room)
    return fig


#: A phone's text column (about 350 px): characters per line of a title at :data:`TITLE_SIZE` px, and of a legend
#: entry at the legend's 11 px, that fit it (about 8.5 and 6 px per character of Inter or Helvetica).
TITLE_SIZE, TITLE_CHARS, LEGEND_CHARS = 16, 38, 46
#: Pixels per character of an axis title at the template's 13 px, and per line of a wrapped title.
AXIS_CHAR_PX, TITLE_LINE_PX = 7.4, 22


def wrap(text: str, width: int) -> str:
    """``text`` with ``<br>`` between words so that no line is longer than ``width`` characters (a word longer than
    that stays whole, on its own line); an existing ``<br>`` is kept."""
    lines = []
    for part in re.split(r"<br\s*/?>", text):
        line = ""
        for word in part.split():
            if line and len(_plain(line + " " + word)) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "<br>".join(lines)


def fit_phone(fig: go.Figure) -> go.Figure:
    """A figure that reads at a phone's width as at a desktop's: its title wrapped onto lines of at most
    :data:`TITLE_CHARS` characters (at :data:`TITLE_SIZE` px, the top margin grown by a line for each), its y-axis
    title on two lines when one would run past the axes' height, and its legend below the axes
    (:func:`legend_below`), each entry wrapped at :data:`LEGEND_CHARS` characters and counted as rows by its lines."""
    layout = fig.layout
    title = wrap(layout.title.text or "", TITLE_CHARS)
    extra = title.count("<br>") * TITLE_LINE_PX
    top = layout.margin.t if layout.margin.t is not None else 60
    height = (layout.height or 430) + extra
    fig.update_layout(title=dict(text=title, font=dict(size=TITLE_SIZE)), margin=dict(t=top + extra), height=height)
    axes_height = height - (top + extra) - (layout.margin.b if layout.margin.b is not None else 60)
    ytitle = layout.yaxis.title.text or ""
    if ytitle and "<br>" not in ytitle and len(_plain(ytitle)) * AXIS_CHAR_PX > axes_height:
        left = layout.margin.l if layout.margin.l is not None else 70
        words = ytitle.split(" ")
        cut = min(range(1, len(words)), key=lambda k: max(len(" ".join(words[:k])), len(" ".join(words[k:]))),
                  default=len(words))
        fig.update_yaxes(title_text=" ".join(words[:cut]) + "<br>" + " ".join(words[cut:]))
        fig.update_layout(margin=dict(l=left + 16))
    rows = 0
    for trace in fig.data:
        if trace.showlegend is False or not trace.name:
            continue
        trace.name = wrap(trace.name, LEGEND_CHARS)
        rows += trace.name.count("<br>") + 1
    return legend_below(fig, rows) if rows else fig


_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def in_words(count: int) -> str:
    """A count in words up to ten (``"three"``), in figures beyond (``"1,000"``)."""
    return _WORDS[count] if count < len(_WORDS) else f"{count:,}"


def check_count(name: str, values, expected: int) -> None:
    """A ``ValueError`` naming ``name`` unless it holds ``expected`` entries (one per slider step or length)."""
    if len(values) != expected:
        raise ValueError(f"{name} must hold {expected} entries (one per slider step or length), got {len(values)}")


def band(x, low, high, color: str, name: str = "", opacity: float = 0.18, showlegend: bool = False) -> go.Scatter:
    """A filled band between ``low`` and ``high`` (for confidence intervals)."""
    x = np.asarray(x)
    return go.Scatter(x=np.concatenate([x, x[::-1]]), y=np.concatenate([np.asarray(high), np.asarray(low)[::-1]]),
                      mode="lines", fill="toself", fillcolor=_rgba(color, opacity), line=dict(width=0),
                      hoverinfo="skip", name=name, showlegend=showlegend)


def _rgba(hex_color: str, alpha: float) -> str:
    hex_color = hex_color.lstrip("#")
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


# --- text alternatives ----------------------------------------------------------------------------

_TAG = re.compile(r"<[^>]+>")
_CHART_KINDS = {"heatmap": "heatmap", "contour": "contour plot", "bar": "bar chart", "histogram": "histogram",
                "box": "box plot", "violin": "violin plot", "pie": "pie chart", "image": "image"}


def _plain(text) -> str:
    """Plotly rich text as plain text: a line break before a subtitle (``<br><sup>``) as a dash, any other (a title
    wrapped by :func:`wrap`) as a space, other tags dropped, entities decoded."""
    text = re.sub(r"<br\s*/?>(?=\s*<sup>)", " — ", str(text or ""), flags=re.IGNORECASE)
    text = re.sub(r"<br\s*/?>", " ", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", html.unescape(_TAG.sub("", text))).strip(" —")


def _title_text(value) -> str:
    return _plain(value.get("text", "") if isinstance(value, dict) else value)


def _sentence(text: str) -> str:
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


def _chart_kind(traces) -> str:
    kinds = []
    for trace in traces:
        kind = trace.get("type", "scatter")
        if kind in ("scatter", "scattergl"):
            mode = trace.get("mode", "lines+markers")
            kind = "line chart" if "lines" in mode or trace.get("fill") else "scatter plot"
        else:
            kind = _CHART_KINDS.get(kind, f"{kind} chart")
        if kind not in kinds:
            kinds.append(kind)
    if "line chart" in kinds and "scatter plot" in kinds:
        kinds.remove("scatter plot")
        kinds[kinds.index("line chart")] = "line and scatter chart"
    return " and ".join(kinds) or "empty chart"


def describe(spec: dict, limit: int = 8) -> tuple[str, str]:
    """(accessible name, caption) of a plotly figure given as its JSON (``fig.to_plotly_json()``).

    The name is the figure's title. The caption says what kind of chart it is, what its axes show
    (and which are logarithmic), the series of its legend (the first ``limit``), and what each
    slider switches between and which of its values the figure shows first. Readers who cannot see
    the figure get its structure; its message is in the text around it.
    """
    layout, traces = spec.get("layout") or {}, spec.get("data") or []
    title = _title_text(layout.get("title", ""))
    kind = _chart_kind(traces)
    sentences = [_sentence(f"{kind}: {title}" if title else kind)]
    axes = []
    for key in sorted(k for k in layout if re.fullmatch(r"[xy]axis\d*", k)):
        axis = layout[key] or {}
        name = _title_text(axis.get("title", ""))
        entry = f"{'horizontal' if key[0] == 'x' else 'vertical'} axis: {name}"
        if name and entry not in (a.split(" (")[0] for a in axes):
            axes.append(entry + (" (logarithmic)" if axis.get("type") == "log" else ""))
    if axes:
        sentences.append(_sentence("; ".join(axes)))
    names = []
    for trace in traces:
        name = _plain(trace.get("name", ""))
        if name and trace.get("showlegend", True) is not False and name not in names:
            names.append(name)
    if names:
        more = [f"and {len(names) - limit} more"] if len(names) > limit else []
        sentences.append(_sentence(f"Series: {'; '.join(names[:limit] + more)}"))
    for slider in layout.get("sliders") or []:
        steps = [_plain(step.get("label", "")) for step in slider.get("steps", [])]
        if len(steps) < 2:
            continue
        label = _plain((slider.get("currentvalue") or {}).get("prefix", "")).rstrip(" =:") or "a setting"
        listed = "; ".join(steps) if len(steps) <= 12 else f"{steps[0]}; {steps[1]}; …; {steps[-1]}"
        first = steps[min(slider.get("active") or 0, len(steps) - 1)]
        sentences.append(f"A slider sets {label} to one of {len(steps)} values ({listed}); "
                         f"the figure opens at {label} = {first}.")
    return title or kind[:1].upper() + kind[1:], " ".join(sentences)


def accessible_figure(figure_html: str, spec: dict, div_id: str) -> str:
    """``figure_html`` (plotly's ``<div>`` and script for ``spec``) inside a ``<figure>`` that is named
    by the figure's title and captioned with :func:`describe`'s text."""
    name, caption = describe(spec)
    return (f'<figure class="sal-figure" aria-label="{html.escape(name)}" aria-describedby="{div_id}-caption">'
            f'{figure_html}<figcaption id="{div_id}-caption" class="sal-figure-caption">{html.escape(caption)}'
            f"</figcaption></figure>")
