"""The Stepper contract (engine/stepper.py), checked once for every stepper that runs here: readings change nothing,
the state names the step taken and resumes the stepper exactly, and what the loop relies on is there."""
import numpy as np
import pytest
import torch

from softmax_as_linear.engine.deep import DeepConfig, DeepStepper
from softmax_as_linear.engine.deep_limit import DeepLimitStepper
from softmax_as_linear.engine.deep_schedule import DecayedDeepStepper
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import _copy, make_stepper
from softmax_as_linear.engine.window_step import WindowStepper
from softmax_as_linear.theory.cosine_task import CosineTask
from softmax_as_linear.theory.regression import RegressionTask

CFG = TrainConfig(lengths=(4, 9), seeds=(1, 2), steps=4, batch_size=8, eval_prompts=8, lr=0.05)
DEEP = DeepConfig(task=RegressionTask.isotropic(2), seeds=(0, 1), lengths=(4, 7), models=(("softmax", 2), ("linear", 1)),
                  batch_size=8, held_out_prompts=8, lr=0.05, optimizer="adam")
CPU = torch.device("cpu")

STEPPERS = {
    "cpu, torch's generators, SGD": lambda: make_stepper(CFG.replace(rng="torch"), CPU, path="cpu"),
    "cpu, counter-based stream, Adam": lambda: make_stepper(CFG.replace(rng="philox", optimizer="adam"), CPU,
                                                            path="cpu"),
    "tensor formulas, uv, Adam": lambda: make_stepper(CFG.replace(rng="torch", parametrisation="uv", init="block",
                                                                  optimizer="adam"), CPU, path="tensor"),
    "infinite-prompt models": lambda: make_stepper(CFG.replace(rng="torch", models=("softmax", "softmax_limit")), CPU),
    "deep": lambda: DeepStepper(DEEP),
    "deep, decayed step": lambda: DecayedDeepStepper(DEEP, decay_step=1),
    "deep, infinite prompt": lambda: DeepLimitStepper(DEEP),
    "log window, decayed step": lambda: WindowStepper(CosineTask(), seeds=(0, 1), lengths=(4, 7), batch_size=8,
                                                      decay_step=1, held_out_prompts=8),
}


def _readings(stepper):
    risk, sd = stepper.held_out()
    return [stepper.batch_risk(), risk, sd, *stepper.weights().values()]


def _equal(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("name", list(STEPPERS))
def test_every_stepper_keeps_the_contract(name):
    stepper = STEPPERS[name]()
    try:
        assert isinstance(stepper.path, str) and stepper.path
        shape = tuple(stepper.alive.shape)
        assert len(shape) == 3 and stepper.alive.dtype == torch.bool and tuple(stepper.diverged_at.shape) == shape
        for taken in range(3):
            state = _copy(stepper.state())
            assert state["step"] == taken and {"alive", "diverged_at", "generators", "optimizer"} <= state.keys()
            first = _readings(stepper)  # readings, before a step and after: repeatable, and they move nothing
            assert _equal(first, _readings(stepper)) and _equal(_copy(stepper.state()), state)
            assert first[0].shape == first[1].shape == first[2].shape == shape
            stepper.step()
        saved = _copy(stepper.state())
        for _ in range(2):
            stepper.step()
        resumed = STEPPERS[name]()
        resumed.load_state(saved)
        for _ in range(2):
            resumed.step()
        assert _equal(_readings(resumed), _readings(stepper))  # the state resumes the stepper exactly
        resumed.close()
    finally:
        stepper.close()
    assert np.isfinite(first[1].numpy()).all()
