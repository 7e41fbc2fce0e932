"""Plane helpers of Chapters 1 and 2: rotations are orthogonal and compose, ellipses are contours of the covariance,
points split into x and y."""
import numpy as np
import pytest
import torch

from softmax_as_linear.figures import geometry


def test_rotation_is_orthogonal_and_turns_e1_by_the_angle():
    R = geometry.rotation(30)
    assert torch.allclose(R @ R.T, torch.eye(2, dtype=torch.float64), atol=1e-15)
    assert torch.allclose(R @ torch.tensor([1.0, 0.0], dtype=torch.float64),
                          torch.tensor([3**0.5 / 2, 0.5], dtype=torch.float64), atol=1e-15)
    assert torch.allclose(geometry.rotation(30) @ geometry.rotation(60), geometry.rotation(90), atol=1e-15)


def test_xy_splits_and_rounds():
    x, y = geometry.xy(torch.tensor([[0.123456, 1.0], [2.0, -3.000049]], dtype=torch.float64))
    np.testing.assert_array_equal(x, [0.1235, 2.0])
    np.testing.assert_array_equal(y, [1.0, -3.0])


def test_ellipse_is_the_contour_of_the_covariance():
    cov = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    center = torch.tensor([1.0, -1.0], dtype=torch.float64)
    points = geometry.ellipse(center, cov, n_sd=2.0)
    offsets = points - center
    mahalanobis = (offsets @ torch.linalg.inv(cov) * offsets).sum(-1)     # 2 standard deviations: distance 2^2
    assert points.shape == (61, 2) and torch.allclose(mahalanobis, torch.full((61,), 4.0, dtype=torch.float64))


@pytest.mark.parametrize("call, match", [
    (lambda: geometry.rotation("thirty"), "degrees"),
    (lambda: geometry.rotation(float("nan")), "degrees"),
    (lambda: geometry.xy(np.zeros((3, 3))), "points"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
