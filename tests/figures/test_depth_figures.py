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
