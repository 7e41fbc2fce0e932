"""A panel's failure is one line for students; maintainers get its traceback from a logger, or in the message line
with SOFTMAX_AS_LINEAR_DEBUG=1."""
import logging

import ipywidgets as W
import pytest
from IPython.core.interactiveshell import InteractiveShell

from softmax_as_linear.panels import widgets


def _failing_panel():
    def draw(a):
        raise ZeroDivisionError("a bug in the library")
    return widgets.panel({"a": W.FloatSlider(value=0.25, min=0.0, max=1.0, description="a")}, draw)


@pytest.fixture(autouse=True)
def shell():
    return InteractiveShell.instance()


def test_students_see_one_line_without_the_variable(monkeypatch):
    monkeypatch.delenv(widgets.DEBUG_VAR, raising=False)
    panel = _failing_panel()
    assert "ZeroDivisionError: a bug in the library" in panel.note.value and "Traceback" not in panel.note.value


def test_the_variable_shows_the_traceback_in_the_message_line(monkeypatch):
    monkeypatch.setenv(widgets.DEBUG_VAR, "1")
    note = _failing_panel().note.value
    assert "Traceback (most recent call last)" in note and "in draw" in note and "a bug in the library" in note
    monkeypatch.setenv(widgets.DEBUG_VAR, "0")
    assert "Traceback" not in _failing_panel().note.value


def test_the_traceback_is_logged_for_maintainers(monkeypatch, caplog):
    monkeypatch.delenv(widgets.DEBUG_VAR, raising=False)
    with caplog.at_level(logging.DEBUG, logger="softmax_as_linear.panels"):
        _failing_panel()
    record = next(r for r in caplog.records if r.name == "softmax_as_linear.panels")
    assert record.exc_info[0] is ZeroDivisionError and "in draw" in caplog.text
