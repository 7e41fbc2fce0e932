"""The chunked mean and standard deviation against numpy, on data where the textbook formula fails."""
import numpy as np
import pytest
import torch

from softmax_as_linear.engine.moments import Moments


@pytest.mark.parametrize("offset", [0.0, 1e4, 1e8])
def test_chunked_moments_equal_numpy_even_when_the_mean_dwarfs_the_spread(offset):
    g = np.random.default_rng(0)
    values = offset + g.standard_normal((3, 1000)) * np.array([[1.0], [1e-3], [1e2]])
    moments = Moments()
    for start, stop in ((0, 1), (1, 300), (300, 301), (301, 1000)):  # uneven chunks, one of a single value
        moments.add(torch.from_numpy(values[:, start:stop]))
    assert moments.n == 1000
    np.testing.assert_allclose(moments.mean.numpy(), values.mean(-1), rtol=1e-13)
    np.testing.assert_allclose(moments.sd.numpy(), values.std(-1, ddof=1), rtol=1e-6)  # data precision: 1e-8 / 1e-3


def test_the_textbook_formula_fails_where_moments_do_not():
    values = 1e8 + np.random.default_rng(1).standard_normal(1000)
    n, mean = len(values), values.sum() / len(values)
    textbook = np.sqrt(max((values**2).sum() - n * mean**2, 0.0) / (n - 1))
    exact = values.std(ddof=1)
    assert abs(textbook - exact) > 0.1 * exact  # what the helper replaces
    assert float(Moments().add(torch.from_numpy(values)).sd) == pytest.approx(exact, rel=1e-7)


def test_one_value_has_zero_spread():
    moments = Moments().add(torch.tensor([[2.5]]))
    assert float(moments.mean) == 2.5 and float(moments.sd) == 0.0
