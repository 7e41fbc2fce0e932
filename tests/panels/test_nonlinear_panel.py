"""Chapter 8's panels: the limit view, and one click of the training panel."""
import numpy as np
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


@pytest.fixture(scope="module")
def one_click():
    """What one click of the training panel trains and draws (its configuration, result and figure), trained and
    drawn once for the two tests below (the figure's reference risks take seconds)."""
    cfg = nonlinear.training_config(2.0, 0.05, 10, 4, 0)
    result = train(cfg, device="cpu")
    return cfg, result, nonlinear.training_figure(result)


def test_one_click_trains_and_draws(one_click):
    fig = one_click[2]
    assert "window" in fig.layout.title.text


def test_the_training_figure_draws_two_standard_errors_around_each_risk(one_click):
    cfg, result, fig = one_click
    bands = [t for t in fig.data if t.fill == "toself"]
    assert len(bands) == len(cfg.models) and "s.e." in fig.layout.yaxis.title.text
    for a, band in enumerate(bands):
        risk, se = result.eval_risk[0, 0, a], result.eval_se[0, 0, a]
        n = len(result.steps)
        assert np.isfinite(se).all() and (se > 0).all()
        assert np.allclose(band.y[:n], risk + 2 * se) and np.allclose(band.y[n:][::-1], risk - 2 * se)
