"""Training from a widget: the background run reports progress, stops when asked, reports errors,
and the panel turns clicks into runs and figures (or messages), without a browser."""
import threading

import pytest
from IPython.core.interactiveshell import InteractiveShell

from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.panels import training as tp

SMALL = dict(lengths=(10,), steps=60, record_every=10, eval_prompts=16, batch_size=16)


def test_background_training_reports_every_record_and_finishes():
    seen, done = [], threading.Event()
    run = tp.BackgroundTraining(TrainConfig(**SMALL), on_record=seen.append, on_done=lambda r: done.set()).start()
    assert run.join(120) and done.is_set()
    assert run.error is None and run.result.complete
    assert seen == [10, 20, 30, 40, 50]  # every record step before the last
    assert run.result.steps[-1] == 60


def test_background_training_stops_when_asked():
    proceed = threading.Event()
    run = tp.BackgroundTraining(TrainConfig(**{**SMALL, "steps": 10_000}), on_record=lambda step: proceed.wait(60))
    run.start()
    run.stop()
    proceed.set()
    assert run.join(120)
    assert not run.result.complete and run.result.steps[-1] == 10


def test_background_training_keeps_the_error():
    cfg = TrainConfig(**SMALL, init="given")  # no weights given: the trainer raises ValueError
    run = tp.BackgroundTraining(cfg).start()
    assert run.join(60)
    assert isinstance(run.error, ValueError) and run.result is None
    with pytest.raises(ValueError, match="config"):
        tp.BackgroundTraining({"steps": 10})


@pytest.mark.parametrize("init, parametrisation, scale", [("pytorch", "four_matrix", 1.0), ("scaled", "four_matrix", 0.01),
                                                           ("block", "uv", None)])
def test_regression_config_maps_the_initialisation(init, parametrisation, scale):
    cfg = tp.regression_config(L=20, covariance="kms", rho=0.3, init=init, alpha=0.2, init_scale=0.01,
                               activations=("softmax",), seed=4, lr=1e-2, steps=300)
    assert cfg.parametrisation == parametrisation and cfg.lengths == (20,) and cfg.seeds == (4,)
    assert cfg.covariance == "kms" and cfg.rho == 0.3 and cfg.record_every == 6  # 50 records
    if scale is None:
        assert cfg.init == "block" and cfg.alpha == 0.2
    else:
        assert cfg.init == "pytorch" and cfg.init_scale == scale


def test_regression_config_rejects_bad_values():
    values = dict(L=20, covariance="kms", rho=0.3, init="block", alpha=0.2, init_scale=0.01, activations=("softmax",),
                  seed=4, lr=1e-2, steps=300)
    with pytest.raises(ValueError, match="init"):
        tp.regression_config(**{**values, "init": "xavier"})
    with pytest.raises(ValueError, match="rho"):
        tp.regression_config(**{**values, "rho": 1.0})


@pytest.fixture
def shell():
    return InteractiveShell.instance()


def _click_and_wait(panel):
    panel.start()
    run = panel.state["run"]
    assert run.join(120)
    return run


def test_panel_trains_on_click_and_shows_a_figure(shell):
    panel = tp.regression_panel()
    panel.controls["steps"].value = 100
    panel.controls["L"].value = 10
    output = panel.output
    assert output.outputs == ()  # nothing trains before the click
    run = _click_and_wait(panel)
    assert run.result.complete and run.result.config.steps == 100
    data = output.outputs[0]["data"]
    assert "text/html" in data and "application/vnd.plotly.v1+json" in data
    assert panel.progress.value == 100 and "finished" in panel.status.value


def test_default_click_is_built_from_the_named_preset():
    values = {name: control.value for name, control in tp.regression_controls().items()}
    cfg = tp.regression_config(**values)
    lecture = tp.sweep_config(tp.PANEL["preset"])
    assert cfg.lengths == (tp.PANEL["L"],) and cfg.lr == tp.PANEL["lr"] and cfg.steps == tp.PANEL["steps"]
    assert (cfg.d, cfg.batch_size, cfg.optimizer, cfg.init) == (lecture.d, lecture.batch_size, lecture.optimizer,
                                                               lecture.init)
    # the same gradient-flow time 2 lr steps as the preset's sweep: the plateau ends within the click
    assert 2 * cfg.lr * cfg.steps == 2 * lecture.lr * lecture.steps


def test_panel_figure_keeps_legend_and_divergence_marks_off_the_curves():
    cfg = TrainConfig(**{**SMALL, "lr": 50.0, "steps": 40})  # a step this large diverges
    result = tp.train(cfg)
    assert result.diverged.any()
    fig = tp.panel_figure(result)
    assert fig.layout.legend.y < 0 and fig.layout.legend.orientation == "h"  # below the axes
    assert not [t for t in fig.data if t.mode == "markers"]
    labels = [a for a in fig.layout.annotations if a.yref == "paper" and a.y >= 1]
    assert labels and all(a.text.endswith("diverged") for a in labels)
    # the title, pinned to the top edge, and the labels stacked under it keep apart; the y-axis title, on lines of
    # at most 20 characters, stays within the axes' height (it overprinted the title)
    assert fig.layout.title.yref == "container" and fig.layout.title.y == 1
    highest = max(a.yshift for a in labels) + tp.LABEL_ROW
    assert fig.layout.margin.t >= highest + tp.TITLE_ROOM
    lines = fig.layout.yaxis.title.text.split("<br>")
    axes = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert len(lines) == 2 and all(len(line) * 7.4 <= axes / 2 for line in lines), lines


def test_typed_values_are_reported_in_the_message_line(shell):
    panel = tp.regression_panel()
    rho_box = next(c for row in panel.children for c in getattr(row, "children", ())
                   if isinstance(c, tp.W.HBox) and panel.controls["rho"] in c.children).children[1]
    rho_box.value = "2"
    assert panel.controls["rho"].value == 0.95 and "outside" in panel.note.value
    rho_box.value = "x"
    assert panel.controls["rho"].value == 0.95 and "not a number" in panel.note.value
    assert panel.state["run"] is None  # typing never trains


def test_panel_shows_a_message_for_a_failing_run(shell):
    controls = {"steps": tp.widgets.log_slider("steps", 100, 100, 1000, integer=True)}
    panel = tp.training_panel(controls, lambda steps: TrainConfig(**{**SMALL, "steps": steps}, init="given"),
                              draw=lambda result: None)
    _click_and_wait(panel)
    assert "Cannot compute this setting" in panel.note.value and "init_weights" in panel.note.value


def test_panel_shows_a_message_for_bad_values(shell):
    def make_config(steps):
        raise ValueError("steps must be even")

    panel = tp.training_panel({"steps": tp.widgets.log_slider("steps", 100, 100, 1000, integer=True)}, make_config,
                              draw=lambda result: None)
    panel.start()
    assert panel.state["run"] is None
    assert "steps must be even" in panel.note.value


def test_the_seed_box_takes_the_trainers_seeds():
    from softmax_as_linear.core.seeding import SEED_LIMIT

    seed = tp.regression_controls()["seed"]
    assert (seed.min, seed.max) == (0, SEED_LIMIT - 1)
    tp.regression_config(**{**{n: c.value for n, c in tp.regression_controls().items()}, "seed": seed.max})


def test_a_failed_click_clears_the_status_of_the_last_run(shell):
    calls = []

    def make_config(steps):
        calls.append(steps)
        if len(calls) > 1:
            raise ValueError("steps must be even")
        return TrainConfig(**{**SMALL, "steps": steps})

    panel = tp.training_panel({"steps": tp.widgets.log_slider("steps", 100, 100, 1000, integer=True)}, make_config,
                              draw=lambda result: None)
    _click_and_wait(panel)
    assert "finished" in panel.status.value
    panel.start()
    assert panel.status.value == "" and "steps must be even" in panel.note.value and panel.progress.value == 0


def test_a_long_run_records_the_shape_of_its_plateau():
    values = {n: c.value for n, c in tp.regression_controls().items()}
    for steps in (100, 500, 1_000, 2_000, 5_000, 10_000, 20_000):
        records = tp.regression_config(**{**values, "steps": steps}).record_steps()
        spacing = max(b - a for a, b in zip(records, records[1:]))
        assert records[-1] == steps and len(records) >= 51 and spacing <= max(10, steps // 200), (steps, spacing)
    assert len(tp.regression_config(**{**values, "steps": 20_000}).record_steps()) >= 200


def test_controls_that_do_nothing_for_the_choice_are_disabled():
    panel = tp.regression_panel("isotropic")
    c = panel.controls
    assert c["rho"].disabled and c["alpha"].disabled and c["init_scale"].disabled
    c["init"].value = "scaled"
    assert c["alpha"].disabled and not c["init_scale"].disabled
    c["init"].value = "block"
    assert not c["alpha"].disabled and c["init_scale"].disabled
    c["covariance"].value = "kms"
    assert not c["rho"].disabled


def test_stop_looks_disabled_until_a_run_starts(shell):
    panel = tp.regression_panel()
    stop = next(b for b in panel.buttons if b.description == "Stop")
    assert stop.disabled and stop.button_style == ""
    panel.controls["steps"].value = 10_000
    panel.start()
    try:
        assert not stop.disabled and stop.button_style == "danger"
    finally:
        panel.stop()
        assert panel.state["run"].join(120)
    assert stop.disabled and stop.button_style == ""


def test_a_new_panel_stops_the_run_of_an_older_one(shell):
    old = tp.regression_panel()
    old.controls["steps"].value = 20_000
    old.start()
    run = old.state["run"]
    new = tp.regression_panel()
    assert run.join(60) and not run.result.complete
    assert "stopped" in new.note.value and "stopped" in old.status.value


def test_an_interrupt_stops_training(shell):
    panel = tp.regression_panel()
    panel.controls["steps"].value = 20_000
    panel.start()
    run = panel.state["run"]
    tp.interrupt_training()  # what Kernel > Interrupt calls through the SIGINT handler
    assert run.join(60) and not run.result.complete


def test_sigint_while_training_stops_it_and_nothing_else(shell):
    import signal

    panel = tp.regression_panel()
    panel.controls["steps"].value = 20_000
    panel.start()
    run = panel.state["run"]
    previous = signal.getsignal(signal.SIGINT)
    try:
        tp.watch_interrupts()
        signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt: it went to the training
        assert run.join(60) and not run.result.complete
    finally:
        signal.signal(signal.SIGINT, previous)
