"""The log-window stepper of Chapter 8: its runs are the layer of attention_optimum, each seed's lengths read prefixes
of the same prompts, the decay and divergence act as documented, and training moves the window where the task asks."""
import math

import pytest
import torch

from softmax_as_linear.core import seeding
from softmax_as_linear.engine.window_step import WindowStepper
from softmax_as_linear.theory import attention_optimum as ao
from softmax_as_linear.theory.cosine_task import CosineTask


def test_every_run_is_the_layer_of_attention_optimum_on_a_prefix_of_its_seeds_prompts():
    task = CosineTask()
    stepper = WindowStepper(task, seeds=(3, 5), lengths=(4, 9), batch_size=8, held_out_prompts=8, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(2, 2, 1, ao.parameter_count("softmax", 2), generator=g, dtype=torch.float64)
    tokens, query, target = stepper._held_out
    losses = stepper.losses(tokens, query, target, theta)  # (S, nL, 1, n)
    for s in range(2):
        for i, L in enumerate((4, 9)):
            prompts = ao.Prompts(tokens[s, :, :L], query[s], target[s])
            assert torch.allclose(losses[s, i, 0], ao.losses("softmax", theta[s, i, 0].numpy(), prompts), atol=1e-12)
    again = task.sample(8, 9, seeding.generator(5, "held_out"))  # the held-out prompts are the seed's stream's
    assert torch.allclose(tokens[1], again.tokens.double())


def test_softmax_prediction_is_the_attention_layer_of_to_uv():
    from softmax_as_linear.theory.models import predict

    g = torch.Generator().manual_seed(1)
    batch = CosineTask().sample(16, 12, g, dtype=torch.float64)
    theta = torch.randn(ao.parameter_count("softmax", 2), generator=g, dtype=torch.float64)
    U, V = ao.to_uv("softmax", theta.numpy(), 2)
    assert torch.allclose(ao.softmax_prediction(theta, batch.tokens, batch.query),
                          predict(batch.tokens, batch.query, U, V, "softmax"), atol=1e-12)


def test_start_decay_and_bad_input():
    stepper = WindowStepper(CosineTask(), seeds=(0,), lengths=(5,), batch_size=4, lr=0.1, decay_step=2,
                            decay_factor=0.5, init_window=3.0, held_out_prompts=4)
    theta = stepper.weights()["theta"]
    assert math.isclose(float(theta[0, 0, 0, 0]), math.log(3.0), rel_tol=1e-6) and (theta[..., 1:] == 0).all()
    rates = []
    for _ in range(4):
        rates.append(stepper.current_lr())
        stepper.step()
    assert rates == [0.1, 0.1, 0.05, 0.05]
    for kwargs, name in ((dict(lengths=(9, 4)), "lengths"), (dict(init_window=0.0), "init_window"),
                         (dict(batch_size=0), "batch_size"), (dict(seeds=(-1,)), "seeds")):
        with pytest.raises(ValueError, match=name):
            WindowStepper(CosineTask(), **{"seeds": (0,), "lengths": (5,), **kwargs})


def test_a_diverged_run_stops_and_the_others_move_at_step_0_or_mid_run():
    stepper = WindowStepper(CosineTask(), seeds=(0, 1), lengths=(5,), batch_size=4, held_out_prompts=4, lr=0.1)
    with torch.no_grad():
        stepper.theta[1, 0, 0, -1] = 1e6  # v_y huge: the risk far beyond the divergence threshold
    before = stepper.weights()["theta"]
    stepper.step()
    after = stepper.weights()["theta"]
    assert stepper.alive.tolist() == [[[True]], [[False]]] and stepper.diverged_at[1, 0, 0] == 0
    assert torch.equal(after[1], before[1]) and not torch.equal(after[0], before[0])
    # a run that diverges mid-run, its Adam moments built up, is not moved by them afterwards either
    stepper.lr, frozen, later = 30.0, None, 0
    while later < 4 and stepper.step_count < 40:
        stepper.step()
        later += frozen is not None
        if frozen is None and stepper.diverged_at[0, 0, 0] > 0:
            frozen = stepper.weights()["theta"][0]
    assert frozen is not None and later == 4, "the run did not diverge mid-run"
    assert torch.equal(stepper.weights()["theta"][0], frozen) and torch.equal(stepper.weights()["theta"][1], before[1])


def test_training_moves_the_window_towards_the_tasks_scale():
    """From w = 1 and the zero predictor, 150 steps at L = 50 widen the window by more than e (the layer's optimum there
    is near 60): the log scale moves it by about a step's worth of lr per step, whatever its size."""
    stepper = WindowStepper(CosineTask(), seeds=(0,), lengths=(50,), batch_size=32, lr=0.05, held_out_prompts=64)
    risk0 = float(stepper.held_out()[0])
    for _ in range(150):
        stepper.step()
    w = math.exp(float(stepper.weights()["theta"][0, 0, 0, 0]))
    assert w > math.e and float(stepper.held_out()[0]) < 0.5 * risk0



def test_the_window_and_deep_steppers_share_one_scaffolding_and_readings_call_no_private_method():
    """One copy of the data streams, step, readings and state (SeedStepper), the steppers defining only their model;
    Chapter 8's readings sample their fresh prompts through the public ``prompts``, the prompts a stepper reads."""
    import ast
    import inspect

    from softmax_as_linear.engine.deep import DeepConfig, DeepStepper
    from softmax_as_linear.engine.stepper import SeedStepper
    from softmax_as_linear.experiments import nonlinear_window
    from softmax_as_linear.theory.regression import RegressionTask

    shared = {"state", "load_state", "batch_risk", "weights", "close", "_stack", "_draw", "prompts", "current_lr",
              "step"}
    for cls in (WindowStepper, DeepStepper):
        assert issubclass(cls, SeedStepper) and not shared & set(vars(cls)), cls.__name__
    private = [node.attr for node in ast.walk(ast.parse(inspect.getsource(nonlinear_window)))
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "stepper"
               and node.attr.startswith("_")]
    assert private == []
    window = WindowStepper(CosineTask(), seeds=(3, 5), lengths=(4, 9), batch_size=8, held_out_prompts=8)
    deep = DeepStepper(DeepConfig(task=RegressionTask.isotropic(2), seeds=(3, 5), lengths=(4, 7), batch_size=8,
                                  held_out_prompts=8))
    for stepper, task, L in ((window, window.task, 9), (deep, deep.cfg.task, 7)):
        tokens, query, target = stepper.prompts(6, [seeding.generator(s, "evaluation", L) for s in (3, 5)])
        for s, seed in enumerate((3, 5)):
            again = task.sample(6, L, seeding.generator(seed, "evaluation", L))
            assert torch.equal(tokens[s], again.tokens.float()) and torch.equal(target[s], again.target.float())
        held = stepper.prompts(8, [seeding.generator(s, "held_out") for s in (3, 5)])
        assert all(torch.equal(a, b) for a, b in zip(held, stepper._held_out))  # the held-out set is drawn so too
