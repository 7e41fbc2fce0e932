"""A zero up to rounding prints as a bound, or as 0. without the sign of its noise."""
import numpy as np
import pytest

from softmax_as_linear.core.printing import bound, rounded


def test_a_zero_up_to_rounding_prints_as_a_bound_whatever_its_noise():
    assert bound(8e-18) == bound(-1e-17) == bound(0.0) == "< 1e-12"
    assert bound(3.2e-4) == "3.2e-04" and bound(2e-9, below=1e-9, fmt=".0e") == "2e-09"


def test_a_bound_must_be_positive():
    with pytest.raises(ValueError, match="below"):
        bound(1.0, below=0)


def test_rounded_entries_lose_the_sign_of_their_noise():
    one, other = rounded([1.3333, -0.6667, -1e-17, 1e-17], 3), rounded([1.3333, -0.6667, 1e-17, -1e-17], 3)
    assert str(one) == str(other) == "[ 1.333 -0.667  0.     0.   ]"
    assert np.signbit(one).tolist() == np.signbit(other).tolist() == [False, True, False, False]
