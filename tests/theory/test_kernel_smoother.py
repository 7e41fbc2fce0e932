"""Softmax attention on the sphere as a Nadaraya-Watson smoother."""
import pytest
import torch

from softmax_as_linear.theory import kernel_smoother as ks
from softmax_as_linear.theory.cosine_task import CosineTask


def test_on_the_sphere_softmax_weights_are_gaussian_kernel_weights():
    task = CosineTask(d=3, features=8)
    batch = task.sample(4, 50, torch.Generator().manual_seed(0), torch.float64)
    for w in (0.5, 20.0, 300.0):
        assert torch.allclose(ks.softmax_weights(batch.tokens, batch.query, w),
                              ks.kernel_weights(batch.tokens, batch.query, w), atol=1e-12)
    off = CosineTask(d=3, features=8, inputs="gaussian").sample(4, 50, torch.Generator().manual_seed(0), torch.float64)
    assert not torch.allclose(ks.softmax_weights(off.tokens, off.query, 5.0), ks.kernel_weights(off.tokens, off.query, 5.0))


def test_the_window_narrows_with_w():
    task = CosineTask(d=2, features=8)
    batch = task.sample(64, 200, torch.Generator().manual_seed(1), torch.float64)
    ess = [float(ks.effective_sample_size(batch.tokens, batch.query, w).mean()) for w in (0.0, 10.0, 100.0)]
    assert abs(ess[0] - 200) < 1e-9 and ess[0] > ess[1] > ess[2] > 1


def test_best_bandwidth_is_interior_and_beats_its_neighbours():
    task = CosineTask(d=2, features=32, frequency=2.0, noise_var=0.05)
    best = ks.best_bandwidth(task, 100, grid=[1.0, 10.0, 60.0, 1000.0], n_prompts=256)
    assert best["w"] in (10.0, 60.0)
    risks, _ = ks.bandwidth_risks(task, 100, [1.0, best["w"], 1000.0], n_prompts=256)
    assert risks[1] < risks[0] and risks[1] < risks[2]


def test_the_infinite_prompt_smoother_is_the_long_prompt_one():
    task = CosineTask(d=2, features=16, frequency=2.0, noise_var=0.0)
    losses = ks.circle_limit_losses(task, [5.0, 50.0], n_samples=64, seed=3)
    assert losses.shape == (2, 64) and bool((losses[1].mean() < losses[0].mean()))
    # against a prompt of 10,000 tokens, same tasks and queries: over prompt seeds its mean loss strays from the
    # limit by at most 1.3% (40,000 tokens: 0.5%), well inside the 5% allowed; the limit moves by 11% to 13% when w
    # is off by 10%
    g = torch.Generator().manual_seed(3)
    a = torch.randn(64, 16, generator=g, dtype=torch.float64)
    x_q = task.draw_inputs((64,), g)
    x = task.draw_inputs((64, 10_000), torch.Generator().manual_seed(9))
    tokens = torch.cat([x, task.function(a, x).unsqueeze(-1)], -1)
    query = torch.cat([x_q, torch.zeros(64, 1, dtype=torch.float64)], -1)
    finite = 0.5 * (ks.nadaraya_watson(tokens, query, 5.0) - task.function(a, x_q.unsqueeze(1))[:, 0]) ** 2
    assert abs(float(finite.mean() - losses[0].mean())) < 0.05 * float(losses[0].mean()) + 1e-4


@pytest.mark.parametrize("function", ["kernel_weights", "softmax_weights", "nadaraya_watson", "effective_sample_size"])
def test_the_smoother_names_a_wrong_argument_and_takes_numpy_arrays(function):
    import numpy as np

    from softmax_as_linear.theory import kernel_smoother

    tokens = torch.randn(4, 6, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    query = torch.tensor([[1.0, 0.0, 0.0]] * 4, dtype=torch.float64)
    call = getattr(kernel_smoother, function)
    assert torch.equal(call(tokens.numpy(), query.numpy(), np.float64(2.0)), call(tokens, query, 2.0))
    with pytest.raises(ValueError, match="query"):
        call(tokens, torch.ones(4, 2, dtype=torch.float64), 2.0)
    with pytest.raises(ValueError, match="query"):
        call(tokens, torch.tensor(1.0), 2.0)
    with pytest.raises(ValueError, match="tokens"):
        call(torch.tensor(1.0), query, 2.0)
    with pytest.raises(ValueError, match="query's leading dimensions"):
        call(tokens, torch.ones(3, 3, dtype=torch.float64), 2.0)  # three queries for four prompts
    with pytest.raises(ValueError, match="w must broadcast"):
        call(tokens, query, torch.ones(3, dtype=torch.float64))
    assert call(tokens, query, torch.full((4,), 2.0, dtype=torch.float64)).shape == call(tokens, query, 2.0).shape
