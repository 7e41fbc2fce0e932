"""The counter-based prompt stream in torch: Philox's published answers, the laws and samplers' moments within
their standard errors, prompts addressed by their counters, the tensor data path and the config's choices."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear.engine.data import CounterData
from softmax_as_linear.engine.gpu import counter_stream as cs
from softmax_as_linear.engine.sweep import TrainConfig, TrainResult, load_sweep, save_sweep
from softmax_as_linear.engine.train import resolved
from softmax_as_linear.theory.regression import RegressionTask


@pytest.mark.parametrize("counter, key, expected", [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_gives_the_published_known_answers(counter, key, expected):
    """Random123's known-answer vectors of Philox4x32-10 (Triton's generator)."""
    k = key[0] | (key[1] << 32)
    words = cs.philox(torch.tensor(k - 2**64 if k >= 2**63 else k), *[torch.tensor(c) for c in counter])
    assert [int(w) for w in words] == list(expected)


def test_uniform_and_box_muller_follow_tritons_formulas():
    words = torch.tensor([0, 1, 2**31 - 1, 2**31, 2**32 - 1], dtype=torch.int64)
    u = cs.uniform(words)
    assert u.dtype == torch.float32 and bool((u >= 0).all()) and bool((u < 1).all())
    assert float(u[0]) == 0.0 and float(u[4]) == 0.0 and float(u[3]) == float(u[2])  # ~x folds the sign
    a, b = cs.box_muller(torch.tensor([2**30]), torch.tensor([2**29]))
    radius, angle = math.sqrt(-2 * math.log(0.5)), 2 * math.pi * 0.25
    assert abs(float(a) - radius * math.cos(angle)) < 1e-6 and abs(float(b) - radius * math.sin(angle)) < 1e-6


def _draw(task, n, L, covariates="gaussian", keys=(10_327, 10_001), step=3, first=0):
    F, Fq = cs.task_factors(task)
    return cs.draw(list(keys), step, n, L, d=task.d, factor=F, query_factor=Fq, task_var=task.task_var,
                   noise_var=task.noise_var, covariates=covariates, first_prompt=first)


def _within(estimate, target, se, k=5.0):
    return bool(((estimate - target).abs() <= k * se + 1e-12).all())


@pytest.mark.parametrize("covariates", ["gaussian", "uniform", "rademacher"])
@pytest.mark.parametrize("sampler", ["paper", "published"])
def test_moments_of_the_prompts_within_their_standard_errors(covariates, sampler):
    task = RegressionTask.kms(5, 0.5, sampler=sampler)
    n, L = 3000, 24
    tokens, query, target = _draw(task, n, L, covariates)
    x = tokens[..., :5].reshape(-1, 5).double()
    N = x.shape[0]
    second = torch.einsum("ni,nj->nij", x, x)
    assert _within(second.mean(0), task.prompt_covariance, second.std(0) / math.sqrt(N))
    assert _within(x.mean(0), torch.zeros(5, dtype=torch.float64), x.std(0) / math.sqrt(N))
    xq = query[..., :5].reshape(-1, 5).double()
    second_q = torch.einsum("ni,nj->nij", xq, xq)
    assert _within(second_q.mean(0), task.query_covariance, second_q.std(0) / math.sqrt(xq.shape[0]))
    assert torch.equal(query[..., 5], torch.zeros_like(query[..., 5]))
    y2 = target.reshape(-1).double() ** 2
    expected = task.task_var * float(torch.trace(task.query_covariance)) + task.noise_var
    assert abs(float(y2.mean()) - expected) <= 5 * float(y2.std()) / math.sqrt(y2.numel())
    # labels: E[y x] = 0 over w, and E[y^2] = tau^2 tr(P^2)... the variance of a token's label given nothing
    y_tok = tokens[..., 5].reshape(-1).double() ** 2
    expected_tok = task.task_var * float(torch.trace(task.prompt_covariance)) + task.noise_var
    assert abs(float(y_tok.mean()) - expected_tok) <= 5 * float(y_tok.std()) / math.sqrt(n * 2)
    # the raw covariates: fourth moment 3 (Gaussian), 9/5 (uniform), 1 (Rademacher)
    F, _ = cs.task_factors(task)
    xi = torch.linalg.solve_triangular(F, x.T, upper=False).T
    fourth = {"gaussian": 3.0, "uniform": 1.8, "rademacher": 1.0}[covariates]
    assert _within((xi**4).mean(0), torch.full((5,), fourth, dtype=torch.float64),
                   (xi**4).std(0) / math.sqrt(N) + 1e-4)  # Rademacher: exactly 1, up to rounding
    if covariates == "rademacher":
        assert torch.allclose(xi.abs(), torch.ones_like(xi), atol=1e-5)
    if covariates == "uniform":
        assert float(xi.abs().max()) <= math.sqrt(3) + 1e-5
    # the two tokens drawn from one Philox counter (positions 2q, 2q + 1) are independent
    pairs = tokens[:, :, :L].reshape(2, n, L // 2, 2, 6).double()
    cross = torch.einsum("snqi,snqj->nqij", pairs[:, :, :, 0], pairs[:, :, :, 1]).reshape(-1, 6, 6)
    assert _within(cross.mean(0), torch.zeros(6, 6, dtype=torch.float64), cross.std(0) / math.sqrt(cross.shape[0]), 6)


@pytest.mark.parametrize("covariates", ["uniform", "rademacher", "gaussian"])
@pytest.mark.parametrize("d", [4, 5])
def test_the_query_noise_is_independent_of_the_query_input(covariates, d):
    """A nonlinear moment of (eps_q, xi_q): the query's label noise has mean 0 given each of its input coordinates in
    its lower tail (tau^2 tiny, so the label is s eps_q). At even d the noise once shared a Philox word with the first
    input: E[eps_q | x_q1 < -1.2] was +1.07 at d = 4 with uniform inputs."""
    task = RegressionTask.isotropic(d, task_var=1e-12, noise_var=1.0)
    n = 20_000
    _, query, target = _draw(task, n, 1, covariates, keys=(10_327,), step=0)
    eps, x = target.reshape(-1).double(), query[..., :d].reshape(-1, d).double()
    for j in range(d):
        low = x[:, j] < (-1.2 if covariates != "rademacher" else 0.0)
        tail = eps[low]
        assert abs(float(tail.mean())) <= 5 * float(tail.std()) / math.sqrt(tail.numel()), (j, float(tail.mean()))
        square = eps * x[:, j] ** 2  # and E[eps_q x_qj^2] = 0
        assert abs(float(square.mean())) <= 5 * float(square.std()) / math.sqrt(n), j


def test_a_prompt_is_addressed_by_its_counters():
    task = RegressionTask.kms(5, 0.5)
    tokens, query, target = _draw(task, 5, 30, keys=(10_327,))
    short = _draw(task, 5, 11, keys=(10_327,))
    assert torch.equal(short[0], tokens[:, :, :11]) and torch.equal(short[1], query)  # prefixes of one draw
    part = _draw(task, 2, 30, keys=(10_327,), first=2)
    for a, b in zip(part, (tokens, query, target)):
        assert torch.equal(a, b[:, 2:4])  # the same prompt whatever the batch it is drawn in
    both = _draw(task, 5, 30, keys=(10_327, 10_001))
    assert torch.equal(both[0][:1], tokens)  # and whatever the other seeds
    assert not torch.allclose(_draw(task, 5, 30, keys=(10_327,), step=4)[0], tokens)


def test_a_degenerate_covariance_draws_inputs_in_its_range():
    a = torch.tensor([[1.0, 0.5, 0.0, 0.2, 0.1], [0.0, 1.0, 0.3, 0.0, 0.2]], dtype=torch.float64)
    task = RegressionTask(5, a.T @ a)
    tokens, _, _ = _draw(task, 50, 8)
    x = tokens[..., :5].reshape(-1, 5).double()
    assert int(torch.linalg.matrix_rank(x.T @ x, rtol=1e-4)) == 2


def test_bad_covariate_law_is_named():
    task = RegressionTask.isotropic(5)
    with pytest.raises(ValueError, match="covariates"):
        _draw(task, 2, 3, covariates="cauchy")
    with pytest.raises(ValueError, match="covariates"):
        TrainConfig(covariates="cauchy")
    with pytest.raises(ValueError, match="rng 'philox' does not hand out the task vectors"):
        TrainConfig(models=("softmax", "softmax_limit"), rng="philox")
    with pytest.raises(ValueError, match="rng"):
        TrainConfig(rng="mersenne")


def test_auto_stream_is_resolved_for_the_device():
    assert resolved(TrainConfig(), "cpu").rng == "torch"  # torch's generators are the fast draw on a CPU
    assert resolved(TrainConfig(covariates="rademacher"), "cpu").rng == "torch"  # torch's generators draw every law
    assert resolved(TrainConfig(models=("softmax", "softmax_limit")), "cpu").rng == "torch"
    assert resolved(TrainConfig(rng="philox"), "cpu").rng == "philox"


def test_counter_data_hands_out_step_after_step_and_resumes():
    cfg = TrainConfig(lengths=(3, 7), seeds=(327, 4), batch_size=3, eval_prompts=4, rng="philox")
    task = cfg.task()
    data = CounterData(cfg, task, torch.device("cpu"), torch.float32)
    peeked = data.peek()
    first, second = data.batch(), data.batch()
    assert all(torch.equal(a, b) for a, b in zip(peeked[:3], first[:3])) and data.state() == 2
    assert first[3] is None  # no task vectors on this stream
    assert not torch.equal(first[0], second[0])
    again = CounterData(cfg, task, torch.device("cpu"), torch.float32)
    again.load_state(1)
    assert all(torch.equal(a, b) for a, b in zip(again.batch()[:3], second[:3]))
    assert data.eval[0].shape == (2, 4, 7, 6)


def test_training_on_the_counter_stream_resumes_bit_for_bit(tmp_path):
    from softmax_as_linear.engine.gpu import prompt_kernel
    from softmax_as_linear.engine.train import train

    if prompt_kernel.INTERPRETED:
        pytest.skip("the tensor path is checked here; the kernel in tests/engine/prompt_kernel_interpreted.py")
    cfg = TrainConfig(lengths=(3, 9), seeds=(327, 1), batch_size=4, steps=12, record_every=4, eval_prompts=6,
                      lr=0.05, rng="philox", covariates="uniform")
    whole = train(cfg, device="cpu")
    assert whole.config.rng == "philox" and np.isfinite(whole.eval_risk).all() and np.isfinite(whole.eval_sd).all()
    calls = []
    part = train(cfg, device="cpu", checkpoint=tmp_path / "c.pt", checkpoint_every=4,
                 should_stop=lambda: calls.append(1) or len(calls) == 1)
    assert not part.complete
    resumed = train(cfg, device="cpu", checkpoint=tmp_path / "c.pt")
    np.testing.assert_array_equal(resumed.eval_risk, whole.eval_risk)
    for n in whole.params:
        np.testing.assert_array_equal(resumed.params[n], whole.params[n])


def test_sweep_files_from_before_the_stream_choice_read_as_torch(tmp_path):
    import json

    from softmax_as_linear.core.artifacts import load_npz, save_npz

    cfg = TrainConfig(lengths=(3,), steps=1, record_every=1)
    result = TrainResult(cfg.replace(rng="torch"), np.array([0, 1]), np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 2, 2)),
                         {"W_Q": np.zeros((1, 1, 2, 2, 6, 6))}, np.full((1, 1, 2), -1))
    path = save_sweep(tmp_path / "s.npz", result)
    arrays = load_npz(path)
    fields = json.loads(str(arrays["config_json"]))
    del fields["rng"], fields["covariates"]  # as written before these fields existed
    arrays["config_json"] = np.array(json.dumps(fields))
    del arrays["engine_path"]  # nor did files name the engine's path
    save_npz(tmp_path / "old.npz", **arrays)
    old = load_sweep(tmp_path / "old.npz")
    assert old.config.rng == "torch" and old.config.covariates == "gaussian" and old.engine_path == "unknown"
