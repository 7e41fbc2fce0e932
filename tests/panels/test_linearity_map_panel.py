"""Chapter 9's live panel: draws at its defaults, switches the measure's variant, says what to do with no regime."""
import pytest
from IPython.core.interactiveshell import InteractiveShell

from softmax_as_linear.panels import linearity_map as panel


@pytest.fixture
def shell():
    return InteractiveShell.instance()


def _drawn(p) -> bool:
    return bool(p.output.outputs) and not p.note.value


def test_the_panel_draws_and_switches_variant(shell):
    p = panel.linearity_map_panel()
    assert _drawn(p), p.note.value
    p.controls["regimes"].value = ("isotropic", "nonlinear_optima")
    p.controls["variant"].value = "share of linear attention's excess risk"
    assert _drawn(p), p.note.value
    p.controls["theory"].value = False
    assert _drawn(p), p.note.value
    p.controls["regimes"].value = ()
    assert "pick at least one regime" in p.note.value and not p.output.outputs


def test_the_figure_of_a_choice():
    fig = panel.map_figure(["uniform", "nonlinear_optima"], "excess")
    assert fig.layout.yaxis.title.text.startswith("(R_lin")
    assert sum(t.name.startswith("theory") for t in fig.data) == 1
