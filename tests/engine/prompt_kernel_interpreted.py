"""The prompt kernel, interpreted on the CPU (run by tests/engine/test_prompt_kernel.py with TRITON_INTERPRET=1):
Triton's Philox against the reference, the kernel's prompts and sums against the reference and the engine's
tensor formulas (laws, samplers, a degenerate covariance, lengths off the block, sharp attention), the SGD
kernel against autograd, training against the tensor path, resumption. Sizes are kept small."""
import os

import numpy as np
import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":  # collected only by the subprocess that sets it
    pytest.skip("run with TRITON_INTERPRET=1 (tests/engine/test_prompt_kernel.py does)", allow_module_level=True)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import triton.runtime.interpreter as _interpreter  # noqa: E402

from softmax_as_linear.engine.batched import SweepModel  # noqa: E402
from softmax_as_linear.engine.gpu import attention_sums, philox  # noqa: E402
from softmax_as_linear.engine.gpu import counter_stream as ref  # noqa: E402
from softmax_as_linear.engine.gpu import prompt_kernel as pk  # noqa: E402
from softmax_as_linear.engine.sweep import TrainConfig  # noqa: E402
from softmax_as_linear.engine.train import train  # noqa: E402
from softmax_as_linear.theory.models import uv_from_weights  # noqa: E402
from softmax_as_linear.theory.regression import RegressionTask  # noqa: E402

# The interpreter patches triton.language again at every call of a jitted helper; once per helper is enough
# (the first call still patches), and it halves the time of an interpreted kernel.
_seen = set()


def _call_once_patched(self, *args, **kwargs):
    if self.fn not in _seen:
        _seen.add(self.fn)
        _interpreter._patch_lang(self.fn)
    return self.rewrite()(*args, **kwargs)


_interpreter.InterpretedFunction.__call__ = _call_once_patched

CPU = torch.device("cpu")
LAWS = ("gaussian", "uniform", "rademacher")


@triton.jit
def _philox_probe(keys_ptr, c_ptr, out_ptr, n, N: tl.constexpr):
    i = tl.arange(0, N)
    ok = i < n
    c0 = tl.load(c_ptr + i, mask=ok, other=0)
    c1 = tl.load(c_ptr + N + i, mask=ok, other=0)
    c2 = tl.load(c_ptr + 2 * N + i, mask=ok, other=0)
    c3 = tl.load(c_ptr + 3 * N + i, mask=ok, other=0)
    key = tl.load(keys_ptr)
    r0, r1, r2, r3 = tl.philox(key, c0.to(tl.uint32), c1.to(tl.uint32), c2.to(tl.uint32), c3.to(tl.uint32))
    tl.store(out_ptr + i, r0.to(tl.int64) & 0xFFFFFFFF, mask=ok)
    tl.store(out_ptr + N + i, r1.to(tl.int64) & 0xFFFFFFFF, mask=ok)
    tl.store(out_ptr + 2 * N + i, r2.to(tl.int64) & 0xFFFFFFFF, mask=ok)
    tl.store(out_ptr + 3 * N + i, r3.to(tl.int64) & 0xFFFFFFFF, mask=ok)
    u = tl.uint_to_uniform_float(r2)
    tl.store(out_ptr + 4 * N + i, (u * 4294967296.0).to(tl.int64), mask=ok)


@triton.jit
def _normal_probe(keys_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    key = tl.load(keys_ptr)
    r0, r1, r2, r3 = tl.philox(key, i.to(tl.uint32), (i * 7).to(tl.uint32), (i * 3 + 1).to(tl.uint32), i.to(tl.uint32))
    a, b = philox._box_muller(r0, r1, False)
    tl.store(out_ptr + i, a)
    tl.store(out_ptr + N + i, b)


def test_reference_philox_is_tritons_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    N = 64
    counters = torch.randint(0, 2**32, (4, N), generator=gen, dtype=torch.int64)
    counters[:, 0] = 0
    counters[:, 1] = 2**32 - 1
    for key in (10_327, (50_327 * 1_000_003 + 1000), 2**63 - 25):  # 32- and 64-bit keys
        keys = torch.tensor([key], dtype=torch.int64)
        out = torch.zeros(5 * N, dtype=torch.int64)
        _philox_probe[(1,)](keys, counters.reshape(-1).clone(), out, N, N=N)
        words = ref.philox(keys, *counters)
        for k in range(4):
            assert torch.equal(out[k * N:(k + 1) * N], words[k]), (key, k)
        assert torch.equal(out[4 * N:], (ref.uniform(words[2]).double() * 2**32).long())


def test_reference_box_muller_is_tritons():
    keys = torch.tensor([10_327], dtype=torch.int64)
    N = 64
    out = torch.zeros(2 * N)
    _normal_probe[(1,)](keys, out, N=N)
    i = torch.arange(N)
    words = ref.philox(keys, i, i * 7, i * 3 + 1, i)
    a, b = ref.box_muller(words[0], words[1])
    torch.testing.assert_close(out, torch.cat([a, b]), rtol=2e-6, atol=2e-6)


def test_randint4x_is_the_reference_at_a_64_bit_offset():
    """Triton's own randint4x(seed, offset) is Philox at counters (offset_lo, offset_hi, 0, 0)."""
    @triton.jit
    def probe(out_ptr, seed, N: tl.constexpr):
        i = tl.arange(0, N).to(tl.int64) * 4294967311
        r0, r1, r2, r3 = tl.randint4x(seed, i)
        tl.store(out_ptr + tl.arange(0, N), r3.to(tl.int64) & 0xFFFFFFFF)
    N = 16
    out = torch.zeros(N, dtype=torch.int64)
    probe[(1,)](out, 123_456, N=N)
    offsets = torch.arange(N, dtype=torch.int64) * 4294967311
    words = ref.philox(torch.tensor(123_456), offsets & 0xFFFFFFFF, offsets >> 32, 0, 0)
    assert torch.equal(out, words[3])


def _degenerate_task(sampler="paper"):
    a = torch.tensor([[1.0, 0.5, 0.0, 0.2, 0.1], [0.0, 1.0, 0.3, 0.0, 0.2]], dtype=torch.float64)
    return RegressionTask(5, a.T @ a, sampler=sampler)  # rank 2


def _setup(cfg, task=None, scale=1.0, covariates="gaussian", pairs=4, per_tile=2, per_tile_eval=3):
    sweep = SweepModel(cfg, CPU, None)
    with torch.no_grad():
        U, v = sweep.uv()
    U, v = (U * scale).contiguous(), v.contiguous()
    kernel = pk.PromptKernel(cfg, CPU, covariates=covariates, pairs=pairs, per_tile=per_tile, per_tile_eval=per_tile_eval,
                             task=task)
    return sweep, U, v, kernel


def _reference_batch(cfg, kernel, stream, step, n, covariates, task=None, first=0):
    task = task or cfg.task()
    F, Fq = ref.task_factors(task)
    return ref.draw(kernel.keys(stream).tolist(), step, n, max(cfg.lengths), d=cfg.d, factor=F, query_factor=Fq,
                    task_var=task.task_var, noise_var=task.noise_var, covariates=covariates, first_prompt=first)


def _scratch_tokens(kernel, tag, n_prompts, L):
    """The tokens the kernel drew, read back from its scratch rows: (S, n, L, D)."""
    scratch = kernel._buffers[f"scratch_{tag}"]  # (S * n, blocks, D, 2, QB)
    P, blocks, D, _, QB = scratch.shape
    tokens = scratch.permute(0, 1, 4, 3, 2).reshape(P, blocks * QB * 2, D)[:, :L]
    return tokens.reshape(kernel.S, n_prompts, L, D)


def _per_prompt_reference(tokens, query, U, v, L, activation):
    """Prediction, d/du and d/dv of one run on every prompt, float64 autograd (independent of the engine)."""
    tokens, query = tokens.double(), query.double()
    u = (U.double() @ query.unsqueeze(-1)).squeeze(-1).requires_grad_(True)
    vv = v.double().expand_as(u).clone().requires_grad_(True)
    z = tokens[:, :L]
    scores = (z @ u.unsqueeze(-1)).squeeze(-1)
    values = (z @ vv.unsqueeze(-1)).squeeze(-1)
    if activation == "softmax":
        pred = (torch.softmax(scores, -1) * values).sum(-1)
    else:
        pred = (scores * values).sum(-1) / L
    gu, gv = torch.autograd.grad(pred.sum(), (u, vv))
    return pred.detach(), gu, gv


# Each case mixes several features, so that five launches cover them all: one and two seeds, the isotropic, KMS and a
# degenerate covariance, both samplers, the three laws, lengths of 1 and off the kernel's block of 16 tokens, one
# activation. Sharp attention is test_sharp_attention_needs_and_takes_the_second_pass.
CASES = {
    "two seeds, KMS, published sampler": dict(cfg=dict(seeds=(327, 4), lengths=(5, 17), covariance="kms",
                                                       sampler="published"), covariates="gaussian"),
    "one seed, isotropic, d = 2": dict(cfg=dict(seeds=(327,), lengths=(3, 16, 17), d=2), covariates="gaussian"),
    "uniform covariates, degenerate covariance": dict(cfg=dict(seeds=(5,), lengths=(4, 19)), covariates="uniform",
                                               task=_degenerate_task()),
    # even d: the query's inputs start past the Box-Muller pair of its noise (counter_stream.query_input_word)
    "uniform covariates, d = 4": dict(cfg=dict(seeds=(3,), lengths=(2, 7), d=4), covariates="uniform"),
    "rademacher covariates, one activation, d = 3": dict(cfg=dict(seeds=(2,), lengths=(1, 25), covariance="kms", d=3,
                                                           models=("linear",)), covariates="rademacher"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_prompts_and_sums_match_the_reference_and_the_tensor_formulas(case):
    spec = CASES[case]
    cfg = TrainConfig(batch_size=2, **spec["cfg"])
    task = spec.get("task")
    sweep, U, v, kernel = _setup(cfg, task, spec.get("scale", 1.0), spec["covariates"])
    alive = torch.ones(sweep.shape, dtype=torch.bool)
    step = torch.tensor(11, dtype=torch.int64)
    out, query, target = kernel.grad_sums(U, v, alive, kernel.keys("train"), step)
    L = max(cfg.lengths)
    tokens, q_ref, y_ref = _reference_batch(cfg, kernel, "train", 11, 2, spec["covariates"], task)
    torch.testing.assert_close(_scratch_tokens(kernel, "train", 2, L), tokens, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(query.transpose(1, 2), q_ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(target, y_ref, rtol=1e-6, atol=1e-6)

    # predictions against the engine's tensor formulas (SoftmaxPrediction, prefix moments) on the same prompts
    if task is not None:
        sweep.task = task
    with torch.no_grad():
        sweep_U = U
        pred_engine = _engine_predictions(sweep, tokens, q_ref, sweep_U, v)
    torch.testing.assert_close(out[:, :, :, 0], pred_engine, rtol=2e-5, atol=2e-6)
    # per-prompt gradient sums against float64 autograd
    D = cfg.D
    for s in range(len(cfg.seeds)):
        for l, Ln in enumerate(cfg.lengths):
            for a, activation in enumerate(cfg.models):
                pred, gu, gv = _per_prompt_reference(tokens[s], q_ref[s], U[s, l, a], v[s, l, a], Ln, activation)
                tol = dict(rtol=1e-4, atol=1e-5 * max(1.0, spec.get("scale", 1.0) / 10))
                torch.testing.assert_close(out[s, l, a, 0].double(), pred, **tol)
                torch.testing.assert_close(out[s, l, a, 1:1 + D].T.double(), gu, **tol)
                torch.testing.assert_close(out[s, l, a, 1 + D:].T.double(), gv, **tol)


def _engine_predictions(sweep, tokens, query, U, v):
    """SweepModel.predict with the given (U, v) in place of its parameters."""
    original = sweep.uv
    sweep.uv = lambda: (U, v)
    try:
        return sweep.predict(tokens, query)
    finally:
        sweep.uv = original


def test_sharp_attention_needs_and_takes_the_second_pass():
    """Scores far above the first block's maximum: without the second pass exp would overflow."""
    cfg = TrainConfig(seeds=(327,), lengths=(40,), batch_size=2, models=("softmax",), d=2)
    sweep, U, v, kernel = _setup(cfg, scale=20000.0)
    out, query, target = kernel.grad_sums(U, v, torch.ones(sweep.shape, dtype=torch.bool), kernel.keys("train"),
                                          torch.tensor(3))
    tokens, q_ref, _ = _reference_batch(cfg, kernel, "train", 3, 2, "gaussian")
    u = (U[0, 0, 0].double() @ q_ref[0].double().T).T  # (B, D)
    scores = (tokens[0].double() @ u.unsqueeze(-1)).squeeze(-1)
    first_block = scores[:, :2 * kernel.pairs].max(-1).values
    assert bool(((scores.max(-1).values - first_block) * attention_sums.LOG2E > attention_sums.OVERFLOW).any())
    pred, gu, gv = _per_prompt_reference(tokens[0], q_ref[0], U[0, 0, 0], v[0, 0, 0], 40, "softmax")
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, 0, 0, 0].double(), pred, rtol=1e-4, atol=1e-5)
    D = cfg.D  # the gradients of the sharp softmax: float32 sums of scores in the thousands
    torch.testing.assert_close(out[0, 0, 0, 1:1 + D].T.double(), gu, rtol=1e-4, atol=2e-3)
    torch.testing.assert_close(out[0, 0, 0, 1 + D:].T.double(), gv, rtol=1e-4, atol=2e-3)


def test_forward_only_mode_and_risk_moments():
    cfg = TrainConfig(seeds=(327,), lengths=(2, 9, 23), batch_size=2, eval_prompts=3, d=2)
    sweep, U, v, kernel = _setup(cfg, per_tile_eval=2)
    kernel.max_programs = 2  # chunks of at most 2 prompts: 2 launches for 3 prompts
    alive = torch.ones(sweep.shape, dtype=torch.bool)
    keys = kernel.keys("held_out")
    mean, sd = kernel.risk_moments(U, v, alive, keys, 3)
    tokens, query, target = _reference_batch(cfg, kernel, "held_out", 0, 3, "gaussian")
    pred = _engine_predictions(sweep, tokens, query, U, v)
    loss = (0.5 * (pred - target[:, None, None, :]) ** 2).double()
    torch.testing.assert_close(mean, loss.mean(-1), rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(sd, loss.std(-1), rtol=1e-4, atol=1e-8)
    # the same prompts as the gradient mode's, prompt by prompt
    out, _, _ = kernel._launch(U, v, alive, keys, kernel.zero_step, 0, 3, 0, True, "check")
    torch.testing.assert_close(out[:, :, :, 0], pred, rtol=2e-5, atol=2e-6)


def test_dead_runs_are_skipped_not_computed():
    cfg = TrainConfig(seeds=(327,), lengths=(4, 12), batch_size=2, d=2)
    sweep, U, v, kernel = _setup(cfg)
    alive = torch.ones(sweep.shape, dtype=torch.bool)
    alive[0, 1, 0] = False
    U = U.clone()
    U[0, 1, 0] = float("nan")  # a diverged run's parameters must not reach the others
    out, _, _ = kernel.grad_sums(U, v, alive, kernel.keys("train"), torch.tensor(0))
    assert torch.isfinite(out).all()


def test_kernel_prediction_backward_is_autograd_of_the_prediction():
    """KernelPrediction's hand-written backward (dL/dU, dL/dv from the kernel's sums) against float64 autograd of the
    prediction written out on the reference stream's prompts (nothing of the engine)."""
    cfg = TrainConfig(seeds=(327, 4), lengths=(3, 10), batch_size=2, d=2)
    sweep, U, v, kernel = _setup(cfg)
    step, alive = torch.tensor(3, dtype=torch.int64), torch.ones(sweep.shape, dtype=torch.bool)
    U_k, v_k = U.clone().requires_grad_(True), v.clone().requires_grad_(True)
    pred, _ = pk.KernelPrediction.apply(U_k, v_k, kernel, alive, kernel.keys("train"), step)
    weights = torch.randn(pred.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    (weights * pred.double()).sum().backward()
    tokens, query, _ = _reference_batch(cfg, kernel, "train", 3, cfg.batch_size, "gaussian")
    U64, v64 = U.double().requires_grad_(True), v.double().requires_grad_(True)
    total = 0.0
    for s in range(len(cfg.seeds)):
        for l, L in enumerate(cfg.lengths):
            for a, activation in enumerate(cfg.models):
                z = tokens[s, :, :L].double()
                scores = z @ (query[s].double() @ U64[s, l, a].T).unsqueeze(-1)  # z_i . U z_q, (B, L, 1)
                values = z @ v64[s, l, a]
                mixed = torch.softmax(scores[..., 0], -1) if activation == "softmax" else scores[..., 0] / L
                total = total + (weights[s, l, a] * (mixed * values).sum(-1)).sum()
    total.backward()
    torch.testing.assert_close(U_k.grad.double(), U64.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(v_k.grad.double(), v64.grad, rtol=1e-4, atol=1e-5)


def test_sgd_kernel_is_the_autograd_step():
    cfg = TrainConfig(seeds=(327, 4), lengths=(3, 10), batch_size=2, lr=0.05, d=2)
    sweep, U, v, kernel = _setup(cfg)
    alive = torch.ones(sweep.shape, dtype=torch.bool)
    step = torch.tensor(5, dtype=torch.int64)
    threshold = 1e3 * sweep.zero_risk
    # autograd through the kernel's sums, then a plain gradient step
    U0, v0 = sweep.uv()
    pred, target = pk.KernelPrediction.apply(U0, v0, kernel, alive, kernel.keys("train"), step)
    risk = 0.5 * ((pred - target[:, None, None, :]) ** 2).mean(-1)
    loss = (2 * risk).sum()
    loss.backward()
    expected = {}
    with torch.no_grad():
        for n, p in sweep.params.items():
            expected[n] = p - cfg.lr * p.grad
    # the fused update
    weights = {n: p.detach().clone() for n, p in sweep.params.items()}
    diverged = torch.full(sweep.shape, -1, dtype=torch.int64)
    risk_out = torch.zeros(sweep.shape)
    out, query, target = kernel.grad_sums(U, v, alive, kernel.keys("train"), step)
    U_next, v_next = U.clone(), v.clone()
    kernel.sgd_step(out, query, target, weights, U_next, v_next, alive, diverged, risk_out, step, cfg.lr, threshold)
    for n in weights:
        torch.testing.assert_close(weights[n], expected[n], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(risk_out, risk.detach(), rtol=1e-5, atol=1e-8)
    U_new, V_new = uv_from_weights(weights["W_Q"], weights["W_K"], weights["W_V"], weights["W_O"])
    torch.testing.assert_close(U_next, U_new, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(v_next, V_new[..., -1, :], rtol=1e-5, atol=1e-7)
    assert bool(alive.all()) and bool((diverged == -1).all())
    # a run over the threshold stops, is stamped with the step and keeps its weights
    before = {n: w.clone() for n, w in weights.items()}
    out, query, target = kernel.grad_sums(U_next, v_next, alive, kernel.keys("train"), step)
    now = 0.5 * ((out[:, :, :, 0] - target[:, None, None, :]) ** 2).mean(-1)  # the risks the kernel will form
    low = float(now[0, 1, 0]) * 0.999
    kernel.sgd_step(out, query, target, weights, U_next, v_next, alive, diverged, risk_out, step, cfg.lr, low)
    stopped = ~alive
    assert bool(stopped[0, 1, 0]) and int(diverged[0, 1, 0]) == 5
    assert bool((diverged[stopped] == 5).all()) and bool((diverged[~stopped] == -1).all())
    for n in weights:
        assert torch.equal(weights[n][stopped], before[n][stopped])


# d = 2 (D = 3): the interpreter's time grows with D (the kernels unroll over the coordinates); d = 5 is checked above
SHORT = dict(lengths=(3, 9), seeds=(327,), d=2, batch_size=1, steps=2, record_every=1, eval_prompts=2, lr=0.05,
             covariance="kms", rng="philox")


def test_training_equals_the_tensor_path_and_resumes_bit_for_bit(tmp_path):
    """Two steps on the kernel's path (asked for: it must run) against the same stream drawn as tensors and the
    tensor formulas; stopped after one step and resumed from the checkpoint, the run is the uninterrupted one."""
    cfg = TrainConfig(**SHORT)
    expected = train(cfg, device="cpu", path="tensor")
    got = train(cfg, device="cpu", path="prompt_kernel")
    assert got.engine_path == "prompt_kernel" and expected.engine_path == "tensor" and got.config.rng == "philox"
    np.testing.assert_allclose(got.eval_risk, expected.eval_risk, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(got.eval_sd, expected.eval_sd, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(got.train_risk, expected.train_risk, rtol=1e-5, atol=1e-8)
    for n in got.params:
        np.testing.assert_allclose(got.params[n], expected.params[n], rtol=1e-5, atol=1e-7)
    assert np.isfinite(got.eval_risk).all()
    calls = []
    stop = lambda: calls.append(1) or len(calls) == 1  # noqa: E731  asked after step 0: stop at the record of step 1
    part = train(cfg, device="cpu", checkpoint=tmp_path / "c.pt", checkpoint_every=1, should_stop=stop)
    assert not part.complete and int(part.steps[-1]) == 1
    resumed = train(cfg, device="cpu", checkpoint=tmp_path / "c.pt")
    assert resumed.complete and resumed.engine_path == "prompt_kernel"
    np.testing.assert_array_equal(resumed.eval_risk, got.eval_risk)
    for n in got.params:
        np.testing.assert_array_equal(resumed.params[n], got.params[n])


def test_training_through_autograd_with_adam_equals_the_tensor_path():
    cfg = TrainConfig(**{**SHORT, "record_every": 2, "optimizer": "adam", "lr": 0.01, "parametrisation": "uv",
                         "covariates": "rademacher"})
    expected = train(cfg, device="cpu", path="tensor")
    got = train(cfg, device="cpu", path="prompt_kernel")
    for n in got.params:
        np.testing.assert_allclose(got.params[n], expected.params[n], rtol=1e-4, atol=1e-6)


def test_bad_covariate_law_is_named():
    with pytest.raises(ValueError, match="covariates"):
        pk.PromptKernel(TrainConfig(), CPU, covariates="cauchy")
