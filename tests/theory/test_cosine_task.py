"""The random-cosine-feature task: its sampler, its exact Bayes predictor and its best affine predictor."""
import math

import pytest
import torch

from softmax_as_linear.theory.cosine_task import CosineTask


def test_prompts_follow_the_task():
    task = CosineTask(d=3, features=16, frequency=1.5, noise_var=0.0)
    batch = task.sample(8, 20, torch.Generator().manual_seed(1), torch.float64)
    assert batch.tokens.shape == (8, 20, 4) and batch.query.shape == (8, 4) and batch.w.shape == (8, 16)
    assert torch.allclose(batch.tokens[..., :3].norm(dim=-1), torch.ones(8, 20, dtype=torch.float64))
    assert torch.allclose(batch.tokens[..., -1], task.function(batch.w, batch.tokens[..., :3]))
    assert torch.allclose(batch.target, task.function(batch.w, batch.query[:, None, :3])[:, 0])
    assert bool((batch.query[:, -1] == 0).all())


def test_stacked_batches_are_the_single_draws():
    task = CosineTask(d=2, features=8)
    gens = [torch.Generator().manual_seed(s) for s in (3, 4)]
    stacked = task.sample_stacked(5, 7, gens)
    single = task.sample(5, 7, torch.Generator().manual_seed(4))
    assert torch.equal(stacked.tokens[1], single.tokens) and torch.equal(stacked.target[1], single.target)


def test_features_make_the_gaussian_kernel_on_average():
    task = CosineTask(d=2, features=20000, frequency=1.3, inputs="gaussian")
    x, x2 = torch.tensor([0.3, -0.2], dtype=torch.float64), torch.tensor([-0.4, 0.5], dtype=torch.float64)
    kernel = float(task.feature_map(x) @ task.feature_map(x2))
    assert kernel == pytest.approx(math.exp(-1.3**2 * float(((x - x2) ** 2).sum()) / 2), abs=0.03)


def test_posterior_mean_is_ridge_and_bayes_risk_matches_monte_carlo():
    task = CosineTask(d=2, features=12, frequency=2.0, noise_var=0.1)
    batch = task.sample(4000, 15, torch.Generator().manual_seed(2), torch.float64)
    mean, excess = task.posterior(batch.tokens, batch.query)
    phi = task.feature_map(batch.tokens[0, :, :2])
    ridge = torch.linalg.solve(phi.T @ phi + task.noise_var / task.task_var * torch.eye(12, dtype=torch.float64),
                               phi.T @ batch.tokens[0, :, 2])
    assert float(mean[0]) == pytest.approx(float(task.feature_map(batch.query[0, :2]) @ ridge), rel=1e-9)
    losses = 0.5 * (mean - batch.target) ** 2
    closed = 0.5 * excess + 0.5 * task.noise_var
    diff = losses - closed
    assert abs(float(diff.mean())) < 4 * float(diff.std()) / math.sqrt(diff.numel())


def test_no_affine_predictor_beats_the_best_affine_risk():
    task = CosineTask(d=2, features=32, frequency=2.0)
    best, se = task.best_affine_risk()
    assert task.noise_floor() < best < task.zero_risk() and se < 1e-3
    batch = task.sample(20000, 1, torch.Generator().manual_seed(5), torch.float64)
    x = batch.query[:, :2]
    design = torch.cat([torch.ones_like(x[:, :1]), x], -1)
    # the best affine map of x_q alone, fitted across tasks, cannot do better than the one that knows f
    coef = torch.linalg.lstsq(design, batch.target.unsqueeze(-1)).solution
    assert float((0.5 * (design @ coef - batch.target.unsqueeze(-1)) ** 2).mean()) > best


@pytest.mark.parametrize("kwargs, name", [(dict(features=0), "features"), (dict(inputs="cube"), "inputs"),
                                          (dict(noise_var=-1.0), "noise_var"), (dict(d=1), "d")])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        CosineTask(**kwargs)


def test_posterior_needs_noise():
    task = CosineTask(noise_var=0.0)
    batch = task.sample(2, 3)
    with pytest.raises(ValueError, match="noise_var"):
        task.posterior(batch.tokens, batch.query)


def test_the_best_affine_risk_is_the_same_to_the_bit_whatever_the_threads():
    """The best affine risk (a least-squares fit and its scored residual) does not depend on the number of threads
    that summed it: computed with one and with two threads, the same float to its last bit (merged and one-process
    result files then agree byte for byte); and the least-squares fit of torch to rounding. In this process, torch's
    thread count switched between the two (what a process started with ``torch.set_num_threads(n)`` computes: the
    same pools, without importing torch twice more)."""
    import torch

    threads = torch.get_num_threads()
    values = {}
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            values[n] = CosineTask(2, 64, 2.0, 1.0, 0.05, inputs="sphere").best_affine_risk()
    finally:
        torch.set_num_threads(threads)
    assert repr(values[1]) == repr(values[2]), values
    from softmax_as_linear.theory import cosine_task

    task = cosine_task.CosineTask(2, 64, 2.0, 1.0, 0.05, inputs="sphere")
    x = task._moment_inputs()
    x2 = task.draw_inputs((cosine_task.MOMENT_SAMPLES,), torch.Generator().manual_seed(task.feature_seed + 2))
    design = lambda t: torch.cat([torch.ones_like(t[:, :1]), t], -1)  # noqa: E731
    coef = torch.linalg.lstsq(design(x), task.feature_map(x)).solution
    reference = 0.5 * task.task_var * ((task.feature_map(x2) - design(x2) @ coef) ** 2).sum(-1).mean() + 0.5 * 0.05
    assert values[1][0] == pytest.approx(float(reference), rel=1e-12)


@pytest.mark.parametrize("change", [dict(d=3), dict(features=24), dict(frequency=1.0), dict(inputs="gaussian"),
                                    dict(feature_seed=1), dict(task_var=2.0, noise_var=0.2)])
def test_the_moments_are_computed_once_for_each_task_they_depend_on(change, monkeypatch):
    """The process-wide cache of the zero and best affine risks: a task that differs in anything the moments depend
    on gets its own numbers (those of a fresh computation), a task equal in all of it the first one's."""
    from softmax_as_linear.theory import cosine_task

    monkeypatch.setattr(cosine_task, "MOMENT_SAMPLES", 1 << 10)
    monkeypatch.setattr(cosine_task, "_MOMENTS", {})
    base = dict(d=2, features=16, frequency=2.0)
    first = (CosineTask(**base).zero_risk(), CosineTask(**base).best_affine_risk())
    other = CosineTask(**{**base, **change})
    cached = other.zero_risk(), other.best_affine_risk()
    with monkeypatch.context() as spy:
        spy.setattr(CosineTask, "_best_affine_risk", lambda self: pytest.fail("computed again"))
        assert CosineTask(**base).best_affine_risk() == first[1]
    cosine_task._MOMENTS.clear()
    assert cached == (other.zero_risk(), other.best_affine_risk()) != first


def test_the_zero_risk_is_its_closed_form_for_gaussian_inputs():
    r"""For :math:`x \sim N(0, I)`, :math:`\mathbb{E}\cos^2(\omega^\top x + b) = \tfrac12(1 + \cos(2b)
    e^{-2\|\omega\|^2})`, so :math:`\mathbb{E}\|\varphi(x)\|^2 = \tfrac1m \sum_j (1 + \cos 2b_j e^{-2\|\omega_j\|^2})`:
    the Monte Carlo zero risk within 4 of its standard errors."""
    task = CosineTask(d=3, features=32, frequency=0.7, task_var=1.5, noise_var=0.1, inputs="gaussian")
    moment = float((1 + torch.cos(2 * task.phase) * torch.exp(-2 * (task.omega ** 2).sum(-1))).mean())
    squares = (task.feature_map(task._moment_inputs()) ** 2).sum(-1)
    se = 0.5 * task.task_var * float(squares.std()) / math.sqrt(squares.numel())
    assert abs(task.zero_risk() - (0.5 * task.task_var * moment + 0.5 * task.noise_var)) < 4 * se
