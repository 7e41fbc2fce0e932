"""The chapters' live panels without a browser: each draws at its defaults, and a setting it cannot
compute shows a message that names what to change in that panel, in the chapter's notation."""
import re

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

import softmax_as_linear as sal
from softmax_as_linear.panels import concentration, flow


@pytest.fixture
def shell():
    return InteractiveShell.instance()


def _drawn(panel) -> bool:
    return bool(panel.output.outputs) and not panel.note.value


def test_flow_panel_of_chapter_4_draws(shell):
    panel = flow.flow_panel(sal.RegressionTask.isotropic(5))
    assert _drawn(panel)
    panel.controls["horizon"].value = panel.controls["horizon"].min  # t = 5, not 30: 6 times fewer steps
    assert _drawn(panel)
    panel.controls["alpha"].value = 0.05
    assert _drawn(panel)


@pytest.fixture(scope="module")
def eigenvalue_panel():
    """Chapter 5's panel, drawn once at its defaults, then set to eigenvalues at the shortest horizon (each
    redraw integrates the flow: the tests below change one control at a time on this one panel)."""
    InteractiveShell.instance()
    panel = flow.covariance_flow_panel()
    assert _drawn(panel), panel.note.value
    controls = panel.controls
    # The held changes of kind and horizon reach the panel after the spectrum's: each of the redraws they start
    # fails at once on the empty spectrum, with no flow to integrate.
    with controls["kind"].hold_trait_notifications(), controls["horizon"].hold_trait_notifications():
        controls["horizon"].value = controls["horizon"].min
        controls["kind"].value = "eigenvalues"
        controls["spectrum"].value = ""
    return panel


def _set_spectrum(panel, spectrum):
    # First a setting that fails at once (no flow to integrate), so that the next one is a change; its figure
    # is cleared and its message blanked here, so that what the tests read can only come from the redraw for
    # ``spectrum``.
    panel.controls["spectrum"].value = ""
    assert not panel.output.outputs and "give 5 eigenvalues" in panel.note.value, panel.note.value
    panel.note.value = ""
    panel.controls["spectrum"].value = spectrum


def test_flow_for_any_covariance_takes_a_singular_one(eigenvalue_panel):
    _set_spectrum(eigenvalue_panel, "1, 1, 1, 1, 0")
    assert _drawn(eigenvalue_panel), eigenvalue_panel.note.value


@pytest.mark.parametrize("spectrum, words", [("1e9, 1, 1, 1, 1", "eigenvalues"), ("1e-9, 1, 1, 1, 1", "eigenvalues"),
                                             ("1, 1, 1, 1, -1", "eigenvalue"), ("1, 2, x", "numbers"),
                                             ("1, 2, 3", "5 eigenvalues")])
def test_flow_for_any_covariance_says_what_to_change(eigenvalue_panel, spectrum, words):
    _set_spectrum(eigenvalue_panel, spectrum)
    text = eigenvalue_panel.note.value
    assert words in text and "below 0" not in text and "Traceback" not in text, text


def test_a_stiff_covariance_gets_a_horizon_it_can_reach(eigenvalue_panel, monkeypatch):
    # A budget of 250 Runge-Kutta steps per redraw (the panel's is 20,000, tens of seconds on a CPU) makes
    # Sigma = diag(3, 1, 1, 1, 1) (steps of 0.086) stiff at the horizon t = 60: the message offers the horizon the
    # budget reaches (20, which is above the shortest, 10).
    monkeypatch.setattr(flow, "MAX_STEPS", 250)
    panel, horizon = eigenvalue_panel, eigenvalue_panel.controls["horizon"]
    _set_spectrum(panel, "3, 1, 1, 1, 1")
    assert _drawn(panel), panel.note.value  # at the shortest horizon the budget suffices
    horizon.value = 60
    text = panel.note.value
    offered = [int(w) for w in re.findall(r"\bup to (\d+)", text)]
    assert offered and horizon.min <= offered[0] < 60, text
    horizon.value = offered[0]
    assert _drawn(panel), panel.note.value


@pytest.mark.slow
def test_gap_panel_draws_and_explains_the_laplace_law(shell):
    D = 5
    U = torch.eye(D, dtype=torch.float64)
    panel = concentration.gap_panel(U, U, lengths=[10, 30, 100, 300])
    assert _drawn(panel)
    panel.controls["law"].value = "laplace"
    text = panel.note.value
    assert "σ" in text and "‖U‖" in text and "C^T" not in text and "query or" not in text, text
    panel.controls["sigma"].value = 0.1
    panel.controls["norm_U"].value = 0.25
    assert _drawn(panel), panel.note.value


def test_gap_panel_asks_for_three_lengths(shell):
    U = torch.eye(5, dtype=torch.float64)
    panel = concentration.gap_panel(U, U, lengths=[10, 30, 100, 300])
    panel.controls["L_range"].value = (10, 30)
    assert "3 lengths" in panel.note.value


def test_every_chapter_panel_is_a_library_call():
    import json
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and re.search(r"\b(widgets\.panel|W\.[A-Z]\w+)\(", source):
                raise AssertionError(f"{notebook.name} builds a panel itself:\n{source[:300]}")
