"""Chapter 8's panels: the limit view, and one click of the training panel."""
import pytest

from softmax_as_linear.engine.train import train
from softmax_as_linear.panels import nonlinear


def test_limit_view_draws_the_limits_and_a_finite_prompt():
    fig = nonlinear.limit_view(1.0, 0.5, 0.05, 100, 0, n_prompts=4, n_points=5)
    assert len(fig.data) == 4


def test_limit_view_draws_the_quadratic_family():
    fig = nonlinear.limit_view(1.0, 0.5, 0.05, 100, 0, n_prompts=4, n_points=5, family="quadratic")
    assert fig.layout.title.text.startswith("quadratic") and len(fig.data) == 4
    with pytest.raises(ValueError, match="family"):
        nonlinear.limit_view(1.0, 0.5, 0.05, 100, 0, family="cubic")


def test_limit_view_names_a_bad_window():
    with pytest.raises(ValueError, match="window"):
        nonlinear.limit_view(1.0, 10.0, 0.05, 100, 0)


def test_the_panels_build():
    assert nonlinear.limit_panel().controls["L"].value == nonlinear.LIMIT_PANEL["L"]
    panel = nonlinear.nonlinear_training_panel()
    assert set(panel.controls) == set(nonlinear.TRAINING_PANEL)


def test_one_click_trains_and_draws():
    cfg = nonlinear.training_config(2.0, 0.05, 10, 4, 0)
    fig = nonlinear.training_figure(train(cfg, device="cpu"))
    assert "window" in fig.layout.title.text
