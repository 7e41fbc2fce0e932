"""The infinite-prompt constants of Chapter 8's answer, for one draw of the features and over draws."""
import pytest

from softmax_as_linear.experiments.nonlinear import nonlinear_config
from softmax_as_linear.theory import circle_quadrature as cq
from softmax_as_linear.theory.cosine_task import CosineTask


def test_limit_constants_add_up_and_match_the_single_functions():
    task = nonlinear_config("lecture").task()
    c = cq.limit_constants(task)
    assert c["linear"] == pytest.approx(cq.linear_limit_risk(task))
    assert c["intercept"] == pytest.approx(cq.intercept_share(task))
    assert c["floor"] == pytest.approx(task.noise_var / 2)
    assert c["intercept"] + c["locality"] == pytest.approx(c["gap"])
    assert c["intercept_fraction"] == pytest.approx(c["intercept"] / c["gap"])
    assert c["linear"] == pytest.approx(0.33721, abs=1e-5) and c["intercept"] == pytest.approx(0.09965, abs=1e-5)


def test_constants_over_draws_redraws_only_the_features():
    task = nonlinear_config("lecture").task()
    out = cq.constants_over_draws(task, [0, 3])
    assert out["feature_seeds"] == [0, 3]
    assert out["linear"][0] == pytest.approx(cq.linear_limit_risk(task))
    other = CosineTask(d=2, features=64, frequency=2.0, noise_var=0.05, feature_seed=3)
    assert out["intercept"][1] == pytest.approx(cq.intercept_share(other))
    assert out["linear"][1] != pytest.approx(out["linear"][0])


@pytest.mark.parametrize("seeds, match", [([], "at least one"), ([-1], "feature_seeds")])
def test_constants_over_draws_rejects_bad_seeds(seeds, match):
    with pytest.raises(ValueError, match=match):
        cq.constants_over_draws(nonlinear_config("lecture").task(), seeds)


def test_constants_over_draws_needs_the_circle():
    with pytest.raises(ValueError, match="task"):
        cq.constants_over_draws(CosineTask(d=2, inputs="gaussian"), [0])
