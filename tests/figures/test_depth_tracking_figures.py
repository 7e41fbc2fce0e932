"""The tracking figure: one band and one line per label, and a 1/L guide; a wrong number of points is refused."""
import numpy as np
import pytest

from softmax_as_linear.core import stats
from softmax_as_linear.figures.depth_tracking import tracking_sup_figure


def test_tracking_sup_figure():
    rows = np.abs(np.random.default_rng(0).normal(size=(3, 4))) + 0.1
    fig = tracking_sup_figure([8, 16, 32], {"K = 1": stats.estimate(rows), "K = 2": stats.estimate(2 * rows)},
                              quantity="sup gap", n_seeds=4)
    assert len(fig.data) == 5 and fig.layout.xaxis.type == "log"
    with pytest.raises(ValueError, match="K = 1"):
        tracking_sup_figure([8, 16], {"K = 1": stats.estimate(rows)}, quantity="q", n_seeds=4)
