"""Feature moments on the circle by the trapezoid rule, and the infinite-prompt risks of linear attention they give."""
import math

import numpy as np
import pytest
import torch
from scipy import special

from softmax_as_linear.experiments.nonlinear import nonlinear_config
from softmax_as_linear.theory import circle_quadrature as cq
from softmax_as_linear.theory.cosine_task import CosineTask


@pytest.fixture(scope="module")
def task():
    return nonlinear_config("lecture").task()


def test_moments_match_the_bessel_closed_forms(task):
    # E cos(w.x + b) = J0(|w|) cos b; E x cos(w.x + b) = -J1(|w|) w/|w| sin b; E cos^2 = 1/2 + J0(2|w|) cos(2b) / 2
    m = cq.feature_moments(task)
    omega, b = task.omega.numpy(), task.phase.numpy()
    r = np.linalg.norm(omega, axis=1)
    scale = math.sqrt(2 / task.features)
    assert np.allclose(m["mean"].numpy(), scale * special.j0(r) * np.cos(b), atol=1e-13, rtol=0)
    cross = -scale * special.j1(r) * np.sin(b) * (omega / r[:, None]).T
    assert np.allclose(m["cross"].numpy(), cross, atol=1e-13, rtol=0)
    second = (2 / task.features) * (0.5 + 0.5 * special.j0(2 * r) * np.cos(2 * b)).sum()
    assert m["second"] == pytest.approx(second, abs=1e-12)


def test_risks_against_monte_carlo(task):
    # Independent Monte Carlo: the least-squares fit of f_a on (1, x) and on x over random inputs, for random a
    g = torch.Generator().manual_seed(5)
    x = task.draw_inputs((1 << 15,), g)
    a = torch.randn(task.features, 256, generator=g, dtype=torch.float64)
    f = task.feature_map(x) @ a  # (n, functions)
    residual_lin = f - x @ torch.linalg.lstsq(x, f).solution
    design = torch.cat([torch.ones_like(x[:, :1]), x], -1)
    residual_aff = f - design @ torch.linalg.lstsq(design, f).solution
    for residual, exact in ((residual_lin, cq.linear_limit_risk(task)), (residual_aff, cq.affine_limit_risk(task))):
        per_function = 0.5 * (residual ** 2).mean(0) + 0.5 * task.noise_var
        mean, se = float(per_function.mean()), float(per_function.std() / math.sqrt(per_function.numel()))
        assert abs(mean - exact) < 4 * se + 1e-3
    share = 0.5 * (f.mean(0) ** 2)
    assert abs(float(share.mean()) - cq.intercept_share(task)) < 4 * float(share.std() / math.sqrt(256)) + 1e-3


def test_lecture_values_and_the_affine_reference(task):
    assert cq.linear_limit_risk(task) == pytest.approx(0.33721, abs=1e-5)
    assert cq.intercept_share(task) == pytest.approx(0.09966, abs=1e-5)
    value, se = task.best_affine_risk()
    assert abs(cq.affine_limit_risk(task) - value) < 4 * se
    assert abs(cq.zero_limit_risk(task) - task.zero_risk()) < 1e-3
    assert cq.linear_limit_risk(task, 128) == pytest.approx(cq.linear_limit_risk(task, 1024), abs=1e-13)
    assert cq.affine_limit_risk(task) < cq.linear_limit_risk(task) < cq.zero_limit_risk(task)


def test_only_the_circle_is_taken():
    with pytest.raises(ValueError, match="task"):
        cq.linear_limit_risk(CosineTask(d=3))
    with pytest.raises(ValueError, match="task"):
        cq.feature_moments(CosineTask(d=2, inputs="gaussian"))
    with pytest.raises(ValueError, match="nodes"):
        cq.circle_nodes(2)
