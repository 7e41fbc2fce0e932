"""The fused softmax kernel against the tensor formulas: interpreted on the CPU (tiny sizes, and the kernel must
have run), compiled on a GPU; what happens when it cannot run here (a warning and the tensor formulas, an error in
strict mode or when the path was asked for) and when it has a bug (raised)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from softmax_as_linear.engine.gpu import fallback, fused_softmax
from softmax_as_linear.engine.train import train
from softmax_as_linear.experiments.presets import sweep_config

CHECK = textwrap.dedent("""
    import torch
    from softmax_as_linear.engine.gpu import fused_softmax

    def reference(tokens_t, u, v, lengths):
        D = u.shape[-1]
        z = tokens_t[:, :D].double()
        inside = torch.arange(z.shape[-1])[None, :] < lengths[:, None]
        a = torch.softmax((u.double() @ z).masked_fill(~inside, float("-inf")), -1)
        ac = a * (v.double() @ z)
        pred = ac.sum(-1)
        mean = a @ z.transpose(1, 2)
        return pred, mean, ac @ z.transpose(1, 2) - pred[..., None] * mean

    def check(N, n, D, L, lengths, scale, device):
        g = torch.Generator().manual_seed(N * 1000 + L)
        tokens_t = torch.ones(N, D + 1, L)
        tokens_t[:, :D] = torch.randn(N, D, L, generator=g)
        u = scale * torch.randn(N, n, D, generator=g)
        v = torch.randn(N, n, D, generator=g)
        lengths = torch.tensor(lengths)
        args = [x.to(device) for x in (tokens_t, u, v, lengths)]
        assert fused_softmax.available(args[0])
        for got, want in zip(fused_softmax.softmax_sums(*args), reference(tokens_t, u, v, lengths)):
            assert got.shape == want.shape
            err = (got.double().cpu() - want).abs().max().item()
            assert err < 2e-5 * (1 + want.abs().max().item()), (N, n, D, L, scale, err)

    # one run and more than a tile of runs, a length of 1, lengths that are not multiples of the kernel's block,
    # sharp attention (large scores), a prompt view with a row of ones
    check(2, 1, 6, 10, [10], 1.0, DEVICE)
    check(2, 6, 3, 130, [1, 20, 64, 65, 100, 130], 8.0, DEVICE)
    if DEVICE == "cuda":  # compiled: many runs and long prompts cost nothing
        check(4, 19, 6, 1000, list(range(10, 100, 10)) + list(range(100, 1001, 100)), 1.0, DEVICE)
        check(5, 17, 6, 200, list(range(40, 201, 10)), 0.5, DEVICE)
    print("ok")
""")


def _interpreted(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


needs_triton = pytest.mark.skipif(fused_softmax.triton is None, reason="Triton is not installed")


def test_unavailable_for_float64_and_plain_cpu_tensors():
    assert not fused_softmax.available(torch.zeros(1, 2, 3, dtype=torch.float64))
    if not fused_softmax.INTERPRETED:
        assert not fused_softmax.available(torch.zeros(1, 2, 3))


@needs_triton
def test_interpreted_kernel_matches_the_tensor_formulas_and_trains_on_its_path():
    """Tiny sizes, interpreted: the kernel's sums against a float64 reference, and a short sweep on the path
    ``fused_softmax`` (strict: a fallback is an error) that records that path, launched the kernel, and equals the
    tensor formulas."""
    code = "DEVICE = 'cpu'\n" + CHECK + textwrap.dedent("""
        import numpy as np
        from softmax_as_linear.engine.train import train
        from softmax_as_linear.engine.sweep import TrainConfig
        cfg = TrainConfig(covariance="kms", seeds=(327,), lengths=(5, 13), steps=2, batch_size=2, record_every=1,
                          eval_prompts=2)
        before = fused_softmax.LAUNCHES
        fused = train(cfg, device="cpu", path="fused_softmax")
        assert fused.engine_path == "fused_softmax" and fused_softmax.LAUNCHES > before, fused.engine_path
        plain = train(cfg, device="cpu", path="tensor")
        assert plain.engine_path == "tensor"
        np.testing.assert_allclose(fused.eval_risk, plain.eval_risk, rtol=1e-5)
        for name in plain.params:
            np.testing.assert_allclose(fused.params[name], plain.params[name], rtol=1e-5, atol=1e-6)
        print("trained")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1", fallback.STRICT_ENV: "1"})
    assert done.returncode == 0 and done.stdout.split() == ["ok", "trained"], done.stdout[-2000:] + done.stderr[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available() or fused_softmax.triton is None, reason="needs CUDA and Triton")
def test_cuda_kernel_matches_the_tensor_formulas():
    namespace = {}
    exec(CHECK.replace("DEVICE", "'cuda'"), namespace)


@pytest.mark.skipif(not torch.cuda.is_available() or fused_softmax.triton is None, reason="needs CUDA and Triton")
def test_cuda_training_with_the_kernel_matches_the_tensor_path(monkeypatch):
    monkeypatch.setenv(fallback.STRICT_ENV, "1")
    cfg = sweep_config("lecture", "kms", seeds=(327, 0), steps=300, lengths=(10, 100, 500), rng="torch")
    fused = train(cfg, device="cuda", path="fused_softmax")
    plain = train(cfg, device="cuda", path="tensor")
    assert fused.engine_path == "fused_softmax+graph" and plain.engine_path == "tensor+graph"
    np.testing.assert_allclose(fused.eval_risk, plain.eval_risk, rtol=1e-4)
    for name in plain.params:
        np.testing.assert_allclose(fused.params[name], plain.params[name], rtol=1e-4, atol=1e-5)


def _kernel_raising(monkeypatch, error):
    """The fused kernel made to apply to CPU tensors and to raise ``error`` when launched."""
    def broken(*args):
        raise error

    monkeypatch.setattr(fused_softmax, "available", lambda tokens_t: fused_softmax.ENABLED)
    monkeypatch.setattr(fused_softmax, "ENABLED", True)
    monkeypatch.setattr(fused_softmax, "softmax_sums", broken)
    monkeypatch.delenv(fallback.STRICT_ENV, raising=False)


UNAVAILABLE = ImportError("no compiler for this GPU")  # one of fallback.kernel_unavailable_errors()
CFG = sweep_config("smoke", seeds=(327,), steps=4, record_every=2, lengths=(5, 9), batch_size=4, eval_prompts=8)


def test_a_kernel_that_cannot_run_here_falls_back_with_a_warning_and_the_result_says_so(monkeypatch):
    _kernel_raising(monkeypatch, UNAVAILABLE)
    with pytest.warns(UserWarning, match="fused softmax kernel does not run on this machine"):
        fell_back = train(CFG, device="cpu")
    assert not fused_softmax.ENABLED and fell_back.engine_path == "tensor"
    monkeypatch.undo()
    plain = train(CFG, device="cpu", path="tensor")
    np.testing.assert_array_equal(fell_back.eval_risk, plain.eval_risk)


def test_a_fallback_is_an_error_in_strict_mode_and_when_the_path_was_asked_for(monkeypatch):
    _kernel_raising(monkeypatch, UNAVAILABLE)
    monkeypatch.setenv(fallback.STRICT_ENV, "1")
    with pytest.raises(RuntimeError, match=fallback.STRICT_ENV):
        train(CFG, device="cpu")
    _kernel_raising(monkeypatch, UNAVAILABLE)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="'fused_softmax' was asked for"):
        train(CFG, device="cpu", path="fused_softmax")


@pytest.mark.parametrize("bug", [TypeError("an argument too many"), IndexError("out of range"),
                                 RuntimeError("shape mismatch")])
def test_a_bug_in_the_kernel_is_raised_not_fallen_back_from(monkeypatch, bug):
    _kernel_raising(monkeypatch, bug)
    with pytest.raises(type(bug), match=str(bug)):
        train(CFG, device="cpu")
    assert fused_softmax.ENABLED
