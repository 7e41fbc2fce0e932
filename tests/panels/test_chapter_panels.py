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
    panel.controls["alpha"].value = 0.05
    assert _drawn(panel)


def test_flow_for_any_covariance_takes_a_singular_one(shell):
    panel = flow.covariance_flow_panel()
    assert _drawn(panel)
    panel.controls["kind"].value = "eigenvalues"
    panel.controls["spectrum"].value = "1, 1, 1, 1, 0"
    assert _drawn(panel), panel.note.value


@pytest.mark.parametrize("spectrum, words", [("1e9, 1, 1, 1, 1", "eigenvalues"), ("1e-9, 1, 1, 1, 1", "eigenvalues"),
                                             ("1, 1, 1, 1, -1", "eigenvalue"), ("1, 2, x", "numbers"),
                                             ("1, 2, 3", "5 eigenvalues")])
def test_flow_for_any_covariance_says_what_to_change(shell, spectrum, words):
    panel = flow.covariance_flow_panel()
    panel.controls["kind"].value = "eigenvalues"
    panel.controls["spectrum"].value = spectrum
    text = panel.note.value
    assert words in text and "below 0" not in text and "Traceback" not in text, text


def test_a_stiff_covariance_gets_a_horizon_it_can_reach(shell):
    panel = flow.covariance_flow_panel()
    panel.controls["kind"].value = "eigenvalues"
    panel.controls["spectrum"].value = "10, 1, 1, 1, 1"  # stiff: the default horizon t = 60 takes too many steps
    text = panel.note.value
    horizon = panel.controls["horizon"]
    offered = [int(w) for w in re.findall(r"\bup to (\d+)", text)]
    assert offered and horizon.min <= offered[0] < 60, text
    horizon.value = offered[0]
    assert _drawn(panel), panel.note.value


def test_the_singular_flow_converges_to_the_appendix_f3_limit():
    task = sal.RegressionTask(5, torch.diag(torch.tensor([1.0, 1, 1, 1, 0], dtype=torch.float64)))
    figure, result = flow.covariance_flow(task, alpha=0.3, horizon=400)
    U_star, V_star = sal.degenerate_limit_parameters(task, 0.3)
    assert float(((result["U"][-1] - U_star.numpy()) ** 2).sum()) < 1e-3
    assert float(((result["V"][-1] - V_star.numpy()) ** 2).sum()) < 1e-3


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
