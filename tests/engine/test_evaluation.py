"""Final risks of a trained sweep: on fresh prompts (paired between activations, reproducible), and the
exact risk of the linear runs, and the risks of the infinite-prompt models."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear.engine.evaluation import final_evaluation
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train

TINY = dict(lengths=(4, 12), steps=30, lr=1e-2, record_every=10, batch_size=32, eval_prompts=128)


@pytest.fixture(scope="module", params=["paper", "published"])
def tiny_sweep(request):
    cfg = TrainConfig(covariance="kms", sampler=request.param, seeds=(327, 3), **TINY)
    return train(cfg, device="cpu")


def test_final_evaluation_matches_the_exact_linear_risk(tiny_sweep):
    ev = final_evaluation(tiny_sweep, n_prompts=30_000, device="cpu", dtype=torch.float64)
    S, nL, nA = tiny_sweep.eval_risk.shape[:3]
    assert ev["risk"].shape == (S, nL, nA) and ev["linear_exact"].shape == (S, nL)
    lin = tiny_sweep.config.models.index("linear")
    z = (ev["risk"][..., lin] - ev["linear_exact"]) / ev["risk_se"][..., lin]
    assert np.all(np.abs(z) < 5), z
    assert np.all(ev["risk_se"] < 0.02 * ev["risk"])
    # the same prompts for both activations: the paired difference is the difference of the two means
    soft = tiny_sweep.config.models.index("softmax")
    assert np.allclose(ev["paired_difference"], ev["risk"][..., soft] - ev["risk"][..., lin], rtol=1e-9, atol=1e-12)
    assert np.all(ev["paired_difference_se"] < ev["risk_se"][..., soft])
    # reproducible: one generator per (seed, L), stream "evaluation" (one chunk at either size, so fewer prompts do)
    first, again = (final_evaluation(tiny_sweep, n_prompts=2_000, device="cpu", dtype=torch.float64)
                    for _ in range(2))
    assert np.array_equal(again["risk"], first["risk"])


def test_final_evaluation_bad_input(tiny_sweep):
    with pytest.raises(ValueError, match="n_prompts"):
        final_evaluation(tiny_sweep, n_prompts=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_final_evaluation_cuda(tiny_sweep):
    ev = final_evaluation(tiny_sweep, n_prompts=100_000, device="cuda")
    lin = tiny_sweep.config.models.index("linear")
    z = (ev["risk"][..., lin] - ev["linear_exact"]) / ev["risk_se"][..., lin]
    assert np.all(np.abs(z) < 5), z


def test_final_evaluation_scores_the_infinite_prompt_models():
    from softmax_as_linear.theory.limit_model import infinite_prompt_risk_estimate
    from softmax_as_linear.theory.risks import infinite_prompt_risk

    cfg = TrainConfig(covariates="rademacher", lengths=(6,), models=("softmax", "linear", "softmax_limit", "linear_limit"),
                      seeds=(1,), steps=20, lr=0.05, batch_size=32, record_every=10, eval_prompts=32, dtype="float64")
    result = train(cfg)
    evaluation = final_evaluation(result, n_prompts=40_000, dtype=torch.float64)
    U, V = (torch.as_tensor(m[0, 0, :, -1]) for m in result.uv())
    task = cfg.task()
    linear = float(infinite_prompt_risk(U[3], V[3], task, activation="linear"))
    assert abs(evaluation["risk"][0, 0, 3] - linear) < 4 * evaluation["risk_se"][0, 0, 3]
    softmax, se = infinite_prompt_risk_estimate(U[2], V[2], task, 1 << 17)
    assert abs(evaluation["risk"][0, 0, 2] - float(softmax)) < 4 * math.hypot(evaluation["risk_se"][0, 0, 2], float(se))
    assert np.isfinite(evaluation["paired_difference"][0, 0]) and np.isfinite(evaluation["linear_exact"][0, 0])
