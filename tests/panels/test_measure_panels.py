"""The live panels of Chapters 1 and 2 without a browser: each draws at its defaults from the data of
:mod:`softmax_as_linear.experiments.live_measures`, and a query outside the tilt domain names what to change."""
import math

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

from softmax_as_linear.panels import measures
from softmax_as_linear.theory.measures import TokenLaw

F64 = dict(dtype=torch.float64)


@pytest.fixture
def shell():
    return InteractiveShell.instance()


def _circle(n=25, radius=1.5):
    angles = torch.linspace(0, 2 * math.pi, n, **F64)
    return radius * torch.stack([angles.cos(), angles.sin()], dim=-1)


def _drawn(panel) -> bool:
    return bool(panel.output.outputs) and not panel.note.value


def test_measure_panel_draws_and_names_the_scale_of_U_outside_the_tilt_domain(shell):
    laws = {kind: TokenLaw.standard(kind, 2) for kind in ("gaussian", "uniform", "laplace")}
    panel = measures.measure_panel(laws, torch.eye(2, **F64), torch.eye(2, **F64), _circle())
    assert _drawn(panel), panel.note.value
    panel.controls["L"].value = 100
    panel.controls["law"].value = "uniform"
    assert _drawn(panel), panel.note.value
    panel.controls["law"].value = "laplace"
    panel.controls["scale"].value = 1.5      # Uz has a coordinate above sqrt(2) in the Laplace law's scale
    assert "Lower the scale of U" in panel.note.value


def test_lemma_panel_draws(shell):
    panel = measures.lemma_panel(_circle())
    assert _drawn(panel), panel.note.value
    panel.controls["z1"].value = -0.5
    assert _drawn(panel), panel.note.value
