"""An interrupt anywhere in training loses nothing: raised inside the held-out evaluation of a record, inside the
forward pass or inside the optimiser step, the checkpoint it leaves resumes to the uninterrupted run bit for bit, on
every CPU stepper path and both random streams, and for the deep steppers of Chapter 7."""
import contextlib

import numpy as np
import pytest
import torch

import softmax_as_linear.engine.tensor_step as tensor_step
from softmax_as_linear.engine.batched import SweepModel
from softmax_as_linear.engine.deep import DeepConfig, DeepStepper
from softmax_as_linear.engine.deep_schedule import DecayedDeepStepper
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import run, train
from softmax_as_linear.theory.regression import RegressionTask

CFG = TrainConfig(lengths=(4, 9), seeds=(1, 2), steps=8, record_every=3, batch_size=8, eval_prompts=16, lr=0.05)


@contextlib.contextmanager
def interrupt_on_call(owner, name, call: int, *, after: bool = False, when=lambda *a, **k: True):
    """Replace ``owner.name`` so that its ``call``-th counted call (those where ``when`` holds) raises
    KeyboardInterrupt: before doing its work, or ``after`` it (the worst case of an optimiser step: the parameters
    moved, nothing after them)."""
    original = getattr(owner, name)
    calls = []

    def wrapped(*args, **kwargs):
        counted = when(*args, **kwargs)
        if counted:
            calls.append(1)
        if counted and len(calls) == call and not after:
            raise KeyboardInterrupt
        out = original(*args, **kwargs)
        if counted and len(calls) == call and after:
            raise KeyboardInterrupt
        return out

    setattr(owner, name, wrapped)
    try:
        yield calls
    finally:
        setattr(owner, name, original)


def _training(*_args, **_kwargs):
    return torch.is_grad_enabled()


# where: (owner, attribute, call, after, when); the held-out set is evaluated once per record (records at 0, 3, 6, 8)
ENGINE_PLACES = {
    "record at step 0": lambda opt: (tensor_step, "held_out_risk", 1, False, None),
    "record at step 3": lambda opt: (tensor_step, "held_out_risk", 2, False, None),
    "forward pass of step 5": lambda opt: (SweepModel, "risk", 5, False, _training),
    "optimiser step 4": lambda opt: (getattr(torch.optim, opt), "step", 4, True, None),
}


def _assert_same(resumed, full):
    assert resumed.complete
    np.testing.assert_array_equal(resumed.steps, full.steps)
    for field in ("train_risk", "eval_risk", "eval_sd", "diverged_at"):
        np.testing.assert_array_equal(getattr(resumed, field), getattr(full, field), err_msg=field)
    for name in full.params:
        np.testing.assert_array_equal(resumed.params[name], full.params[name], err_msg=name)


_FULL = {}


@pytest.mark.parametrize("place", list(ENGINE_PLACES))
@pytest.mark.parametrize("path, rng, optimizer", [("cpu", "torch", "SGD"), ("cpu", "philox", "SGD"),
                                                  ("tensor", "torch", "Adam"), ("tensor", "philox", "Adam")])
def test_an_interrupt_anywhere_resumes_to_the_uninterrupted_run(tmp_path, place, path, rng, optimizer):
    cfg = CFG.replace(rng=rng, optimizer=optimizer.lower())
    if (path, rng, optimizer) not in _FULL:
        _FULL[path, rng, optimizer] = train(cfg, device="cpu", path=path)
    owner, name, call, after, when = ENGINE_PLACES[place](optimizer)
    checkpoint = tmp_path / "run.pt"
    with interrupt_on_call(owner, name, call, after=after, when=when or (lambda *a, **k: True)) as calls:
        with pytest.raises(KeyboardInterrupt):
            train(cfg, device="cpu", path=path, checkpoint=checkpoint, checkpoint_every=2)
    assert len(calls) == call and checkpoint.exists()
    _assert_same(train(cfg, device="cpu", path=path, checkpoint=checkpoint), _FULL[path, rng, optimizer])


def _deep_config(optimizer="adam"):
    return DeepConfig(task=RegressionTask.isotropic(3), seeds=(0, 1), lengths=(4, 7),
                      models=(("softmax", 2), ("linear", 1)), batch_size=8, lr=0.05, optimizer=optimizer,
                      held_out_prompts=8)


_DEEP_FULL = []  # the uninterrupted deep run, computed by the first case that needs it

DEEP_PLACES = {
    "record at step 0": (DeepStepper, "held_out", 1, False, None),
    "record at step 4": (DeepStepper, "held_out", 3, False, None),
    "forward pass of step 5": (DeepStepper, "losses", 5, False, _training),
    "optimiser step 3": (torch.optim.Adam, "step", 3, True, None),
}


@pytest.mark.parametrize("place", list(DEEP_PLACES))
def test_an_interrupt_anywhere_resumes_the_deep_stepper_exactly(tmp_path, place):
    cfg = _deep_config()
    key = TrainConfig(steps=7)  # any object with as_dict: what the checkpoint is written for

    def stepper():
        return DecayedDeepStepper(cfg, decay_step=4, decay_factor=0.1)

    records = [0, 2, 4, 6, 7]
    if not _DEEP_FULL:
        _DEEP_FULL.append(run(stepper(), 7, records))
    full = _DEEP_FULL[0]
    owner, name, call, after, when = DEEP_PLACES[place]
    checkpoint = tmp_path / "deep.pt"
    with interrupt_on_call(owner, name, call, after=after, when=when or (lambda *a, **k: True)):
        with pytest.raises(KeyboardInterrupt):
            run(stepper(), 7, records, config=key, checkpoint=checkpoint, checkpoint_every=2)
    resumed_stepper = stepper()
    resumed = run(resumed_stepper, 7, records, config=key, checkpoint=checkpoint)
    assert resumed.complete and resumed.last_step == 7
    for field in ("train_risk", "eval_risk", "eval_sd"):
        np.testing.assert_array_equal(getattr(resumed, field), getattr(full, field), err_msg=field)
    for name in full.history:
        np.testing.assert_array_equal(resumed.history[name], full.history[name], err_msg=name)


def test_the_record_before_the_first_step_takes_nothing_from_the_training_stream():
    """Under torch's generators the first step trains on batch 1 whether or not the record before it ran (batch 0
    is the record's): the record is a reading, not a step."""
    from softmax_as_linear.engine.data import SweepData

    cfg = CFG.replace(rng="torch")
    task, cpu = cfg.task(), torch.device("cpu")
    recorded, plain = SweepData(cfg, task, cpu, torch.float32), SweepData(cfg, task, cpu, torch.float32)
    first = recorded.first_record_batch()
    again = recorded.first_record_batch()
    assert all(torch.equal(a, b) for a, b in zip(first[:3], again[:3]))
    for a, b in zip(recorded.batch()[:3], plain.batch()[:3]):
        assert torch.equal(a, b)


CUDA = torch.cuda.is_available()


def _gpu_places(path: str, graph: bool) -> dict:
    """Where an interrupt is raised on a GPU path. A captured step is replayed without Python, so with the CUDA graph
    only the record (outside the graph) is a place; the step's places are checked op by op."""
    from softmax_as_linear.engine.gpu import kernel_step, prompt_kernel

    held_out = ((kernel_step.PromptKernelStepper, "held_out", 2, False, None) if path == "prompt_kernel"
                else (tensor_step, "held_out_risk", 2, False, None))
    places = {"record at step 3": held_out}
    if graph:
        return places
    if path == "prompt_kernel":  # SGD on the four matrices in float32: the kernel's sums, then its SGD step
        places["forward pass of step 5"] = (prompt_kernel.PromptKernel, "grad_sums", 5, False, None)
        places["optimiser step 4"] = (prompt_kernel.PromptKernel, "sgd_step", 4, True, None)
    else:
        places["forward pass of step 5"] = (SweepModel, "risk", 5, False, _training)
        places["optimiser step 4"] = (torch.optim.SGD, "step", 4, True, None)
    return places


@pytest.mark.skipif(not CUDA, reason="no CUDA device (benchmarks/gpu.sh runs these on a GPU)")
@pytest.mark.parametrize("path, rng, graph", [("tensor", "torch", False), ("tensor", "torch", True),
                                              ("fused_softmax", "torch", False), ("prompt_kernel", "philox", False),
                                              ("prompt_kernel", "philox", True)])
def test_an_interrupt_anywhere_resumes_exactly_on_a_gpu(tmp_path, path, rng, graph):
    from softmax_as_linear.engine.gpu import fused_softmax, prompt_kernel

    if path == "fused_softmax" and not fused_softmax.available(torch.empty(0, device="cuda")):
        pytest.skip("needs Triton")
    if path == "prompt_kernel" and not prompt_kernel.available(torch.device("cuda"), torch.float32):
        pytest.skip("needs Triton")
    cfg = CFG.replace(rng=rng)
    full = train(cfg, device="cuda", path=path, cuda_graph=graph)
    for place, (owner, name, call, after, when) in _gpu_places(path, graph).items():
        checkpoint = tmp_path / f"{place}.pt"
        with interrupt_on_call(owner, name, call, after=after, when=when or (lambda *a, **k: True)):
            with pytest.raises(KeyboardInterrupt):
                train(cfg, device="cuda", path=path, cuda_graph=graph, checkpoint=checkpoint, checkpoint_every=2)
        _assert_same(train(cfg, device="cuda", path=path, cuda_graph=graph, checkpoint=checkpoint), full)
