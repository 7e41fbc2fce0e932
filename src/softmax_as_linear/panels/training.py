"""Training from a widget: a sweep runs in a background thread, with a progress bar and a Stop button.

The kernel stays free while the thread trains, so it can receive the click on *Stop*, which the
trainer sees through its ``should_stop`` hook at the next record step; a stopped run is drawn as far
as it went and labelled as stopped. Widgets are updated from the thread by assigning their traits
(``IntProgress.value``, ``Output.outputs``), which ipywidgets sends to the browser from any thread.

:func:`regression_panel` is the panel of the in-context regression chapters: prompt length,
covariance, initialisation, activation, seed, learning rate and number of steps.
"""
from __future__ import annotations

import html
import threading
import time
from typing import Callable

import ipywidgets as W

from ..engine.sweep import TrainConfig, TrainResult
from ..engine.train import train
from ..experiments.presets import PANEL, sweep_config
from ..figures import paper as figures
from ..figures import style
from . import widgets

INIT_LABELS = {"PyTorch default": "pytorch", "PyTorch × scale (near zero)": "scaled", "Assumption 5.1 (α)": "block"}
ACTIVATION_CHOICES = {"both (paired)": ("softmax", "linear"), "softmax": ("softmax",), "linear": ("linear",)}


class BackgroundTraining:
    """Train ``config`` in a daemon thread.

    ``on_record(step)`` is called at every record step (from the thread); ``on_done(self)`` once
    training has ended, with :attr:`result` (a :class:`~softmax_as_linear.engine.sweep.TrainResult`, marked
    incomplete when stopped) or :attr:`error` set. :meth:`stop` asks the trainer to stop at its next record.
    """

    def __init__(self, config: TrainConfig, *, on_record: Callable[[int], None] | None = None,
                 on_done: Callable[["BackgroundTraining"], None] | None = None, device: str = "cpu"):
        if not isinstance(config, TrainConfig):
            raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
        self.config, self.device = config, device
        self.on_record, self.on_done = on_record, on_done
        self.result: TrainResult | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._stop = threading.Event()
        self._records = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _should_stop(self) -> bool:
        self._records += 1
        if self.on_record is not None:
            self.on_record(min(self._records * self.config.record_every, self.config.steps))
        return self._stop.is_set()

    def _run(self):
        start = time.perf_counter()
        try:
            self.result = train(self.config, device=self.device, should_stop=self._should_stop)
        except Exception as error:  # reported through on_done, never lost in the thread
            self.error = error
        self.seconds = time.perf_counter() - start
        if self.on_done is not None:
            self.on_done(self)

    def start(self) -> "BackgroundTraining":
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has finished."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


def figure_outputs(fig) -> tuple[dict, ...]:
    """What :func:`style.show` would display, as ``Output.outputs`` entries (usable from a thread).

    Without an IPython shell (plain Python) the figure's title is returned as text.
    """
    from IPython.core.getipython import get_ipython
    from IPython.utils.capture import capture_output

    if get_ipython() is None:
        return ({"output_type": "stream", "name": "stdout", "text": f"<plotly figure: {fig.layout.title.text}>\n"},)
    with capture_output(stdout=False, stderr=False) as captured:
        style.show(fig)
    return tuple({"output_type": "display_data", "data": o.data, "metadata": o.metadata or {}}
                 for o in captured.outputs)


def _message_outputs(text: str, kind: str = "error") -> tuple[dict, ...]:
    color = {"error": "#b00020", "info": "#555"}.get(kind, "#555")
    return ({"output_type": "display_data", "metadata": {},
             "data": {"text/html": f'<div style="color:{color};padding:4px 0">{html.escape(text)}</div>',
                      "text/plain": text}},)


def training_panel(controls: dict[str, W.Widget], make_config: Callable[..., TrainConfig],
                   draw: Callable[[TrainResult], object], *, title: str | None = None,
                   columns: int = 3) -> widgets.Panel:
    """Controls, *Train* and *Stop* buttons, a progress bar and the figure ``draw(result)``.

    ``make_config(**values)`` builds the sweep from the control values; a ``ValueError`` there or in
    ``draw`` shows its message instead of a figure. Nothing trains until *Train* is clicked. A typed
    value that a control cannot take is reported in the message line (:func:`widgets.typed_entry`).
    The returned :class:`widgets.Panel` keeps ``controls``, ``output``, ``note``, ``progress`` and
    ``status``, and ``start``, ``stop`` and ``state`` for scripted use.
    """
    run_button = W.Button(description="Train", button_style="primary", icon="play")
    stop_button = W.Button(description="Stop", button_style="warning", icon="stop", disabled=True)
    progress = W.IntProgress(value=0, min=0, max=1, description="steps", style={"description_width": "initial"})
    status = W.HTML("")
    status.add_class("sal-status")
    output = W.Output()
    note, report = widgets.message_line()
    state: dict[str, BackgroundTraining | None] = {"run": None}

    def set_status(text: str):
        status.value = f'<span style="color:#555">{html.escape(text)}</span>'

    def finished(run: BackgroundTraining):
        run_button.disabled, stop_button.disabled = False, True
        if run.error is not None:
            kind = "Cannot compute this setting" if isinstance(run.error, ValueError) else "Training failed"
            output.outputs = _message_outputs(f"{kind}: {run.error}")
            set_status("")
            return
        result = run.result
        progress.value = int(result.steps[-1])
        diverged = int(result.diverged.sum())
        done = "stopped" if not result.complete else "finished"
        set_status(f"{done} at step {int(result.steps[-1]):,} in {run.seconds:.1f} s"
                   + (f"; {diverged} run{'s' if diverged > 1 else ''} diverged" if diverged else ""))
        try:
            output.outputs = figure_outputs(draw(result))
        except ValueError as error:
            output.outputs = _message_outputs(f"Cannot draw this run: {error}")

    def start(_=None):
        if state["run"] is not None and state["run"].running:
            return
        try:
            config = make_config(**{name: widget.value for name, widget in controls.items()})
        except ValueError as error:
            output.outputs = _message_outputs(f"Cannot compute this setting: {error}")
            return
        report("")
        progress.max, progress.value = config.steps, 0
        run_button.disabled, stop_button.disabled = True, False
        set_status(f"training {len(config.seeds) * len(config.lengths) * len(config.activations)} run(s) ...")
        output.outputs = ()

        def on_record(step: int):
            progress.value = step

        state["run"] = BackgroundTraining(config, on_record=on_record, on_done=finished).start()

    def stop(_=None):
        if state["run"] is not None:
            state["run"].stop()
            set_status("stopping at the next record ...")

    run_button.on_click(start)
    stop_button.on_click(stop)
    for widget in controls.values():
        widget.observe(lambda _: report(""), names="value")
    rows = widgets.layout_controls(controls, report, columns)
    header = [W.HTML(f"<b>{html.escape(title)}</b>")] if title else []
    panel = widgets.Panel(header + rows + [note, W.HBox([run_button, stop_button, progress, status]), output],
                          title=title)
    panel.controls, panel.output, panel.note, panel.progress, panel.status = controls, output, note, progress, status
    panel.start, panel.stop, panel.state = start, stop, state
    return panel


def regression_controls(covariance: str = "isotropic") -> dict[str, W.Widget]:
    """The controls of :func:`regression_panel`, set to :data:`~softmax_as_linear.experiments.presets.PANEL`: the
    first click learns within seconds on a CPU (the plateau ends and both activations settle)."""
    style = {"description_width": "initial"}
    return {
        "L": W.SelectionSlider(options=[5, 10, 20, 50, 100, 200, 500, 1000], value=PANEL["L"],
                               description="prompt length L",
                               continuous_update=False, style=style),
        "covariance": W.Dropdown(options=[("isotropic Σ = I", "isotropic"), ("Kac-Murdock-Szegő ρ^|i-j|", "kms")],
                                 value=covariance, description="Σ", style=style),
        "rho": W.FloatSlider(value=0.5, min=-0.95, max=0.95, step=0.05, description="ρ (KMS)",
                             continuous_update=False, style=style),
        "init": W.Dropdown(options=list(INIT_LABELS.items()), value="pytorch", description="initialisation", style=style),
        "alpha": widgets.log_slider("α (Assumption 5.1)", 0.3, 0.01, 1.0),
        "init_scale": widgets.log_slider("init scale", 0.1, 0.001, 1.0),
        "activations": W.Dropdown(options=list(ACTIVATION_CHOICES.items()), value=ACTIVATION_CHOICES["both (paired)"],
                                  description="activation", style=style),
        "seed": W.BoundedIntText(value=327, min=0, max=10**6, description="seed", style=style),
        "lr": widgets.log_slider("learning rate", PANEL["lr"], 1e-4, 1.0),
        "steps": W.SelectionSlider(options=[100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000],
                                   value=PANEL["steps"],
                                   description="steps", continuous_update=False, style=style),
    }


def regression_config(L: int, covariance: str, rho: float, init: str, alpha: float, init_scale: float,
                      activations: tuple[str, ...], seed: int, lr: float, steps: int) -> TrainConfig:
    """The sweep of one panel click: the paper's task (d = 5) and model at one ``L``, plain SGD.

    ``init`` is ``"pytorch"`` (four matrices, PyTorch's default draws), ``"scaled"`` (the same times
    ``init_scale``: a near-zero start when small) or ``"block"`` (Assumption 5.1 with ``alpha``, in the
    (U, V) parametrisation of the theory).
    """
    if init not in ("pytorch", "scaled", "block"):
        raise ValueError(f"init must be 'pytorch', 'scaled' or 'block'; got {init!r}")
    # the lecture preset (the paper's d, noise, batch size and optimiser) at one L
    common = dict(rho=rho, lengths=(int(L),), activations=tuple(activations), seeds=(int(seed),), steps=int(steps),
                  lr=lr, record_every=max(1, int(steps) // 50), eval_prompts=512)
    if init == "block":
        return sweep_config(PANEL["preset"], covariance, **common, parametrisation="uv", init="block", alpha=alpha)
    return sweep_config(PANEL["preset"], covariance, **common, init_scale=init_scale if init == "scaled" else 1.0)


def panel_figure(result: TrainResult):
    """:func:`figures.run_figure` laid out for the panel: the legend below the axes and each divergence
    as a dotted vertical line labelled above the axes, so that neither covers a curve."""
    fig = figures.run_figure(result)
    markers = [t for t in fig.data if t.mode == "markers" and (t.name or "").endswith(" diverged")]
    fig.data = [t for t in fig.data if t not in markers]
    for index, marker in enumerate(markers):
        color = marker.marker.color
        fig.add_vline(x=marker.x[0], line=dict(color=color, dash="dot", width=1.5))
        fig.add_annotation(x=marker.x[0], y=1.0, xref="x", yref="paper", yanchor="bottom", showarrow=False,
                           yshift=2 + 14 * index, text=marker.name, font=dict(color=color, size=11))
    fig.update_layout(height=520, margin=dict(b=150, t=80),
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.2, yanchor="top",
                                  bgcolor="rgba(0,0,0,0)"))
    return fig


def regression_panel(covariance: str = "isotropic") -> widgets.Panel:
    """The live training panel of Chapters 4 and 5 (see :func:`regression_controls`)."""
    return training_panel(regression_controls(covariance), regression_config, panel_figure, columns=3,
                          title="Train the paper's attention layer on in-context regression")
