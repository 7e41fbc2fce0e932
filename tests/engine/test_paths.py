"""Every code path of the engine that runs on this machine against the reference trainer, on the same prompts.

The reference (:mod:`softmax_as_linear.engine.reference`) trains one run alone with plain autograd and
``torch.optim.SGD``; a sweep trained on a path must give every one of its runs the reference's weights at every
record, and the numbers it records there (batch risk, held-out risk and the spread of its per-prompt losses) must be
those of the reference's weights on the prompts each record reads. A path asked for runs or fails: fallbacks are errors here (strict mode), and the result must name the path.
Paths this machine cannot run are skipped, with the reason.
"""
import numpy as np
import pytest
import torch

from softmax_as_linear.engine import reference
from softmax_as_linear.engine.gpu import fallback, fused_softmax, prompt_kernel
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train
from softmax_as_linear.theory import models

CUDA = torch.cuda.is_available()
TRITON = fused_softmax.triton is not None and not fused_softmax.INTERPRETED


def _needs(ok: bool, reason: str):
    return pytest.mark.skipif(not ok, reason=reason)


# (device, path asked for, graph, rng, the engine_path the result must record, float tolerance)
PATHS = [
    pytest.param("cpu", "cpu", False, "torch", "cpu", 1e-5, id="cpu"),
    pytest.param("cpu", "cpu", False, "philox", "cpu", 1e-5, id="cpu-philox-stream"),
    pytest.param("cpu", "tensor", False, "torch", "tensor", 1e-5, id="cpu-tensor-formulas"),
    pytest.param("cuda", "tensor", False, "torch", "tensor", 1e-4, id="cuda-tensor",
                 marks=_needs(CUDA, "no CUDA device")),
    pytest.param("cuda", "tensor", True, "torch", "tensor+graph", 1e-4, id="cuda-tensor-graph",
                 marks=_needs(CUDA, "no CUDA device")),
    pytest.param("cuda", "fused_softmax", False, "torch", "fused_softmax", 1e-4, id="fused-softmax",
                 marks=_needs(CUDA and TRITON, "needs CUDA and Triton (interpreted: tests/engine/test_fused_softmax.py)")),
    pytest.param("cuda", "fused_softmax", True, "torch", "fused_softmax+graph", 1e-4, id="fused-softmax-graph",
                 marks=_needs(CUDA and TRITON, "needs CUDA and Triton")),
    # the GPU's hardware sine and cosine draw the prompts to a few units of the sixth decimal
    pytest.param("cuda", "prompt_kernel", False, "philox", "prompt_kernel", 2e-3, id="prompt-kernel",
                 marks=_needs(CUDA and TRITON, "needs CUDA and Triton (interpreted: tests/engine/test_prompt_kernel.py)")),
    pytest.param("cuda", "prompt_kernel", True, "philox", "prompt_kernel+graph", 2e-3, id="prompt-kernel-graph",
                 marks=_needs(CUDA and TRITON, "needs CUDA and Triton")),
]

CFG = TrainConfig(covariance="kms", lengths=(4, 11), seeds=(5, 8), steps=6, record_every=3, batch_size=8,
                  eval_prompts=16, lr=0.05)


_REFERENCES = {}
_RECORD_DATA = {}


def _record_data(rng: str, device: str) -> dict:
    """What the records read for every seed of CFG under ``rng`` (drawn on ``device``), on the CPU: {seed: (the
    batch of each record step, the held-out set)}. The record at step ``s > 0`` reads the batch step ``s`` trained on,
    the record at step 0 the batch read before any step (batch 0 of the stream)."""
    from softmax_as_linear.engine.data import CounterData, SweepData

    if (rng, device) not in _RECORD_DATA:
        cfg, out = CFG.replace(rng=rng), {}
        for seed in cfg.seeds:
            one = cfg.replace(seeds=(seed,))
            source = CounterData if rng == "philox" else SweepData
            data = source(one, one.task(), torch.device(device), torch.float32)
            first = [x[0].cpu() for x in data.first_record_batch()[:3]]
            batches = [first] + [list(b) for b in reference.sweep_batches(cfg, seed, cfg.steps, device)]
            out[seed] = ({step: batches[step] for step in range(cfg.steps + 1)},
                         [x[0].cpu() for x in data.eval[:3]])
        _RECORD_DATA[rng, device] = out
    return _RECORD_DATA[rng, device]


def _losses(weights: dict, tokens, query, target, L: int, activation: str) -> torch.Tensor:
    """Half squared errors of the paper's model with ``weights`` on prompts of which it reads ``L`` tokens, in float64."""
    w = {n: v.double() for n, v in weights.items()}
    U, V = (w["U"], w["V"]) if "U" in w else models.uv_from_weights(w["W_Q"], w["W_K"], w["W_V"], w["W_O"])
    pred = models.predict(tokens[:, :L].double(), query.double(), U, V, activation)
    return 0.5 * (pred - target.double()) ** 2


def _reference(rng: str, device: str) -> dict:
    """The reference weights of every run of CFG under ``rng``, its batches drawn on ``device`` (torch's generators
    draw other numbers on CUDA than on a CPU): {(seed, L, activation): [weights after each step]}."""
    if (rng, device) not in _REFERENCES:
        cfg = CFG.replace(rng=rng)
        batches = {seed: list(reference.sweep_batches(cfg, seed, cfg.steps, device)) for seed in cfg.seeds}
        _REFERENCES[rng, device] = {(seed, L, a): reference.train_one_run(cfg, L, a, seed, batches=batches[seed])
                                    for seed in cfg.seeds for L in cfg.lengths for a in cfg.models}
    return _REFERENCES[rng, device]


@pytest.mark.parametrize("device, path, graph, rng, recorded, tolerance", PATHS)
def test_every_path_trains_every_run_as_the_reference_does(monkeypatch, device, path, graph, rng, recorded,
                                                           tolerance):
    monkeypatch.setenv(fallback.STRICT_ENV, "1")
    cfg = CFG.replace(rng=rng)
    result = train(cfg, device=device, path=path, cuda_graph=graph)
    assert result.engine_path == recorded
    references = _reference(rng, device if rng == "torch" else "cpu")
    records = _record_data(rng, device if rng == "torch" else "cpu")
    for s, seed in enumerate(cfg.seeds):
        for l, L in enumerate(cfg.lengths):
            for a, activation in enumerate(cfg.models):
                history = references[seed, L, activation]
                for k, step in enumerate(result.steps):
                    where = f"{activation}, L={L}, seed {seed}, step {step}"
                    for name, expected in history[step].items():
                        np.testing.assert_allclose(result.params[name][s, l, a, k], expected.double().numpy(),
                                                   rtol=tolerance, atol=tolerance * 0.1, err_msg=f"{name} of {where}")
                    # the recorded numbers, recomputed from the reference's weights on what each record reads
                    batches, held_out = records[seed]
                    train_losses = _losses(history[step], *batches[step], L, activation)
                    held_losses = _losses(history[step], *held_out, L, activation)
                    for field, expected in (("train_risk", train_losses.mean()), ("eval_risk", held_losses.mean()),
                                            ("eval_sd", held_losses.std())):
                        np.testing.assert_allclose(getattr(result, field)[s, l, a, k], float(expected),
                                                   rtol=10 * tolerance, err_msg=f"{field} of {where}")


def test_the_reference_step_is_sgd_on_the_papers_model_and_the_sweeps_batch():
    """The reference is itself right: its first step is one SGD step on the MSE of the sweep's first training batch,
    with the paper's linear-attention prediction written out here (W_O sum_i a_i W_V z_i, a_i = <W_K z_i, W_Q z_q> /
    (sqrt(D) L))."""
    cfg = CFG.replace(rng="torch", steps=1, seeds=(5,))
    (tokens, query, target), = reference.sweep_batches(cfg, 5, 1)
    history = reference.train_one_run(cfg, 11, "linear", 5)
    w = {n: v.clone().requires_grad_(True) for n, v in history[0].items()}
    keys, values = tokens[:, :11] @ w["W_K"].T, tokens[:, :11] @ w["W_V"].T
    scores = (keys @ (query @ w["W_Q"].T).unsqueeze(-1)).squeeze(-1) / np.sqrt(cfg.D) / 11
    pred = ((scores.unsqueeze(-1) * values).sum(1) @ w["W_O"].T).squeeze(-1)
    ((pred - target) ** 2).mean().backward()
    for name, weight in w.items():
        torch.testing.assert_close(history[1][name], (weight - cfg.lr * weight.grad).detach())


def test_a_path_that_cannot_run_here_is_an_error_naming_path():
    if not CUDA:
        with pytest.raises(ValueError, match="path 'prompt_kernel' cannot run here"):
            train(CFG.replace(rng="philox", steps=1), device="cpu", path="prompt_kernel")
    if not prompt_kernel.available("cpu"):
        with pytest.raises(ValueError, match="path 'prompt_kernel'"):
            train(CFG.replace(rng="torch", steps=1), device="cpu", path="prompt_kernel")
    with pytest.raises(ValueError, match="path must be one of"):
        train(CFG.replace(steps=1), device="cpu", path="gpu")


def test_results_and_files_name_their_path(tmp_path):
    from softmax_as_linear.engine.sweep import load_sweep, save_sweep

    result = train(CFG.replace(steps=2, record_every=1), device="cpu")
    assert result.engine_path == "cpu"
    assert load_sweep(save_sweep(tmp_path / "s.npz", result)).engine_path == "cpu"


def test_a_checkpoint_written_on_another_path_is_refused_before_training(tmp_path, monkeypatch):
    """Resuming with a path asked for from a checkpoint another path wrote would end in a mixed run: refused at once,
    naming both paths, before a step is taken."""
    from softmax_as_linear.engine.tensor_step import TensorStepper

    cfg = CFG.replace(rng="torch")
    checkpoint, calls = tmp_path / "run.pt", []
    train(cfg, device="cpu", path="cpu", checkpoint=checkpoint, should_stop=lambda: calls.append(1) or True)
    steps = []
    monkeypatch.setattr(TensorStepper, "step", lambda self: steps.append(1))
    with pytest.raises(ValueError, match="path 'tensor'.*'cpu'"):
        train(cfg, device="cpu", path="tensor", checkpoint=checkpoint)
    assert steps == []


@pytest.mark.parametrize("path", ["cpu", "tensor"])
@pytest.mark.parametrize("init", ["pytorch", "block"])
def test_the_uv_parametrisation_trains_as_the_reference_does(path, init):
    """The theory's parametrisation (U, V trained directly) against the reference's SGD on U and V, from the product of
    PyTorch's matrices or the block start."""
    cfg = CFG.replace(rng="torch", parametrisation="uv", init=init)
    result = train(cfg, device="cpu", path=path)
    batches = {seed: list(reference.sweep_batches(cfg, seed, cfg.steps)) for seed in cfg.seeds}
    for s, seed in enumerate(cfg.seeds):
        for l, L in enumerate(cfg.lengths):
            for a, activation in enumerate(cfg.models):
                history = reference.train_one_run(cfg, L, activation, seed, batches=batches[seed])
                for k, step in enumerate(result.steps):
                    for name, expected in history[step].items():
                        np.testing.assert_allclose(result.params[name][s, l, a, k], expected.double().numpy(),
                                                   rtol=1e-5, atol=1e-6,
                                                   err_msg=f"{name} of {activation}, L={L}, seed {seed}, step {step}")


def test_a_path_asked_for_is_checked_on_the_last_leg_of_a_resumed_run(tmp_path, monkeypatch):
    """A CUDA run resumed from a checkpoint saved before its step was captured as a graph records
    ``"tensor, then tensor+graph"``: the path asked for ran, and no fallback error follows the training. Emulated
    on a CPU by a stepper that reports its graph."""
    import softmax_as_linear.engine.train as train_module

    cfg = CFG.replace(rng="torch", steps=6, record_every=2)
    checkpoint = tmp_path / "run.pt"
    train(cfg, device="cpu", path="cpu", checkpoint=checkpoint, should_stop=lambda: True)
    real = train_module.make_stepper

    def graphed(*args, **kwargs):
        stepper = real(*args, **kwargs)
        type(stepper).path = property(lambda self: "cpu+graph")
        return stepper

    from softmax_as_linear.engine.tensor_step import TensorStepper

    monkeypatch.setattr(TensorStepper, "path", TensorStepper.path)  # restored after the test
    monkeypatch.setattr(train_module, "make_stepper", graphed)
    result = train(cfg, device="cpu", path="cpu", checkpoint=checkpoint)
    assert result.complete and result.engine_path == "cpu, then cpu+graph"
