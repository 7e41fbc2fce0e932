"""Chapter 8's figures of the trained windows, drawn from the stored lecture result."""
import numpy as np
import pytest

from softmax_as_linear.experiments.result_files import saved_nonlinear
from softmax_as_linear.figures import nonlinear as figures


@pytest.fixture(scope="module")
def data():
    return saved_nonlinear("lecture", required=True)


def test_window_figure_draws_every_run_and_fits_no_power_law(data):
    fig = figures.window_figure(data, 0.4)
    soft = data["models"].index("softmax")
    w = np.asarray(data["windows"]["w"])[:, :, soft]
    markers = [t for t in fig.data if t.mode == "markers"]
    assert sum(len(t.y) for t in markers) == w.size
    assert sorted(np.concatenate([t.y for t in markers])) == pytest.approx(sorted(w.ravel()))
    assert not any("fit" in (t.name or "") for t in fig.data)
    assert "narrows" not in fig.layout.title.text


def test_window_paths_figure_draws_the_recorded_windows(data):
    fig = figures.window_paths_figure(data, 1)
    soft = data["models"].index("softmax")
    paths = np.asarray(data["trajectories"]["w"])[1, :, soft]
    assert len(fig.data) == len(data["references"]["lengths"])
    for trace, path in zip(fig.data, paths):
        np.testing.assert_allclose(trace.y, path[1:])
    with pytest.raises(ValueError, match="seed_index"):
        figures.window_paths_figure(data, 9)


def test_risk_figure_draws_linear_attention_s_bound_when_given(data):
    plain, bounded = figures.risk_figure(data), figures.risk_figure(data, 0.337)
    assert len(bounded.data) == len(plain.data) + 1
    line = [t for t in bounded.data if "bound" in (t.name or "")]
    assert len(line) == 1 and np.allclose(line[0].y, 0.337)
