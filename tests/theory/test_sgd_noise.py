"""Gradient noise of SGD on linear attention: per-prompt gradients against autograd, the noise floor against SGD."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear.theory import flow_limits, regression, risks, sgd_noise
from softmax_as_linear.theory.attention import linear_attention

from helpers import REGRESSION_TASKS


def test_linear_attention_gradients_are_autograd_of_the_half_squared_error():
    task = REGRESSION_TASKS["kms"]()
    g = torch.Generator().manual_seed(5)
    U, V = (0.4 * torch.randn(4, 4, generator=g, dtype=torch.float64) for _ in range(2))
    batch = task.sample(3, 7, g, dtype=torch.float64)
    grads = sgd_noise.linear_attention_gradients(batch, U, V)
    for i in range(3):
        Ui, Vi = U.clone().requires_grad_(True), V.clone().requires_grad_(True)
        loss = 0.5 * (linear_attention(batch.tokens[i], batch.query[i], Ui, Vi)[-1] - batch.target[i]) ** 2
        gU, gV = torch.autograd.grad(loss, (Ui, Vi))
        torch.testing.assert_close(grads[i], torch.cat([gU.flatten(), gV.flatten()]))


@pytest.mark.slow
def test_sgd_noise_floor_is_what_sgd_leaves_at_the_optimum():
    # SGD (step 2 lr on R, as the trainer's lr on the MSE) started at the optimum of the exact risk keeps an excess
    # that only its gradient noise explains: 8 independent chains, exact excess averaged over steps 150 to 600
    task = regression.RegressionTask.isotropic(3, noise_var=0.0)
    L, lr, batch = 12, 0.05, 32
    U0, V0 = flow_limits.limit_parameters(task, L)
    best = risks.optimal_linear_risk(L, task)
    g = torch.Generator().manual_seed(0)
    per_chain = []
    for _ in range(8):
        U, V, excess = U0.clone(), V0.clone(), []
        for step in range(600):
            G = sgd_noise.linear_attention_gradients(task.sample(batch, L, g, dtype=torch.float64), U, V).mean(0)
            U, V = U - 2 * lr * G[:16].reshape(4, 4), V - 2 * lr * G[16:].reshape(4, 4)
            if step >= 150:
                excess.append(float(risks.linear_attention_risk(U, V, L, task)) - best)
        per_chain.append(np.mean(excess))
    mean, se = np.mean(per_chain), np.std(per_chain, ddof=1) / math.sqrt(len(per_chain))
    floor, floor_se = sgd_noise.sgd_noise_floor(task, L, lr, batch, n_prompts=20_000)
    assert abs(mean - floor) < 4 * math.hypot(se, floor_se), (mean, se, floor, floor_se)
    # the small-step approximation eta tr(C) / (4B) lies below it (the discrete recursion divides by 2 - eta lambda)
    assert sgd_noise.sgd_noise_floor(task, L, lr / 100, batch, n_prompts=20_000)[0] * 100 < floor
    with pytest.raises(ValueError, match="lr: SGD with step"):
        sgd_noise.sgd_noise_floor(task, L, 50.0, batch)
