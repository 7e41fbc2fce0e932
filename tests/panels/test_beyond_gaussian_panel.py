"""The live panel of Chapter 6: controls to a configuration, one click to a figure, bad settings to messages."""
import pytest

from softmax_as_linear.panels import beyond_gaussian as panel
from softmax_as_linear.panels import training as tp


def test_controls_give_the_lecture_preset_at_one_length():
    controls = panel.beyond_controls()
    values = {name: widget.value for name, widget in controls.items()}
    assert values["covariates"] == "uniform" and values["L"] == panel.BEYOND_PANEL["L"]
    config = panel.beyond_panel_config(**values)
    assert config.covariates == "uniform" and config.lengths == (100,) and config.seeds == (327,)
    assert set(config.models) == {"softmax", "linear", "softmax_limit", "linear_limit"}
    assert config.record_every * 50 == config.steps
    with pytest.raises(ValueError, match="covariates"):
        panel.beyond_panel_config("cauchy", 10, 1, 0.01, 100)
    with pytest.raises(ValueError, match="lr"):
        panel.beyond_panel_config("uniform", 10, 1, -0.01, 100)


def test_one_click_draws_the_distances_to_the_limits():
    config = panel.beyond_panel_config("rademacher", 10, 3, 0.04, 5)  # 5 steps draw the traces that 20 draw
    run = tp.BackgroundTraining(config).start()
    assert run.join(120) and run.error is None
    fig = panel.beyond_panel_figure(run.result)
    names = [trace.name for trace in fig.data]
    assert any("softmax attention at L = 10" in n for n in names) and any("softmax limit" in n for n in names)
    assert "Rademacher covariates, L = 10, seed 3" in fig.layout.title.text


def test_the_panel_builds_with_its_buttons():
    built = panel.beyond_panel()
    assert set(built.controls) == {"covariates", "L", "seed", "lr", "steps"}
    assert built.state["run"] is None


def test_the_seed_box_message_follows_what_was_typed_last(monkeypatch):
    from softmax_as_linear.panels import widgets

    monkeypatch.setattr(widgets, "_SAME_ENTRY_SECONDS", 0.0)
    built = panel.beyond_panel()
    box = next(c for row in built.children for c in getattr(row, "children", ())
               if isinstance(c, tp.W.Text) and c.description == "seed")
    box.value = "-1"
    assert built.controls["seed"].value == 0 and "-1 is outside [0, 9999]" in built.note.value
    box._handle_string_msg(None, {"event": "submit"}, None)  # a valid 0 typed over the 0 shown, then Enter
    assert built.note.value == ""
    box.value = "x"
    assert "not a number" in built.note.value
    box.value = ""  # emptied: the seed shown again, and no warning left
    assert box.value == "0" and built.note.value == ""


def test_no_progress_bar_before_the_first_click():
    built = panel.beyond_panel()
    assert built.progress.layout.visibility == "hidden"  # not "trained" beside an empty bar
