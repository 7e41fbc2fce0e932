"""Argument checks: each failure is a ValueError that names the argument."""
import math

import pytest
import torch

from softmax_as_linear.core import checks


def test_integers():
    assert checks.positive_int("n", 3) == 3 and checks.positive_int("n", 4.0) == 4
    assert checks.int_at_least("steps", 0, 0) == 0
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            checks.positive_int("n", bad)
    with pytest.raises(ValueError, match="order must be an integer >= 2"):
        checks.int_at_least("order", 1, 2)


def test_floats_and_choices():
    assert checks.positive_float("lr", "0.5") == 0.5
    assert checks.positive_float("noise", 0, allow_zero=True) == 0.0
    for bad in (0, -1, math.inf, math.nan, "x"):
        with pytest.raises(ValueError, match="lr"):
            checks.positive_float("lr", bad)
    assert checks.number("angle", "-30") == -30.0
    for bad, words in ((math.nan, "finite"), (math.inf, "finite"), ("x", "a number"), (None, "a number")):
        with pytest.raises(ValueError, match=f"angle must be {words}"):
            checks.number("angle", bad)
    assert checks.in_open_interval("rho", 0.5, -1, 1) == 0.5
    for bad in (1, -1, 2.0, math.nan, "x"):
        with pytest.raises(ValueError, match="rho"):
            checks.in_open_interval("rho", bad, -1, 1)
    assert checks.one_of("kind", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError, match="kind must be one of 'a', 'b'; got 'c'"):
        checks.one_of("kind", "c", ("a", "b"))


def test_tensors():
    assert checks.as_float_tensor("x", [1, 2]).is_floating_point()
    with pytest.raises(ValueError, match="x must be a tensor"):
        checks.as_float_tensor("x", object())
    with pytest.raises(ValueError, match="U must have shape"):
        checks.square("U", torch.zeros(2, 3))
    with pytest.raises(ValueError, match="q must have last dimension 3"):
        checks.vector("q", torch.zeros(2), 3)
    with pytest.raises(ValueError, match="t contains NaN"):
        checks.finite("t", torch.tensor([math.nan]))
    with pytest.raises(ValueError, match="C must be symmetric"):
        checks.covariance("C", torch.tensor([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="C must be positive definite"):
        checks.covariance("C", torch.zeros(2, 2))


def test_number_list_reads_numbers_typed_as_text():
    assert checks.number_list("eigenvalues", "1, 1; 0.2,") == [1.0, 1.0, 0.2]
    with pytest.raises(ValueError, match="eigenvalues must be numbers separated by commas"):
        checks.number_list("eigenvalues", "1, x")
    with pytest.raises(ValueError, match="eigenvalues must be text"):
        checks.number_list("eigenvalues", 3)


def test_integers_of_numpy_and_torch_are_integers():
    import numpy as np

    for good in (np.int64(10), np.int32(10), np.uint8(10), np.array(10), torch.tensor(10),
                 torch.tensor(10, dtype=torch.int16), 10.0, np.float64(10.0)):
        assert checks.positive_int("L", good) == 10 and type(checks.positive_int("L", good)) is int
    for bad in (np.int64(0), np.bool_(True), torch.tensor(True), torch.tensor(1.5), torch.tensor([10]),
                np.array([10]), math.inf, math.nan):
        with pytest.raises(ValueError, match="L must be an integer >= 1"):
            checks.positive_int("L", bad)
