"""Chapter 7's live panel: draws at its defaults; settings it cannot compute become messages naming what to change."""
import pytest
from IPython.core.interactiveshell import InteractiveShell

from softmax_as_linear.panels import depth as panel


@pytest.fixture
def shell():
    return InteractiveShell.instance()


def _drawn(p) -> bool:
    return bool(p.output.outputs) and not p.note.value


def test_the_panel_draws_and_says_what_to_change(shell):
    p = panel.depth_panel()
    assert _drawn(p), p.note.value
    p.controls["L"].value = 10_000
    p.controls["K"].value = 8
    assert "lower L" in p.note.value and not p.output.outputs
    p.controls["L"].value = 100
    assert _drawn(p), p.note.value
    p.controls["family"].value = "expanding"
    p.controls["u"].value = 1.5
    assert "lower the scale" in p.note.value


def test_the_title_names_heavy_layers():
    fig = panel.layer_figure("expanding", 2, 0.6, 0.6, 100)
    assert "heavy-tailed layers 2" in fig.layout.title.text
    fig = panel.layer_figure("quarter turns", 2, 0.45, 0.45, 100, activation="linear", mean_x=0.5)
    assert "every layer light-tailed" in fig.layout.title.text
    with pytest.raises(ValueError, match="family"):
        panel.family_weights("spirals", 2, 0.1, 0.1)


def test_the_advice_names_what_the_explosion_depends_on():
    """Linear attention's layer maps the covariance through I + V(Gamma + m m^T)U: the mean counts, and centring
    is offered when it is enough; softmax's I + V Gamma U does not see the mean."""
    with pytest.raises(ValueError) as caught:
        panel.layer_figure("rotations", 2, 1.5, 1.5, 100, activation="linear", mean_x=-1.0)
    assert "explodes by layer 2" in str(caught.value) and "bring the mean m₁ = -1 towards 0" in str(caught.value)
    panel.layer_figure("rotations", 2, 1.5, 1.5, 100, activation="linear", mean_x=0.0)  # centred: it draws
    panel.layer_figure("rotations", 2, 1.5, 1.5, 100, activation="softmax", mean_x=-1.0)  # the mean does not count
    with pytest.raises(ValueError) as caught:
        panel.layer_figure("expanding", 3, 1.5, 1.5, 100, activation="softmax", mean_x=-1.0)
    assert "does not depend on the tokens' mean" in str(caught.value) and "mean m₁" not in str(caught.value)
    with pytest.raises(ValueError) as caught:
        panel.layer_figure("expanding", 3, 1.5, 1.5, 100, activation="linear", mean_x=-1.0)
    assert "at m₁ = 0 it explodes too" in str(caught.value)
