"""Panels without a browser: typed values are checked by the library and reported in the message
line, a bad setting shows a message instead of a traceback, and a panel shown without a kernel
says that it needs one."""
import ipywidgets as W
import pytest
from IPython.core.interactiveshell import InteractiveShell

from softmax_as_linear.core import progress
from softmax_as_linear.panels import widgets


@pytest.fixture
def shell():
    return InteractiveShell.instance()


def _entry(panel, control):
    """The text box that :func:`widgets.typed_entry` put next to ``control``."""
    for row in panel.children:
        for cell in getattr(row, "children", ()):
            if cell is control:
                return None
            if isinstance(cell, W.HBox) and control in cell.children:
                return cell.children[1]
            if isinstance(cell, W.Text) and "sal-typed-entry" in cell._dom_classes and cell.description == control.description:
                return cell
    raise AssertionError("no entry for this control")


@pytest.fixture
def drawn(shell):
    calls = []

    def draw(L, a, seed, law):
        if a == 0.125:
            raise ValueError("a = 1/8 is not allowed")
        calls.append((L, a, seed, law))

    controls = {"L": widgets.log_slider("prompt length L", 100, 10, 1000, integer=True),
                "a": W.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.05, description="a"),
                "seed": W.BoundedIntText(value=3, min=0, max=10, description="seed"),
                "law": W.Dropdown(options=["gaussian", "uniform"], value="gaussian", description="law")}
    return widgets.panel(controls, draw, title="Test panel"), calls


def test_panel_draws_once_and_on_every_change(drawn):
    panel, calls = drawn
    assert calls == [(100, 0.5, 3, "gaussian")]
    panel.controls["law"].value = "uniform"
    assert calls[-1] == (100, 0.5, 3, "uniform") and panel.note.value == ""


def test_sliders_get_a_checked_text_box_instead_of_their_readout(drawn):
    panel, calls = drawn
    a = panel.controls["a"]
    box = _entry(panel, a)
    assert a.readout is False and box.value == "0.5"
    box.value = "0.25"
    assert a.value == 0.25 and calls[-1][1] == 0.25 and panel.note.value == ""
    a.value = 0.75  # dragging the slider updates the box
    assert box.value == "0.75"


@pytest.mark.parametrize("typed, value, words", [("7", 1.0, "outside [0, 1]; set to 1"),
                                                 ("-3", 0.0, "outside [0, 1]; set to 0"),
                                                 ("abc", 0.5, "“abc” is not a number; the value stays 0.5"),
                                                 ("nan", 0.5, "is not a number")])
def test_out_of_range_and_non_numbers_are_reported(drawn, typed, value, words):
    panel, _ = drawn
    box = _entry(panel, panel.controls["a"])
    box.value = typed
    assert panel.controls["a"].value == value and words in panel.note.value
    assert box.value == widgets._format(panel.controls["a"])


def test_integer_boxes_round_and_clamp(drawn):
    panel, calls = drawn
    box = _entry(panel, panel.controls["seed"])
    box.value = "4.6"
    assert panel.controls["seed"].value == 5 and "not a whole number" in panel.note.value
    box.value = "1e6"
    assert panel.controls["seed"].value == 10 and "outside [0, 10]" in panel.note.value
    assert calls[-1][2] == 10


def test_a_valid_change_clears_the_message(drawn):
    panel, _ = drawn
    box = _entry(panel, panel.controls["a"])
    box.value = "9"
    assert panel.note.value
    panel.controls["law"].value = "uniform"
    assert panel.note.value == ""


def test_a_bad_setting_shows_a_message_not_a_traceback(drawn, capsys):
    panel, _ = drawn
    _entry(panel, panel.controls["a"]).value = "0.125"  # draw raises ValueError: no exception escapes
    assert "a = 1/8 is not allowed" in panel.note.value and "Traceback" not in capsys.readouterr().out


def test_selection_sliders_keep_their_readout(drawn):
    panel, _ = drawn
    assert panel.controls["L"].readout is True and _entry(panel, panel.controls["L"]) is None


def test_a_panel_without_kernel_says_it_needs_one(drawn):
    panel, _ = drawn
    bundle = panel._repr_mimebundle_()
    assert "VBox" not in bundle["text/plain"] and widgets.NEEDS_KERNEL in bundle["text/plain"]
    assert bundle["text/plain"].startswith("Test panel")
    assert widgets.NEEDS_KERNEL in bundle["text/html"]
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_log_slider_rejects_a_value_outside_its_range():
    with pytest.raises(ValueError, match="low <= value <= high"):
        widgets.log_slider("x", 5.0, 10.0, 100.0)


def test_any_failure_of_the_computation_lands_in_the_message_line(shell, capsys):
    def draw(a):
        if a > 0.5:
            raise ZeroDivisionError("float division by zero")
        print("drawn", a)

    panel = widgets.panel({"a": W.FloatSlider(value=0.25, min=0.0, max=1.0, description="a")}, draw)
    panel.controls["a"].value = 0.75  # no exception escapes the panel
    assert "float division by zero" in panel.note.value and "Traceback" not in capsys.readouterr().out
    panel.controls["a"].value = 0.5
    assert panel.note.value == ""


def test_a_typed_value_and_a_failure_are_both_reported(shell):
    def draw(a):
        if a == 1.0:
            raise ValueError("a = 1 has no limit")

    panel = widgets.panel({"a": W.FloatSlider(value=0.25, min=0.0, max=1.0, description="a")}, draw)
    _entry(panel, panel.controls["a"]).value = "7"  # clamped to 1, which the computation refuses
    assert "outside" in panel.note.value and "a = 1 has no limit" in panel.note.value


def _enter(box):
    """The reader presses Enter in ``box``: the front end sends "submit", with no change of value when the box holds
    the text the kernel set."""
    box._handle_string_msg(None, {"event": "submit"}, None)


@pytest.fixture
def later(monkeypatch):
    """Each reader's action comes after the moment that ties an Enter to the correction it submitted."""
    monkeypatch.setattr(widgets, "_SAME_ENTRY_SECONDS", 0.0)


def test_a_valid_value_typed_again_after_a_correction_clears_its_message(drawn, later):
    panel, _ = drawn
    box = _entry(panel, panel.controls["a"])
    box.value = "-1"
    assert panel.controls["a"].value == 0 and "-1 is outside [0, 1]; set to 0" in panel.note.value
    _enter(box)  # "0" typed over the "0" the box shows: no change of value reaches the kernel, only Enter
    assert panel.note.value == "" and panel.controls["a"].value == 0


def test_the_enter_of_a_correction_keeps_its_message(drawn):
    panel, _ = drawn
    box = _entry(panel, panel.controls["a"])
    box.value = "-1"
    _enter(box)  # within a moment of the correction: the same entry
    assert "-1 is outside [0, 1]; set to 0" in panel.note.value


def test_an_emptied_box_shows_the_value_again_and_clears_the_previous_warning(drawn, later):
    panel, _ = drawn
    box = _entry(panel, panel.controls["a"])
    box.value = "abc"
    assert "not a number" in panel.note.value
    box.value = ""
    assert box.value == "0.5" and panel.note.value == "" and panel.controls["a"].value == 0.5
    box.value = "7"
    box.value = "  "
    assert box.value == "1" and panel.note.value == ""


def test_a_valid_entry_in_another_box_replaces_the_message(drawn, later):
    panel, _ = drawn
    _entry(panel, panel.controls["seed"]).value = "-4"
    assert "outside [0, 10]" in panel.note.value
    _entry(panel, panel.controls["a"]).value = "0.25"
    assert panel.note.value == ""


def test_a_clamped_value_is_reported_and_shown_before_its_redraw(shell):
    # the redraw can take seconds: while it runs the reader sees the clamp, not the old value without a word
    seen, made = [], {}
    controls = {"k": W.IntSlider(value=1, min=0, max=2, description="k")}

    def draw(k):
        if made:
            seen.append((k, made["panel"].note.value, made["box"].value))

    made["panel"] = panel = widgets.panel(controls, draw)
    made["box"] = box = _entry(panel, controls["k"])
    box.value = "9"
    assert controls["k"].value == 2 and seen[-1][0] == 2
    assert "k: 9 is outside [0, 2]; set to 2." in seen[-1][1] and seen[-1][2] == "2"
    assert "set to 2" in panel.note.value and box.value == "2"                  # and it stays after the redraw
    box.value = "1"                                                             # a valid entry clears it, at once too
    assert seen[-1] == (1, "", "1") and panel.note.value == ""
    controls["k"].value = 0                                                     # a dragged slider: box follows
    assert seen[-1][0] == 0 and box.value == "0"


def test_the_panel_says_it_is_computing_while_it_draws_and_only_then(shell):
    holder, seen = {}, []

    def draw(a):
        if "panel" in holder:  # the first draw runs while the panel is being built
            seen.append(holder["panel"].status.value)
        if a > 0.9:
            raise ValueError("a too large")

    controls = {"a": W.FloatSlider(value=0.5, min=0.0, max=1.0, description="a")}
    holder["panel"] = built = widgets.panel(controls, draw)
    assert built.status.value == ""
    controls["a"].value = 0.25
    assert "Computing" in seen[-1] and "a = 0.25" in seen[-1] and built.status.value == ""
    controls["a"].value = 0.95
    assert "Computing" in seen[-1] and built.status.value == "", "a failure clears the status too"
    assert "a too large" in built.note.value
    assert built.children.index(built.status) < built.children.index(built.output)


def test_progress_shows_only_where_a_person_runs_the_notebook(shell, monkeypatch):
    monkeypatch.delenv(progress.PROGRESS_VAR, raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert not progress.interactive()  # a test, nbclient, nbval: no frontend that a person watches
    assert progress.transient_progress(10, "training") is None
    monkeypatch.setenv("JPY_SESSION_NAME", "notebooks/04_isotropic_icl.ipynb")
    assert not progress.interactive(), "a plain IPython shell (no kernel) is not a notebook"
    monkeypatch.setenv(progress.PROGRESS_VAR, "1")
    assert progress.interactive()
    monkeypatch.setenv(progress.PROGRESS_VAR, "0")
    assert not progress.interactive()


def test_the_progress_line_counts_the_steps_and_is_emptied_when_done(shell, monkeypatch):
    monkeypatch.setenv(progress.PROGRESS_VAR, "1")
    shown = []
    monkeypatch.setattr(shell.display_pub, "publish", lambda data, metadata=None, **kw: shown.append((data, metadata)))
    bar = progress.transient_progress(4, "training 2 runs")
    for _ in range(4):
        bar.update(1)
    bar.set_postfix(diverged=0)
    bar.close()
    assert all(metadata.get(progress.TRANSIENT) for _, metadata in shown)
    texts = [data["text/plain"] for data, _ in shown]
    assert texts[0].startswith("training 2 runs: step 0 of 4 (0 %)")
    assert any("step 4 of 4 (100 %)" in text for text in texts)
    assert texts[-1] == "", "the line is emptied when training ends"


def test_training_in_a_notebook_shows_the_line_and_a_tool_shows_nothing(monkeypatch):
    from softmax_as_linear.engine.sweep import TrainConfig
    from softmax_as_linear.engine.train import train

    bars = []

    class Recorder:
        def __init__(self, total, desc, initial=0):
            self.total, self.desc, self.steps, self.closed = total, desc, 0, False
            bars.append(self)

        def update(self, n=1):
            self.steps += n

        def set_postfix(self, **values):
            pass

        def close(self):
            self.closed = True

    small = TrainConfig(d=2, lengths=(5,), models=("linear",), seeds=(0,), steps=6, record_every=3, batch_size=8,
                        eval_prompts=16)
    monkeypatch.setattr(progress, "TransientProgress", Recorder)
    monkeypatch.setenv(progress.PROGRESS_VAR, "0")
    train(small)
    assert not bars
    monkeypatch.setenv(progress.PROGRESS_VAR, "1")
    train(small)
    assert len(bars) == 1 and bars[0].steps == 6 and bars[0].total == 6 and bars[0].closed
    assert bars[0].desc == "training 1 runs"
    bars.clear()
    train(small, progress=False)
    assert not bars
