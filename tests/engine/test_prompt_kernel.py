"""The prompt kernel: interpreted on the CPU (the suite in prompt_kernel_interpreted.py, in a subprocess with
TRITON_INTERPRET=1), and compiled on a GPU against the reference stream and the tensor formulas, replayed as a
CUDA graph, bit for bit from run to run and across a resumption."""
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from softmax_as_linear.engine.batched import SweepModel
from softmax_as_linear.engine.gpu import counter_stream as cs
from softmax_as_linear.engine.gpu import fallback
from softmax_as_linear.engine.gpu import prompt_kernel as pk
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train

SUITE = pathlib.Path(__file__).with_name("prompt_kernel_interpreted.py")


@pytest.mark.slow  # about 10 s of CPU (3 of them starting Python, torch and Triton): every kernel instruction in Python
@pytest.mark.skipif(pk.triton is None, reason="Triton is not installed")
def test_interpreted_suite():
    """The interpreted suite in one subprocess, strict (a fallback is an error); every one of its tests must pass, none
    skipped. The kernel must have run: its outputs are read from buffers only it writes (``torch.empty``), and the
    training test asks for the path ``prompt_kernel``, which fails when another path ran."""
    env = {**os.environ, "TRITON_INTERPRET": "1", fallback.STRICT_ENV: "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # the suite needs no plugin; loading them all costs seconds
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(SUITE)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert re.match(r"\d+ passed(, \d+ warnings?)? in ", summary), summary


cuda = pytest.mark.skipif(not torch.cuda.is_available() or pk.triton is None or pk.INTERPRETED,
                          reason="needs CUDA and Triton (compiled kernels)")


def _scratch_tokens(kernel, tag, n_prompts, L):
    scratch = kernel._buffers[f"scratch_{tag}"]  # (S * n, blocks, D, 2, QB)
    P, blocks, D, _, QB = scratch.shape
    return scratch.permute(0, 1, 4, 3, 2).reshape(P, blocks * QB * 2, D)[:, :L].reshape(kernel.S, n_prompts, L, D)


def _per_prompt(tokens, query, U, v, L, activation):
    tokens, query = tokens.double(), query.double()
    u = (U.double() @ query.unsqueeze(-1)).squeeze(-1).requires_grad_(True)
    vv = v.double().expand_as(u).clone().requires_grad_(True)
    z = tokens[:, :L]
    scores, values = (z @ u.unsqueeze(-1)).squeeze(-1), (z @ vv.unsqueeze(-1)).squeeze(-1)
    pred = (torch.softmax(scores, -1) * values).sum(-1) if activation == "softmax" else (scores * values).sum(-1) / L
    gu, gv = torch.autograd.grad(pred.sum(), (u, vv))
    return pred.detach(), gu, gv


@cuda
# two compilations only (each variant is one; the sweeps reuse them): the KMS paper sweep's kernel, and the
# published sampler with uniform inputs and sharp attention (the second pass); the rest is checked interpreted
@pytest.mark.parametrize("covariance, sampler, covariates, scale", [
    ("kms", "paper", "gaussian", 1.0), ("kms", "published", "uniform", 300.0)])
def test_cuda_kernel_matches_the_reference(covariance, sampler, covariates, scale):
    cfg = TrainConfig(lengths=(5, 70, 130, 257), seeds=(327, 4), batch_size=8, covariance=covariance, sampler=sampler,
                      covariates=covariates, rng="philox")
    dev = torch.device("cuda")
    sweep = SweepModel(cfg, dev, None)
    with torch.no_grad():
        U, v = sweep.uv()
    U, v = (U * scale).contiguous(), v.contiguous()
    kernel = pk.PromptKernel(cfg, dev)
    alive = torch.ones(sweep.shape, dtype=torch.bool, device=dev)
    out, query, target = kernel.grad_sums(U, v, alive, kernel.keys("train"), torch.tensor(3, device=dev))
    task = cfg.task()
    F, Fq = cs.task_factors(task)
    tokens, q_ref, y_ref = cs.draw(kernel.keys("train").tolist(), 3, 8, 257, d=5, factor=F, query_factor=Fq,
                                   task_var=task.task_var, noise_var=task.noise_var, covariates=covariates, device=dev)
    # the hardware sine and cosine: a few units of the sixth decimal
    torch.testing.assert_close(_scratch_tokens(kernel, "train", 8, 257), tokens, rtol=1e-5, atol=3e-5)
    torch.testing.assert_close(query.transpose(1, 2), q_ref, rtol=1e-5, atol=3e-5)
    torch.testing.assert_close(target, y_ref, rtol=1e-5, atol=3e-5)
    for s in range(2):
        for l, L in enumerate(cfg.lengths):
            for a, activation in enumerate(cfg.models):
                pred, gu, gv = _per_prompt(tokens[s], q_ref[s], U[s, l, a], v[s, l, a], L, activation)
                tol = dict(rtol=2e-3, atol=2e-4 * max(1.0, scale / 10))
                torch.testing.assert_close(out[s, l, a, 0].double(), pred, **tol)
                torch.testing.assert_close(out[s, l, a, 1:7].T.double(), gu, **tol)
                torch.testing.assert_close(out[s, l, a, 7:].T.double(), gv, **tol)


SMALL = dict(lengths=(10, 40, 100), seeds=(327, 0), batch_size=16, steps=60, record_every=20, eval_prompts=64, lr=0.01,
             rng="philox")


@cuda
def test_cuda_graphed_training_is_bit_for_bit_run_to_run_and_across_a_resumption(tmp_path):
    cfg = TrainConfig(**SMALL)
    first, again = train(cfg, device="cuda"), train(cfg, device="cuda")
    eager = train(cfg, device="cuda", cuda_graph=False)
    calls = []
    train(cfg, device="cuda", checkpoint=tmp_path / "c.pt", checkpoint_every=20,
          should_stop=lambda: calls.append(1) or len(calls) == 1)
    resumed = train(cfg, device="cuda", checkpoint=tmp_path / "c.pt")
    for other in (again, eager, resumed):
        np.testing.assert_array_equal(other.eval_risk, first.eval_risk)
        for n in first.params:
            np.testing.assert_array_equal(other.params[n], first.params[n])
    assert np.isfinite(first.eval_sd[..., 1:]).all()


@cuda
def test_cuda_training_matches_the_tensor_path_on_the_same_prompts(monkeypatch):
    cfg = TrainConfig(**{**SMALL, "steps": 40, "covariance": "kms"})
    kernel = train(cfg, device="cuda")
    monkeypatch.setattr(pk, "ENABLED", False)  # the same stream as tensors, the tensor formulas
    tensors = train(cfg, device="cuda")
    np.testing.assert_allclose(kernel.eval_risk, tensors.eval_risk, rtol=2e-3, atol=1e-6)
    for n in kernel.params:
        np.testing.assert_allclose(kernel.params[n], tensors.params[n], rtol=2e-3, atol=2e-5)


@cuda
def test_cuda_adam_through_autograd_matches_the_tensor_path(monkeypatch):
    cfg = TrainConfig(**{**SMALL, "steps": 20, "optimizer": "adam", "parametrisation": "uv"})
    kernel = train(cfg, device="cuda")
    monkeypatch.setattr(pk, "ENABLED", False)
    tensors = train(cfg, device="cuda")
    for n in kernel.params:
        np.testing.assert_allclose(kernel.params[n], tensors.params[n], rtol=2e-3, atol=2e-5)
