"""The deep stepper: K = 1 columns are the one-layer model, a step is the plain per-run loop, resume is exact."""
import pytest
import torch

from softmax_as_linear import RegressionTask
from softmax_as_linear.core import seeding
from softmax_as_linear.engine.deep import DeepConfig, DeepStepper
from softmax_as_linear.theory import depth, models

TASK = RegressionTask.isotropic(d=2)


def _cfg(**changes):
    settings = dict(task=TASK, seeds=(0, 1), lengths=(5, 9), batch_size=8, held_out_prompts=16, lr=0.05,
                    optimizer="sgd")
    settings.update(changes)
    return DeepConfig(**settings)


def test_one_layer_columns_are_the_one_layer_model():
    stepper = DeepStepper(_cfg(), dtype=torch.float64)
    tokens, query, target = stepper._held_out
    losses = stepper.losses(tokens, query, target)  # (S, nL, nA, B)
    U, v = stepper.weights()["U"], stepper.weights()["v"]
    for s in range(2):
        for i, L in enumerate((5, 9)):
            for a, (activation, K) in enumerate(stepper.cfg.models):
                V = torch.zeros(K if K else 1, 3, 3, dtype=torch.float64)
                V[:, -1] = v[s, i, a, :K]
                if K == 1:
                    pred = models.predict(tokens[s, :, :L], query[s], U[s, i, a, 0], V[0], activation)
                else:
                    pred = depth.deep_predict(tokens[s, :, :L], query[s], U[s, i, a, :K], V, activation)
                assert torch.allclose(losses[s, i, a], 0.5 * (pred - target[s]) ** 2, atol=1e-12)
    # the absent second layer of the K = 1 columns is zero, the first layers of a seed are shared
    assert torch.equal(U[:, :, 0, 1], torch.zeros_like(U[:, :, 0, 1])) and torch.equal(U[:, :, 0, 0], U[:, :, 2, 0])


def test_a_step_is_the_plain_loop_of_each_run():
    """One step is SGD on the batch's mean squared error (MSE = 2R), as every stepper of the engine takes it."""
    cfg = _cfg(seeds=(3,), lengths=(7,), models=(("softmax", 2),))
    stepper = DeepStepper(cfg, dtype=torch.float64)
    U = stepper.U.detach()[0, 0, 0].clone().requires_grad_(True)
    v = stepper.v.detach()[0, 0, 0].clone().requires_grad_(True)
    generator = seeding.generator(3, "train")
    for _ in range(3):
        stepper.step()
        batch = TASK.sample(8, 7, generator)
        V = torch.cat([torch.zeros(2, 2, 3, dtype=torch.float64), v[:, None, :]], dim=1)
        pred = depth.deep_predict(batch.tokens.double(), batch.query.double(), U, V)
        loss = ((pred - batch.target.double()) ** 2).mean()  # MSE = 2R, the engine's objective
        gU, gv = torch.autograd.grad(loss, (U, v))
        with torch.no_grad():
            U -= 0.05 * gU
            v -= 0.05 * gv
    assert torch.allclose(stepper.U.detach()[0, 0, 0], U, atol=1e-12)
    assert torch.allclose(stepper.v.detach()[0, 0, 0], v, atol=1e-12)


def test_resume_is_exact_and_absent_layers_never_move():
    first = DeepStepper(_cfg(optimizer="adam"))
    for _ in range(2):
        first.step()
    saved = first.state()
    for _ in range(2):
        first.step()
    second = DeepStepper(_cfg(optimizer="adam"))
    second.load_state(saved)
    for _ in range(2):
        second.step()
    assert torch.equal(first.U, second.U) and torch.equal(first.v, second.v)
    assert torch.equal(first.batch_risk(), second.batch_risk())
    assert torch.equal(first.U.detach()[:, :, :2, 1], torch.zeros_like(first.U.detach()[:, :, :2, 1]))
    risk, sd = first.held_out()
    assert risk.shape == sd.shape == (2, 2, 4) and bool((sd > 0).all())


def test_a_diverged_run_stops_and_says_when():
    stepper = DeepStepper(_cfg(lr=1e6))
    for _ in range(6):
        stepper.step()
    dead = ~stepper.alive
    assert dead.any() and bool((stepper.diverged_at[dead] >= 0).all()) and bool((stepper.diverged_at[~dead] == -1).all())
    frozen = stepper.U.detach().clone()
    stepper.step()
    assert torch.equal(stepper.U.detach()[dead], frozen[dead])


def test_a_run_whose_risk_exceeds_blowup_times_the_zero_risk_diverges_as_in_the_main_engine():
    """The engine's rule (engine.stepper.sgd_update): finite but above blowup x the zero predictor's risk is
    diverged; the run records the step it crossed at and keeps it while the others go on."""
    first = DeepStepper(_cfg()).batch_risk()  # (S, nL, nA): the risks on the batch the first step draws
    low, high = float(first.min()), float(first.max())
    assert torch.isfinite(first).all() and low < high
    blowup = (low + high) / 2 / TASK.zero_risk()
    stepper = DeepStepper(_cfg(blowup=blowup))
    assert stepper.threshold == pytest.approx(blowup * TASK.zero_risk())
    stepper.step()
    over = first > stepper.threshold
    assert over.any() and (~over).any()
    assert torch.equal(~stepper.alive, over)
    assert bool((stepper.diverged_at[over] == 0).all()) and bool((stepper.diverged_at[~over] == -1).all())
    stepper.step()  # later steps: the stopped runs keep step 0, a run crossing now records step 1
    assert bool((stepper.diverged_at[over] == 0).all())
    assert bool((stepper.diverged_at[(~over) & ~stepper.alive] == 1).all())


def test_the_configuration_round_trips_and_a_run_resumes_from_a_checkpoint_of_the_engine_loop(tmp_path):
    from softmax_as_linear.engine.train import run

    cfg = _cfg(task=RegressionTask.kms(d=2, rho=0.4, covariates="uniform"), models=(("softmax", 2), ("linear", 1)))
    again = DeepConfig.from_dict(cfg.as_dict())
    assert again.as_dict() == cfg.as_dict() and torch.equal(again.task.covariance, cfg.task.covariance)
    assert (again.task.covariates, again.models, again.seeds) == ("uniform", cfg.models, cfg.seeds)
    whole = run(DeepStepper(cfg), 4, [0, 2, 4])
    calls = []
    part = run(DeepStepper(cfg), 4, [0, 2, 4], config=cfg, checkpoint=tmp_path / "deep.pt", checkpoint_every=2,
               should_stop=lambda: calls.append(1) or True)
    assert not part.complete and part.last_step == 2
    resumed_stepper = DeepStepper(cfg)
    resumed = run(resumed_stepper, 4, [0, 2, 4], config=cfg, checkpoint=tmp_path / "deep.pt")
    assert resumed.complete and resumed.engine_path == "deep"
    assert torch.equal(torch.as_tensor(resumed.eval_risk), torch.as_tensor(whole.eval_risk))
    assert torch.equal(torch.as_tensor(resumed.history["U"]), torch.as_tensor(whole.history["U"]))
    with pytest.raises(ValueError, match="different configuration"):
        run(DeepStepper(_cfg(lr=0.01)), 4, [0, 2, 4], config=_cfg(lr=0.01), checkpoint=tmp_path / "deep.pt")


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="optimizer"):
        _cfg(optimizer="lbfgs")
    with pytest.raises(ValueError, match="models"):
        _cfg(models=(("relu", 1),))
    with pytest.raises(ValueError, match="lengths"):
        _cfg(lengths=(0,))
    with pytest.raises(ValueError, match="blowup"):
        _cfg(blowup=0.0)
    with pytest.raises(ValueError, match="seeds must be distinct"):
        _cfg(seeds=(1, 1))
    with pytest.raises(ValueError, match="lengths must be increasing"):
        _cfg(lengths=(9, 5))


def test_the_engine_loop_trains_a_deep_stepper_as_stepping_it_by_hand():
    """The deep stepper goes through the engine's one loop (engine.train.run): records at step 0 read the first
    batch without taking it, and the records equal those of stepping by hand."""
    from softmax_as_linear.engine.stepper import Stepper
    from softmax_as_linear.engine.train import run

    interface = [n for n in dir(Stepper) if not n.startswith("_")] + list(Stepper.__annotations__)

    looped, by_hand = DeepStepper(_cfg()), DeepStepper(_cfg())
    assert all(hasattr(looped, name) for name in interface), interface
    first = by_hand.batch_risk()
    records = run(looped, 4, [0, 2, 4])
    assert records.engine_path == "deep" and records.complete and records.last_step == 4
    assert torch.equal(torch.as_tensor(records.train_risk[..., 0]), first.double())
    for _ in range(4):
        by_hand.step()
    assert torch.equal(torch.as_tensor(records.train_risk[..., 2]), by_hand.batch_risk().double())
    assert torch.equal(torch.as_tensor(records.history["U"][:, :, :, 2]), by_hand.U.detach().double())
