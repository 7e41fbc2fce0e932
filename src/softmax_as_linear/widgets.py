"""ipywidgets panels for the live chapters (Binder, Colab, JupyterLab).

A panel is a set of controls and a function that draws from their values. :func:`panel` wires them
so that a bad value shows its ``ValueError`` message under the controls instead of a traceback.
The rendered book shows the static counterparts built with :func:`softmax_as_linear.figures.slider_figure`.
"""
from __future__ import annotations

import html
from typing import Callable

import ipywidgets as W
import numpy as np
from IPython.display import display


def log_slider(description: str, value: float, low: float, high: float, *, integer: bool = False,
               steps_per_decade: int = 4) -> W.Widget:
    """A slider over ``[low, high]`` on a logarithmic scale (integer values when ``integer``)."""
    if not 0 < low <= value <= high:
        raise ValueError(f"value must satisfy 0 < low <= value <= high; got {low}, {value}, {high}")
    if integer:
        n = int(round(np.log10(high / low) * steps_per_decade)) + 1
        options = sorted({int(round(v)) for v in np.logspace(np.log10(low), np.log10(high), n)} | {int(value)})
        return W.SelectionSlider(options=options, value=int(value), description=description,
                                 continuous_update=False, style={"description_width": "initial"})
    return W.FloatLogSlider(value=value, base=10, min=np.log10(low), max=np.log10(high),
                            step=1 / steps_per_decade, description=description, continuous_update=False,
                            style={"description_width": "initial"})


def message(text: str, kind: str = "error") -> W.HTML:
    """A short coloured message (``kind`` is ``"error"``, ``"info"`` or ``"ok"``)."""
    color = {"error": "#b00020", "info": "#555", "ok": "#2e7d32"}.get(kind, "#555")
    return W.HTML(f'<div style="color:{color};padding:4px 0">{html.escape(text)}</div>')


def panel(controls: dict[str, W.Widget], draw: Callable[..., None], *, columns: int = 3,
          title: str | None = None) -> W.Widget:
    """Lay out ``controls`` and call ``draw(**values)`` whenever one of them changes.

    ``draw`` displays its figure (``figures.show``) and may raise ``ValueError`` for a bad
    combination of values: the message appears in place of the figure.
    """
    output = W.Output()

    def refresh(*_):
        output.clear_output(wait=True)
        with output:
            try:
                draw(**{name: widget.value for name, widget in controls.items()})
            except ValueError as error:
                display(message(f"Cannot compute this setting: {error}"))

    for widget in controls.values():
        widget.observe(refresh, names="value")
    boxes = list(controls.values())
    rows = [W.HBox(boxes[i:i + columns]) for i in range(0, len(boxes), columns)]
    header = [W.HTML(f"<b>{html.escape(title)}</b>")] if title else []
    refresh()
    return W.VBox(header + rows + [output])
