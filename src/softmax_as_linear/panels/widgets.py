"""ipywidgets panels for the live chapters (Binder, Colab, JupyterLab).

A panel is a set of controls and a function that draws from their values. :func:`panel` wires them
so that whatever the computation raises shows as a message in the panel's message line, under the
controls, instead of a traceback: a ``ValueError`` is a setting the panel cannot compute, and its
message says which control to change. Maintainers see the traceback: every failure is logged with it on the
logger ``softmax_as_linear.panels`` (level DEBUG), and with the environment variable
``SOFTMAX_AS_LINEAR_DEBUG=1`` the message line shows it too (:func:`explain`).
The rendered book shows the static counterparts built with :func:`softmax_as_linear.figures.style.slider_figure`.

A number typed into a control is read by the library, not by the browser: ipywidgets' own slider
readouts and number boxes clamp an out-of-range value and drop a non-number without a word, so
:func:`panel` gives each such control a text box and says in the panel's message line what it did
with the value. Only controls that exist in ipywidgets 7.7 (what Colab runs) and 8 are used. A panel
saved in a notebook shows :data:`NEEDS_KERNEL` until its cell runs.
"""
from __future__ import annotations

import contextlib
import html
import logging
import math
import os
import time
import traceback
import warnings
from typing import Callable

import ipywidgets as W
import numpy as np


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


#: What a panel shows where no kernel draws it.
NEEDS_KERNEL = ("Live panel: its controls appear when this cell runs in a Python kernel "
                "(run the cells above it, then this one with Shift+Enter).")


class Panel(W.VBox):
    """The box of a live panel. Where no kernel draws it (a notebook opened before its cells run, a
    static view) it shows :data:`NEEDS_KERNEL` with its title instead of ipywidgets' ``VBox(children=...``.
    """

    def __init__(self, children, *, title: str | None = None, **kwargs):
        super().__init__(children, **kwargs)
        self._title = title or "Live panel"

    def __repr__(self) -> str:  # the text/plain of the stored output, in ipywidgets 7 and 8
        return f"{self._title}. {NEEDS_KERNEL}"

    def _repr_mimebundle_(self, **kwargs):  # ipywidgets 8: a formatted note next to the widget view
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        bundle["text/html"] = (f'<div style="border-left:4px solid #1f6f8b;padding:6px 10px;color:#333">'
                               f"<b>{html.escape(self._title)}</b><br>{html.escape(NEEDS_KERNEL)}</div>")
        return bundle


def _bounds(control: W.Widget) -> tuple[float, float, bool]:
    """``(low, high, integer)`` of a numeric control."""
    integer = isinstance(control, (W.IntSlider, W.IntText, W.BoundedIntText))
    if isinstance(control, W.FloatLogSlider):
        return control.base ** control.min, control.base ** control.max, False
    if hasattr(control, "min") and hasattr(control, "max"):
        return control.min, control.max, integer
    return -math.inf, math.inf, integer


def _format(control: W.Widget, value=None) -> str:
    """``value`` (default the control's) as its text box shows it."""
    value = control.value if value is None else value
    return str(int(value)) if _bounds(control)[2] else f"{value:.4g}"


#: The controls (by ``id``) whose value is being set from their text box right now: the redraw this starts
#: keeps what the box reported (:func:`panel`), and the box's own rewrite is not a new entry.
_FROM_BOX: set[int] = set()


def from_box(change) -> bool:
    """Whether a control's change (an ``observe`` callback's argument) is a value typed in its text box: a
    panel that clears the message line on every change keeps, for this one, what the box reported."""
    return change is not None and id(change["owner"]) in _FROM_BOX


@contextlib.contextmanager
def _from_box(control: W.Widget):
    _FROM_BOX.add(id(control))
    try:
        yield
    finally:
        _FROM_BOX.discard(id(control))


#: Seconds after a correction within which an Enter or the box's rewrite belongs to that same entry.
_SAME_ENTRY_SECONDS = 0.5

#: Controls whose number the reader can type in: their readout (sliders) or box is replaced by a Text
#: that the library parses. Selection sliders, dropdowns and check boxes offer only valid values.
TYPED = (W.IntSlider, W.FloatSlider, W.FloatLogSlider, W.IntText, W.FloatText, W.BoundedIntText, W.BoundedFloatText)


def typed_entry(control: W.Widget, report: Callable[[str], None]) -> W.Widget:
    """The widget to lay out for ``control``: the control with a text box for typed numbers.

    A typed number out of range is clamped, a fractional one for an integer control rounded, and
    ``report(message)`` says so at once, before the control takes the value (whose redraw can take seconds), and
    the box shows the value taken; a non-number leaves the value as it was, and ``report`` says so too.
    Each entry replaces what the last one reported: a valid number (even the value already shown, sent with
    Enter: a box that holds the same text sends no change) and an emptied box (the value shown again) clear
    it. Controls outside :data:`TYPED` are returned as they are.
    """
    if not isinstance(control, TYPED):
        return control
    label = (control.description or "value").rstrip(": ")
    is_slider = isinstance(control, (W.IntSlider, W.FloatSlider, W.FloatLogSlider))
    entry = W.Text(value=_format(control), continuous_update=False,
                   description="" if is_slider else control.description,
                   style={"description_width": "initial"},
                   layout=W.Layout(width="6.5em" if is_slider else "14em"))
    entry.add_class("sal-typed-entry")

    corrected = {"at": -math.inf}  # when this box last reported a correction

    def typed(change):
        if id(control) in _FROM_BOX:  # the box rewritten while its value is set: not a new entry
            return
        text, shown = str(change["new"]).strip(), _format(control)
        if text == shown or not text:  # the value as it is, or an emptied box: nothing to say
            entry.value = shown
            if not corrected["at"] > time.monotonic() - _SAME_ENTRY_SECONDS:  # not the rewrite of a correction
                report("")
            return
        try:
            number = float(text.replace("_", ""))
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            corrected["at"] = time.monotonic()
            entry.value = shown
            report(f"{label}: “{text}” is not a number; the value stays {shown}.")
            return
        low, high, integer = _bounds(control)
        value = min(max(number, low), high)
        note = ""
        if value != number:
            note = f"{label}: {text} is outside [{low:.4g}, {high:.4g}]; set to {value:.4g}."
        if integer and value != round(value):
            value = int(round(value))
            note = note or f"{label}: {text} is not a whole number; set to {value}."
        if note:
            corrected["at"] = time.monotonic()
        value = int(value) if integer else value
        report(note)  # said, and shown in the box, before the redraw that the control's change starts
        with _from_box(control):
            entry.value = _format(control, value)
            control.value = value
        entry.value = _format(control)

    def submitted(_):
        # Enter: sent even when the box holds the text the kernel set, which sends no change of value (a valid
        # value typed again after a correction); within a moment of a correction it is that correction's Enter
        if entry.value == _format(control) and not corrected["at"] > time.monotonic() - _SAME_ENTRY_SECONDS:
            report("")

    def follow(change):
        entry.value = _format(control)

    entry.observe(typed, names="value")
    with warnings.catch_warnings():  # ipywidgets 8 calls on_submit deprecated, yet sends Enter only to it
        warnings.simplefilter("ignore", DeprecationWarning)
        entry.on_submit(submitted)
    control.observe(follow, names="value")
    W.dlink((control, "disabled"), (entry, "disabled"))  # a control that does nothing takes no typing either
    if is_slider:
        control.readout = False
        return W.HBox([control, entry])
    return entry


def layout_controls(controls: dict[str, W.Widget], report: Callable[[str], None], columns: int) -> list[W.HBox]:
    """Rows of ``columns`` controls, each with its :func:`typed_entry`."""
    for control in controls.values():  # whole descriptions ("query angle (°)", not "query ang...")
        style = getattr(control, "style", None)
        if style is not None and hasattr(style, "description_width") and not style.description_width:
            style.description_width = "initial"
    cells = [typed_entry(control, report) for control in controls.values()]
    return [W.HBox(cells[i:i + columns]) for i in range(0, len(cells), columns)]


def message_line() -> tuple[W.HTML, Callable[[str], None], Callable[[str], None]]:
    """An initially empty line for the panel's messages, and the two functions that write it:
    ``report(text)`` for what became of a typed value (:func:`typed_entry`) and ``fail(text)`` for a
    computation that failed. Each replaces its own part of the line; ``""`` clears it."""
    line = W.HTML("")
    line.add_class("sal-message")
    parts = {"typed": "", "failed": ""}

    def show():
        line.value = "".join(
            f'<div style="color:{color};padding:2px 0;white-space:pre-wrap">{html.escape(parts[key])}</div>'
            for key, color in (("typed", "#a15c00"), ("failed", "#b00020")) if parts[key])

    def report(text: str):
        parts["typed"] = text
        show()

    def fail(text: str):
        parts["failed"] = text
        show()
    return line, report, fail


#: Set to 1 (or any value but 0), the message line of a panel shows the traceback of a failure.
DEBUG_VAR = "SOFTMAX_AS_LINEAR_DEBUG"
#: The logger of the panels' failures, ``softmax_as_linear.panels``.
log = logging.getLogger("softmax_as_linear.panels")


def explain(error: BaseException) -> str:
    """The message line's words for a failed computation: a ``ValueError`` is a setting the panel
    cannot compute (its message says what to change); anything else is reported as it is.

    For maintainers, the failure is logged with its traceback on :data:`log` (level DEBUG:
    ``logging.getLogger("softmax_as_linear.panels").setLevel("DEBUG")`` with a handler), and with
    ``SOFTMAX_AS_LINEAR_DEBUG=1`` in the kernel's environment the words end with the traceback."""
    exc_info = (type(error), error, error.__traceback__)
    log.debug("a panel's computation failed", exc_info=exc_info)
    if isinstance(error, ValueError):
        text = f"Cannot compute this setting: {error}"
    else:
        text = f"This setting failed ({type(error).__name__}: {error}); change a control to try another."
    if os.environ.get(DEBUG_VAR, "0") not in ("", "0"):
        text += "\n\n" + "".join(traceback.format_exception(*exc_info)).rstrip()
    return text


def figure_outputs(fig) -> tuple[dict, ...]:
    """What :func:`~softmax_as_linear.figures.style.show` would display, as ``Output.outputs`` entries
    (usable from a thread). Without an IPython shell (plain Python) the figure's title is returned as text."""
    from IPython.core.getipython import get_ipython
    from IPython.utils.capture import capture_output

    from ..figures import style

    if get_ipython() is None:
        return ({"output_type": "stream", "name": "stdout", "text": f"<plotly figure: {fig.layout.title.text}>\n"},)
    with capture_output(stdout=False, stderr=False) as captured:
        style.show(fig)
    return tuple({"output_type": "display_data", "data": o.data, "metadata": o.metadata or {}}
                 for o in captured.outputs)


def computing(values: dict) -> str:
    """The status line's HTML while a panel computes ``values`` (control name -> value)."""
    shown = ", ".join(f"{name} = {_short(value)}" for name, value in values.items())
    return (f'<div style="color:#555;padding:2px 0" role="status">Computing \u2026 '
            f'({html.escape(shown)})</div>')


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def panel(controls: dict[str, W.Widget], draw: Callable[..., object], *, columns: int = 3,
          title: str | None = None) -> Panel:
    """Lay out ``controls`` and call ``draw(**values)`` whenever one of them changes.

    ``draw`` returns the plotly figure to show (None shows nothing). While it computes, the panel's status line
    (above the figure) says "Computing …" with the values it computes for, so that a figure that takes seconds does
    not leave the panel looking dead; the line is cleared when the figure (or a message) replaces it. The status is
    widget state only: it is not part of a notebook's stored outputs.
    Whatever it raises is caught: the figure is cleared and the message line says why (:func:`explain`);
    a ``ValueError`` should say which control to change. A typed value that a control cannot take is
    reported on the same line (see :func:`typed_entry`). The returned :class:`Panel` keeps
    ``controls``, ``output``, ``note`` (the message line) and ``status`` (the status line).
    """
    output = W.Output()
    note, report, fail = message_line()
    status = W.HTML("")
    status.add_class("sal-status")

    def refresh(change=None):
        if not from_box(change):  # a typed value's report stays for its redraw
            report("")
        fail("")
        values = {name: widget.value for name, widget in controls.items()}
        status.value = computing(values)  # sent to the browser at once, before the computation starts
        try:
            figure = draw(**values)
        except Exception as error:  # noqa: BLE001 - every failure becomes a message, never a traceback
            output.outputs = ()
            fail(explain(error))
            return
        finally:
            status.value = ""
        # One assignment replaces the old figure: a clear_output(wait=True) sent before it could reach
        # JupyterLab after the new outputs and leave the panel empty.
        output.outputs = () if figure is None else figure_outputs(figure)

    for widget in controls.values():
        widget.observe(refresh, names="value")
    rows = layout_controls(controls, report, columns)
    header = [W.HTML(f"<b>{html.escape(title)}</b>")] if title else []
    refresh()
    box = Panel(header + rows + [note, status, output], title=title)
    box.controls, box.output, box.note, box.status = controls, output, note, status
    return box
