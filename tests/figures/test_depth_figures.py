"""Chapter 7's figures: token clouds against the recursion, distances against L, tail indices, separation."""
import numpy as np
import pytest
import torch

from softmax_as_linear.core import stats
from softmax_as_linear.figures import depth as figures
from softmax_as_linear.theory import depth


def test_layer_cloud_figure_has_one_panel_per_layer():
    U = 0.4 * torch.eye(2, dtype=torch.float64).expand(2, 2, 2)
    finite, path = depth.layer_outputs(torch.zeros(2), torch.eye(2), U, U, L=50, n_prompts=3, seed=0)
    fig = figures.layer_cloud_figure(finite.tokens[:, 0], path.means, path.covs, finite.queries, path.queries, length=50)
    assert len(fig.layout.sliders[0].steps) == 3
    assert sum(trace.visible is True for trace in fig.data) == 5  # cloud, two ellipses, two sets of queries
    with pytest.raises(ValueError, match="must agree"):
        figures.layer_cloud_figure(finite.tokens[:, 0], path.means[:2], path.covs, length=50)


def test_gap_tail_and_separation_figures():
    lengths = [10, 100, 1000]
    rng = np.random.default_rng(0)
    estimates = {"K = 1": stats.estimate(rng.random((3, 8)) / np.array(lengths)[:, None])}
    fig = figures.depth_gap_figure(lengths, estimates, n_prompts=8)
    assert fig.layout.xaxis.type == "log" and any(t.name == "slope −1" for t in fig.data)
    with pytest.raises(ValueError, match="points"):
        figures.depth_gap_figure([10, 100], estimates, n_prompts=8)
    assert len(figures.tail_index_figure({"a": [0.2, 0.7]}).data) == 1
    fig = figures.separation_figure(np.array([0, 0.3]), np.array([0, 0.01]), np.array([0, 0.29]), length=10, n_prompts=4)
    assert len(fig.data) == 2


def _chapter_7_figures():
    from softmax_as_linear.figures.depth_regression import depth_risk_figure
    from softmax_as_linear.figures.depth_tracking import tracking_sup_figure

    U = 0.4 * torch.eye(2, dtype=torch.float64).expand(2, 2, 2)
    finite, path = depth.layer_outputs(torch.zeros(2), torch.eye(2), U, U, L=50, n_prompts=3, seed=0)
    lengths = [10, 20, 40]
    estimates = {f"K = {K}": stats.estimate(np.random.default_rng(K).random((3, 8))) for K in (1, 2, 4, 8)}
    models = ("softmax_1", "softmax_2", "linear_1", "linear_2")
    summary = {"lengths": lengths, "seeds": [0, 1, 2], "mean": {m: np.full(3, 0.3) for m in models},
               "se": {m: np.full(3, 0.01) for m in models}}
    references = {name: [0.4, 0.3, 0.2] for name in ("optimal_linear", "pgd_2", "bayes")}
    return {
        "clouds": figures.layer_cloud_figure(finite.tokens[:, 0], path.means, path.covs, finite.queries, path.queries,
                                             length=50),
        "gap": figures.depth_gap_figure(lengths, estimates, n_prompts=8),
        "tail": figures.tail_index_figure({"a": [0.2, 0.7], "b": [0.3, 0.4]}),
        "separation": figures.separation_figure(np.array([0, 0.3]), np.array([0, 0.01]), np.array([0, 0.29]),
                                                length=10, n_prompts=4),
        "risk": depth_risk_figure(summary, references, np.full((3, 3), 0.25)),
        "tracking": tracking_sup_figure(lengths, estimates, quantity="sup over t of E(ŷ_L − ŷ_∞)²", n_seeds=4),
    }


@pytest.mark.parametrize("name", ["clouds", "gap", "tail", "separation", "risk", "tracking"])
def test_chapter_7_figures_keep_their_axes_at_a_phones_width(name):
    """The legend runs horizontally under (or, over a slider, above) the axes instead of taking half a 390 px screen
    at their right, and the y-axis title fits the axes' height (at 7 px a character of the 13 px font), so that it
    does not run into the figure's title."""
    fig = _chapter_7_figures()[name]
    layout = fig.layout
    assert layout.legend.orientation == "h" and (layout.legend.y < 0 or layout.legend.y > 1)
    template = layout.template.layout.margin
    axes_height = layout.height - (layout.margin.t or template.t) - (layout.margin.b or template.b)
    assert 7 * len(layout.yaxis.title.text) <= axes_height, (layout.yaxis.title.text, axes_height)
    assert axes_height >= 300
