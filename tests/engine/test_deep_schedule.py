"""The deep stepper with a step decay: the step is divided at decay_step, and a resumed run decays where an
uninterrupted one does."""
import pytest
import torch

from softmax_as_linear import RegressionTask
from softmax_as_linear.engine.deep import DeepConfig
from softmax_as_linear.engine.deep_schedule import DecayedDeepStepper

CFG = DeepConfig(task=RegressionTask.isotropic(d=2), seeds=(0,), lengths=(5,), batch_size=8, held_out_prompts=8,
                 lr=0.05, optimizer="adam")


def test_the_step_is_divided_at_the_decay_step():
    stepper = DecayedDeepStepper(CFG, decay_step=2, decay_factor=0.1)
    rates = []
    for _ in range(4):
        rates.append(stepper.current_lr())
        stepper.step()
    assert rates == pytest.approx([0.05, 0.05, 0.005, 0.005])
    assert stepper.optimizer.param_groups[0]["lr"] == pytest.approx(0.005)


def test_a_resumed_run_decays_where_an_uninterrupted_one_does():
    straight = DecayedDeepStepper(CFG, decay_step=3)
    for _ in range(6):
        straight.step()
    first = DecayedDeepStepper(CFG, decay_step=3)
    for _ in range(2):
        first.step()
    resumed = DecayedDeepStepper(CFG, decay_step=3)
    resumed.load_state(first.state())
    for _ in range(4):
        resumed.step()
    assert torch.equal(straight.U, resumed.U) and torch.equal(straight.v, resumed.v)


def test_bad_decay_settings_are_named():
    with pytest.raises(ValueError, match="decay_factor"):
        DecayedDeepStepper(CFG, decay_step=1, decay_factor=0)
    with pytest.raises(ValueError, match="decay_step"):
        DecayedDeepStepper(CFG, decay_step=-1)
