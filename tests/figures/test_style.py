"""Static slider figures: each step shows its own panel plus the fixed traces, and nothing else."""
import plotly.graph_objects as go
import pytest

from softmax_as_linear.figures import style


def test_fixed_traces_show_under_every_panel():
    panels = [(f"p{i}", [go.Scatter(x=[i], y=[i]), go.Scatter(x=[i], y=[-i])]) for i in range(3)]
    fixed = [go.Scatter(x=[0, 1], y=[0, 1], name="fixed")]
    fig = style.slider_figure(panels, slider_label="i", active=1, fixed=fixed)
    assert len(fig.data) == 1 + 3 * 2
    assert fig.data[0].name == "fixed" and fig.data[0].visible is not False
    assert [t.visible for t in fig.data[1:]] == [False, False, True, True, False, False]
    for index, step in enumerate(fig.layout.sliders[0].steps):
        visible = step.args[0]["visible"]
        assert visible == [True] + [owner == index for owner in (0, 0, 1, 1, 2, 2)]


def test_without_fixed_traces_the_steps_are_unchanged():
    panels = [("a", [go.Scatter(x=[0], y=[0])]), ("b", [go.Scatter(x=[1], y=[1])])]
    fig = style.slider_figure(panels, slider_label="s")
    assert [step.args[0]["visible"] for step in fig.layout.sliders[0].steps] == [[True, False], [False, True]]


def test_bad_active_panel():
    with pytest.raises(ValueError, match="active"):
        style.slider_figure([("a", [go.Scatter(x=[0], y=[0])])], slider_label="s", active=3)
