"""The fused softmax kernel against the tensor formulas: interpreted on the CPU, compiled on a GPU."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from softmax_as_linear.engine import fused_softmax
from softmax_as_linear.engine.train import train
from softmax_as_linear.experiments.presets import sweep_config

CHECK = textwrap.dedent("""
    import torch
    from softmax_as_linear.engine import fused_softmax

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

    # one run and many (more than the kernel's 16-run tile), a length of 1, lengths that are not
    # multiples of the kernel's block, sharp attention (large scores), a prompt view with a row of ones
    check(3, 1, 6, 10, [10], 1.0, DEVICE)
    check(4, 19, 6, 1000, list(range(10, 100, 10)) + list(range(100, 1001, 100)), 1.0, DEVICE)
    check(2, 3, 3, 130, [1, 65, 130], 8.0, DEVICE)
    check(5, 17, 6, 200, list(range(40, 201, 10)), 0.5, DEVICE)
    print("ok")
""")


def _interpreted(code: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


needs_triton = pytest.mark.skipif(fused_softmax.triton is None, reason="Triton is not installed")


def test_unavailable_for_float64_and_plain_cpu_tensors():
    assert not fused_softmax.available(torch.zeros(1, 2, 3, dtype=torch.float64))
    if not fused_softmax.INTERPRETED:
        assert not fused_softmax.available(torch.zeros(1, 2, 3))


@needs_triton
@pytest.mark.slow
def test_kernel_matches_the_tensor_formulas_interpreted():
    done = _interpreted("DEVICE = 'cpu'\n" + CHECK)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


@needs_triton
@pytest.mark.slow
def test_training_with_the_kernel_matches_the_tensor_path_interpreted():
    # A whole short sweep (forward, hand-written backward, SGD) with the kernel and without it.
    code = textwrap.dedent("""
        import numpy as np
        from softmax_as_linear.engine import fused_softmax
        from softmax_as_linear.engine import train as train_module
        from softmax_as_linear.experiments.presets import sweep_config
        cfg = sweep_config("smoke", "kms", seeds=(327, 0), lengths=(10, 70, 130), steps=6, batch_size=8,
                           record_every=3, eval_prompts=16)
        fused = train_module.train(cfg, device="cpu")
        fused_softmax.ENABLED = False
        plain = train_module.train(cfg, device="cpu")
        np.testing.assert_allclose(fused.eval_risk, plain.eval_risk, rtol=1e-4)
        for name in plain.params:
            np.testing.assert_allclose(fused.params[name], plain.params[name], rtol=1e-4, atol=1e-5)
        print("ok")
    """)
    done = _interpreted(code)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available() or fused_softmax.triton is None, reason="needs CUDA and Triton")
def test_cuda_kernel_matches_the_tensor_formulas():
    namespace = {}
    exec(CHECK.replace("DEVICE", "'cuda'"), namespace)


@pytest.mark.skipif(not torch.cuda.is_available() or fused_softmax.triton is None, reason="needs CUDA and Triton")
def test_cuda_training_with_the_kernel_matches_the_tensor_path(monkeypatch):
    cfg = sweep_config("lecture", "kms", seeds=(327, 0), steps=300, lengths=(10, 100, 500), rng="torch")
    fused = train(cfg, device="cuda")
    monkeypatch.setattr(fused_softmax, "ENABLED", False)
    plain = train(cfg, device="cuda")
    np.testing.assert_allclose(fused.eval_risk, plain.eval_risk, rtol=1e-4)
    for name in plain.params:
        np.testing.assert_allclose(fused.params[name], plain.params[name], rtol=1e-4, atol=1e-5)


def test_a_failing_kernel_falls_back_to_the_tensor_formulas(monkeypatch):
    def broken(*args):
        raise RuntimeError("no kernel here")

    monkeypatch.setattr(fused_softmax, "available", lambda tokens_t: fused_softmax.ENABLED)
    monkeypatch.setattr(fused_softmax, "ENABLED", True)
    monkeypatch.setattr(fused_softmax, "softmax_sums", broken)
    cfg = sweep_config("smoke", seeds=(327,), steps=4, record_every=2)
    with pytest.warns(UserWarning, match="fused softmax kernel failed"):
        fell_back = train(cfg, device="cpu")
    assert not fused_softmax.ENABLED
    monkeypatch.undo()
    plain = train(cfg, device="cpu")
    np.testing.assert_array_equal(fell_back.eval_risk, plain.eval_risk)
