"""Training from a widget: a sweep runs in a background thread, with a progress bar and a Stop button.

The kernel stays free while the thread trains, so it can receive the click on *Stop*, which the
trainer sees through its ``should_stop`` hook at the next record step; a stopped run is drawn as far
as it went and labelled as stopped. Widgets are updated from the thread by assigning their traits
(``IntProgress.value``, ``Output.outputs``), which ipywidgets sends to the browser from any thread.

A student has other ways to stop: *Kernel > Interrupt* (SIGINT, which an idle kernel would otherwise
ignore, reaches the panels' runs through :func:`watch_interrupts`), and running the panel's cell again
(a new training panel stops the runs of the older ones, which would otherwise go on invisibly).

:func:`regression_panel` is the panel of the in-context regression chapters: prompt length,
covariance, initialisation, activation, seed, learning rate and number of steps.
"""
from __future__ import annotations

import html
import signal
import threading
import time
import weakref
from typing import Callable

import ipywidgets as W

from ..core.seeding import SEED_LIMIT
from ..engine.sweep import TrainConfig, TrainResult
from ..engine.train import train
from ..experiments.paper_figures import baselines
from ..experiments.presets import PANEL, sweep_config
from ..figures import paper as figures
from ..figures import style
from . import widgets

INIT_LABELS = {"PyTorch default": "pytorch", "PyTorch × scale (near zero)": "scaled", "Assumption 5.1 (α)": "block"}
PANEL_BAYES_SAMPLES = 4_000   # Monte Carlo samples of the Bayes risk drawn at each L (the result files use 20,000)
ACTIVATION_CHOICES = {"both (paired)": ("softmax", "linear"), "softmax": ("softmax",), "linear": ("linear",)}


def record_every(steps: int) -> int:
    """Steps between two records of a panel run: 50 records for a short run, never more than 10 steps
    apart below 2,000 steps, and 200 records from there on, so that a 20,000-step run shows the shape
    of its plateau (a record every 100 steps) while a short click spends little on held-out risks."""
    return max(1, min(steps // 50, max(10, steps // 200)))


class BackgroundTraining:
    """Train ``config`` in a daemon thread.

    ``on_record(step)`` is called at every record step (from the thread); ``on_done(self)`` once
    training has ended, with ``result`` (a :class:`~softmax_as_linear.engine.sweep.TrainResult`, marked
    incomplete when stopped) or ``error`` set. :meth:`stop` asks the trainer to stop at its next record.
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
        _RUNS.add(self)

    def _should_stop(self) -> bool:
        self._records += 1
        if self.on_record is not None:
            self.on_record(min(self._records * self.config.record_every, self.config.steps))
        return self._stop.is_set()

    def _run(self):
        start = time.perf_counter()
        try:
            self.result = train(self.config, device=self.device, should_stop=self._should_stop, progress=False)
        except Exception as error:  # reported through on_done, never lost in the thread
            self.error = error
        self.seconds = time.perf_counter() - start
        if self.on_done is not None:
            self.on_done(self)

    def start(self) -> "BackgroundTraining":
        """Start training on the background thread; returns ``self``."""
        self._thread.start()
        return self

    def stop(self):
        """Ask the trainer to stop at its next record."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has finished."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        """Whether training is still going on."""
        return self._thread.is_alive()


figure_outputs = widgets.figure_outputs

#: every BackgroundTraining of this process, while it exists (see :func:`interrupt_training`)
_RUNS: "weakref.WeakSet[BackgroundTraining]" = weakref.WeakSet()


def interrupt_training() -> int:
    """Ask every run still training to stop at its next record; returns how many were asked."""
    running = [run for run in list(_RUNS) if run.running]
    for run in running:
        run.stop()
    return len(running)


class _InterruptRelay:
    """A SIGINT handler: stops the panels' runs when some are training, else does what ``previous`` did."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, signum, frame):
        if interrupt_training():
            return
        if callable(self.previous):
            self.previous(signum, frame)
        elif self.previous == signal.SIG_DFL:
            signal.default_int_handler(signum, frame)


def watch_interrupts() -> None:
    """Let SIGINT (*Kernel > Interrupt* in JupyterLab) stop the runs of the training panels.

    An idle IPython kernel ignores SIGINT, and while it handles a message (a cell, a button click) it
    swaps in Python's handler and puts the saved one back afterwards. So inside a kernel the relay is
    put in the place of that saved handler, to become the idle kernel's handler when the message is
    done; elsewhere (a plain Python process) it is installed at once. Only the main thread can do either.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    from IPython.core.getipython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is not None and hasattr(kernel, "saved_sigint_handler"):
        if not isinstance(kernel.saved_sigint_handler, _InterruptRelay):
            kernel.saved_sigint_handler = _InterruptRelay(kernel.saved_sigint_handler)
    elif not isinstance(signal.getsignal(signal.SIGINT), _InterruptRelay):
        signal.signal(signal.SIGINT, _InterruptRelay(signal.getsignal(signal.SIGINT)))


def training_panel(controls: dict[str, W.Widget], make_config: Callable[..., TrainConfig],
                   draw: Callable[[TrainResult], object], *, title: str | None = None,
                   columns: int = 3) -> widgets.Panel:
    """Controls, *Train* and *Stop* buttons, a progress bar and the figure ``draw(result)``.

    ``make_config(**values)`` builds the sweep from the control values. Whatever fails (building the
    sweep, training, drawing) shows in the message line, with the status of the last run cleared, until a control
    changes or *Train* is clicked again; a ``ValueError`` is a setting that cannot be computed. The progress bar shows
    from the first click. Nothing trains until *Train* is clicked; *Stop*,
    *Kernel > Interrupt* and a new training panel (the cell run again) stop the run at its next record.
    A typed value that a control cannot take is reported in the message line
    (:func:`~softmax_as_linear.panels.widgets.typed_entry`). The returned
    :class:`~softmax_as_linear.panels.widgets.Panel` keeps ``controls``, ``output``, ``note``, ``progress``, ``status``
    and ``buttons`` (*Train*, *Stop*), and ``start``, ``stop`` and ``state`` for scripted use.
    """
    stopped = interrupt_training()  # the runs of an earlier panel (this cell run again) would go on unseen
    watch_interrupts()
    run_button = W.Button(description="Train", button_style="primary", icon="play")
    stop_button = W.Button(description="Stop", icon="stop", disabled=True)
    progress = W.IntProgress(value=0, min=0, max=1, description="trained", style={"description_width": "initial"},
                             layout=W.Layout(visibility="hidden"))  # shown from the first click: nothing trained yet
    status = W.HTML("")
    status.add_class("sal-status")
    output = W.Output()
    note, report, fail = widgets.message_line()
    state: dict[str, BackgroundTraining | None] = {"run": None}

    def set_status(text: str):
        status.value = f'<span style="color:#555">{html.escape(text)}</span>' if text else ""

    def set_running(running: bool):
        """Train and Stop, each styled only when it can be clicked (a disabled button looks disabled)."""
        run_button.disabled, run_button.button_style = running, "" if running else "primary"
        stop_button.disabled, stop_button.button_style = not running, "danger" if running else ""

    def failed(text: str):
        set_status("")
        progress.value = 0
        output.outputs = ()
        fail(text)

    def finished(run: BackgroundTraining):
        set_running(False)
        if run.error is not None:
            failed(widgets.explain(run.error) if isinstance(run.error, ValueError)
                   else f"Training failed ({type(run.error).__name__}: {run.error})")
            return
        result = run.result
        progress.value = int(result.steps[-1])
        diverged = int(result.diverged.sum())
        done = "stopped" if not result.complete else "finished"
        set_status(f"{done} at step {int(result.steps[-1]):,} in {run.seconds:.1f} s"
                   + (f"; {diverged} run{'s' if diverged > 1 else ''} diverged" if diverged else ""))
        try:
            output.outputs = figure_outputs(draw(result))
        except Exception as error:  # noqa: BLE001 - shown in the message line, never as a traceback
            output.outputs = ()
            fail(f"Cannot draw this run: {error}")

    def start(_=None):
        if state["run"] is not None and state["run"].running:
            return
        watch_interrupts()
        report("")
        fail("")
        try:
            config = make_config(**{name: widget.value for name, widget in controls.items()})
        except Exception as error:  # noqa: BLE001 - shown in the message line, never as a traceback
            failed(widgets.explain(error))
            return
        progress.max, progress.value = config.steps, 0
        progress.layout.visibility = "visible"
        set_running(True)
        set_status(f"training {len(config.seeds) * len(config.lengths) * len(config.models)} run(s) ...")
        output.outputs = ()

        def on_record(step: int):
            progress.value = step

        state["run"] = BackgroundTraining(config, on_record=on_record, on_done=finished).start()

    def stop(_=None):
        if state["run"] is not None and state["run"].running:
            state["run"].stop()
            set_status("stopping at the next record ...")

    run_button.on_click(start)
    stop_button.on_click(stop)
    def changed(change):  # what the message line said was about the settings before this change
        if not widgets.from_box(change):  # ... unless the change is the value a box just reported on
            report("")
        fail("")

    for widget in controls.values():
        widget.observe(changed, names="value")
    rows = widgets.layout_controls(controls, report, columns)
    header = [W.HTML(f"<b>{html.escape(title)}</b>")] if title else []
    panel = widgets.Panel(header + rows + [note, W.HBox([run_button, stop_button, progress, status]), output],
                          title=title)
    panel.controls, panel.output, panel.note, panel.progress, panel.status = controls, output, note, progress, status
    panel.buttons = (run_button, stop_button)
    panel.start, panel.stop, panel.state = start, stop, state
    if stopped:
        report(f"The training started from an earlier panel was stopped ({stopped} run{'s' if stopped > 1 else ''}): "
               "one training at a time.")
    return panel


def _enable_what_matters(controls: dict[str, W.Widget]) -> None:
    """Keep enabled only the controls that change the run: ρ for the KMS covariance, α for the
    Assumption 5.1 initialisation, the scale for the scaled PyTorch one."""
    def update(_=None):
        controls["rho"].disabled = controls["covariance"].value != "kms"
        controls["alpha"].disabled = controls["init"].value != "block"
        controls["init_scale"].disabled = controls["init"].value != "scaled"

    controls["covariance"].observe(update, names="value")
    controls["init"].observe(update, names="value")
    update()


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
        "init": W.Dropdown(options=list(INIT_LABELS.items()), value="pytorch", description="initialisation",
                           style=style),
        "alpha": widgets.log_slider("α (Assumption 5.1)", 0.3, 0.01, 1.0),
        "init_scale": widgets.log_slider("init scale", 0.1, 0.001, 1.0),
        "activations": W.Dropdown(options=list(ACTIVATION_CHOICES.items()), value=ACTIVATION_CHOICES["both (paired)"],
                                  description="activation", style=style),
        "seed": W.BoundedIntText(value=327, min=0, max=SEED_LIMIT - 1, description="seed", style=style),
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
    common = dict(rho=rho, lengths=(int(L),), models=tuple(activations), seeds=(int(seed),), steps=int(steps),
                  lr=lr, record_every=record_every(int(steps)), eval_prompts=512)
    if init == "block":
        return sweep_config(PANEL["preset"], covariance, **common, parametrisation="uv", init="block", alpha=alpha)
    return sweep_config(PANEL["preset"], covariance, **common, init_scale=init_scale if init == "scaled" else 1.0)


def panel_figure(result: TrainResult):
    """:func:`~softmax_as_linear.figures.paper.run_figure` laid out for the panel: the legend below the axes and each
    divergence as a dotted vertical line labelled above the axes, so that neither covers a curve."""
    cfg = result.config
    fig = figures.run_figure(result, baselines(cfg.lengths, cfg.task(), n_bayes_samples=PANEL_BAYES_SAMPLES))
    markers = [t for t in fig.data if t.mode == "markers" and (t.name or "").endswith(" diverged")]
    fig.data = [t for t in fig.data if t not in markers]
    for index, marker in enumerate(markers):
        color = marker.marker.color
        fig.add_vline(x=marker.x[0], line=dict(color=color, dash="dot", width=1.5))
        fig.add_annotation(x=marker.x[0], y=1.0, xref="x", yref="paper", yanchor="bottom", showarrow=False,
                           yshift=2 + LABEL_ROW * index, text=marker.name, font=dict(color=color, size=11))
    # The title pinned to the top edge, the divergence labels stacked under it, and the y-axis title on two lines
    # (at the panel's height a one-line risk title reached up past the axes into the figure's title).
    top = TITLE_ROOM + LABEL_ROW * len(markers) + 8
    fig.update_layout(height=440 + top, margin=dict(b=150, t=top, l=86),
                      title=dict(y=1, yanchor="top", yref="container", pad=dict(t=12)),
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.2, yanchor="top",
                                  bgcolor="rgba(0,0,0,0)"))
    fig.update_yaxes(title=dict(text=style.wrap(fig.layout.yaxis.title.text or "", PANEL_AXIS_CHARS), standoff=8))
    return fig


#: Pixels above the axes for the panel figure's title (its line and padding), per divergence label, and the
#: characters per line of its y-axis title.
TITLE_ROOM, LABEL_ROW, PANEL_AXIS_CHARS = 44, 14, 20


def regression_panel(covariance: str = "isotropic") -> widgets.Panel:
    """The live training panel of Chapters 4 and 5 (see :func:`regression_controls`); controls that do
    nothing for the current choice are disabled."""
    controls = regression_controls(covariance)
    _enable_what_matters(controls)
    return training_panel(controls, regression_config, panel_figure, columns=3,
                          title="Train the paper's attention layer on in-context regression")
