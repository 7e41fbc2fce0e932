"""Chapter 8's log-window runs: the file, its up-to-date short-cut and resumption, and the readings (stationarity,
distance to the optimum, Collins et al.'s directions) against hand-made data with known answers."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear.core.artifacts import load_json
from softmax_as_linear.experiments import nonlinear
from softmax_as_linear.experiments import nonlinear_window as nw
from softmax_as_linear.experiments.reproduce import reproduce
from softmax_as_linear.experiments.reproductions import REPRODUCTIONS
from softmax_as_linear.experiments.result_files import command_for


def test_the_task_is_chapter_8s_and_the_settings_are_checked():
    settings = nw.window_settings("smoke")
    task = nonlinear.nonlinear_config("smoke").task()
    assert repr(settings.task()) == repr(task) and torch.equal(settings.task().omega, task.omega)
    shifted = nw.window_settings("smoke", frequency=4.0, noise_var=0.25).task()
    assert shifted.frequency == 4.0 and shifted.noise_var == 0.25
    for bad, name in ((dict(decay_at=0.0), "decay_at"), (dict(steps=0), "steps"), (dict(lr=-1.0), "lr")):
        with pytest.raises(ValueError, match=name):
            nw.window_settings("smoke", **bad)
    assert command_for(REPRODUCTIONS["nonlinear_window"].file("lecture")) == "python -m softmax_as_linear reproduce nonlinear_window " \
                                                           "--preset lecture"


def test_reproduce_writes_every_stage_per_seed_and_resumes_without_a_step(tmp_path, monkeypatch):
    written = reproduce("nonlinear_window", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)
    assert written == [tmp_path / REPRODUCTIONS["nonlinear_window"].file("smoke")]
    data = load_json(written[0])
    settings, dependence = nw.window_settings("smoke"), nw.dependence_settings("smoke")
    per, T = data["per_seed"], len(data["steps"])
    assert data["complete"] and data["steps"] == settings.record_steps() and data["decay_step"] == settings.decay_step
    assert np.asarray(per["w"]).shape == (2, 2, T) and np.asarray(per["theta"]).shape == (2, 2, 9)
    assert np.allclose(np.asarray(per["w"])[..., -1], np.exp(np.asarray(per["theta"])[..., 0]))
    assert np.asarray(per["w"])[..., 0] == pytest.approx(1.0)  # every run starts at w = 1
    assert np.asarray(per["dependence"]["w"]).shape == (2, 5, len(data["dependence"]["steps"]))
    assert data["dependence"]["settings"] == [[s.frequency, s.noise_var] for s in dependence]
    prov = data["provenance"]
    assert {"device", "torch", "commit", "wall_seconds", "settings", "seeds", "engine_path", "date", "seed_rule",
            "stages"} <= set(prov) and len(prov["stages"]) == 1 + len(dependence) and prov["engine_path"] == "window"
    _check_final_risks(data, settings)
    steps = _count_steps(monkeypatch)
    again = reproduce("nonlinear_window", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)[0]
    assert load_json(again) == data and steps == []  # up to date: the file is left as it is
    again.unlink()  # the finished checkpoints are there: measured again from them, no step taken
    loads = _count_loads(monkeypatch)
    resumed = load_json(reproduce("nonlinear_window", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)[0])
    assert steps == [] and resumed["per_seed"] == per
    checkpoints = sorted((tmp_path / "checkpoints").glob("*.pt"))
    assert len(checkpoints) == 1 + len(dependence) and sorted(loads) == checkpoints  # each read once, no more


def _count_loads(monkeypatch) -> list:
    """Every file torch.load reads from now on, appended to the list returned."""
    import pathlib

    loads, real = [], torch.load
    monkeypatch.setattr(torch, "load", lambda file, *args, **kw: loads.append(pathlib.Path(file)) or real(file, *args,
                                                                                                        **kw))
    return loads


def test_a_stage_stopped_mid_run_resumes_from_its_checkpoint_read_once_to_the_uninterrupted_numbers(
        tmp_path, monkeypatch, capsys):
    from softmax_as_linear.experiments.pipeline import train_stage

    settings = nw.window_settings("smoke", seeds=(0,), lengths=(5,), steps=8)
    checkpoint = tmp_path / "stage.pt"
    stopped = nw.train_windows(settings, checkpoint=checkpoint, should_stop=lambda: True)[1]
    assert not stopped.complete and 0 < stopped.last_step < settings.steps
    loads = _count_loads(monkeypatch)
    stepper, records = train_stage("a window stage", checkpoint, settings, settings.steps,
                                   lambda **kw: nw.train_windows(settings, **kw), "cpu")
    assert f"resuming a window stage from step {stopped.last_step}" in capsys.readouterr().out
    assert loads == [checkpoint]  # the step it resumes from and the state it resumes: one read
    whole, whole_records = nw.train_windows(settings)
    assert records.complete and torch.equal(stepper.theta, whole.theta)
    assert np.array_equal(records.eval_risk, whole_records.eval_risk)


def _count_steps(monkeypatch) -> list:
    from softmax_as_linear.engine.window_step import WindowStepper

    steps, real = [], WindowStepper.step
    monkeypatch.setattr(WindowStepper, "step", lambda self: steps.append(1) or real(self))
    return steps


def _check_final_risks(data, settings):
    """The final risks against an independent computation: each seed's fresh prompts of stream "evaluation" read
    again, each run's weights through attention_optimum's float64 layer on the first L tokens."""
    from softmax_as_linear.core import seeding
    from softmax_as_linear.theory import attention_optimum as ao

    per, task = data["per_seed"], settings.task()
    for s, seed in enumerate(settings.seeds):
        batch = task.sample(settings.final_prompts, max(settings.lengths),
                            seeding.generator(seed, "evaluation", max(settings.lengths)))
        for i, L in enumerate(settings.lengths):
            prompts = ao.Prompts(batch.tokens[:, :L].double(), batch.query.double(), batch.target.double())
            losses = ao.losses("softmax", per["theta"][s][i], prompts).numpy()
            assert per["risk"][s][i] == pytest.approx(losses.mean(), rel=1e-4)
            assert per["risk_se"][s][i] == pytest.approx(losses.std(ddof=1) / math.sqrt(losses.size), rel=1e-3)


def test_window_levels_read_a_stationary_window_and_a_growing_one():
    steps = np.arange(0, 4001, 50)
    rng = np.random.default_rng(0)
    flat = 100 * np.exp(0.05 * rng.standard_normal((3, 1, steps.size)))
    growing = np.exp(np.log(2) * steps / 1000)[None, None].repeat(3, 0)  # doubles every 1,000 steps
    levels = nw.window_levels(np.concatenate([flat, growing], 1), steps, 4000)
    assert abs(levels["drift_mean"][0]) < 4 * levels["drift_se"][0] + 0.02
    second, third = steps[(steps > 1000) & (steps <= 2000)], steps[(steps > 2000) & (steps <= 3000)]
    expected = np.log(2) * (third.mean() - second.mean()) / 1000
    assert levels["drift"][:, 1] == pytest.approx(expected) and levels["drift_se"][1] == pytest.approx(0, abs=1e-12)
    with pytest.raises(ValueError, match="steps"):
        nw.window_levels(flat, [0, 4000], 4000)


def test_against_optima_and_the_directions_on_known_numbers():
    steps = list(range(0, 401, 10))
    w = np.empty((2, 2, len(steps)))
    w[0], w[1] = 50.0, 200.0  # settled at 50 and 200 at L = 10 and 100 ... for both seeds
    w[1, 1] = 220.0  # ... but seed 1 at 220 at L = 100
    data = {"lengths": [10, 100], "steps": steps,
            "per_seed": {"w": w.transpose(0, 1, 2).tolist(), "risk": [[0.2, 0.05], [0.22, 0.05]]}}
    w_arr = np.empty((2, 2, len(steps)))
    w_arr[:, 0], w_arr[:, 1] = 50.0, [[200.0], [220.0]]
    data["per_seed"]["w"] = w_arr.tolist()
    optima = {"lengths": [10, 100, 1000], "summary": {"softmax": {
        "log_w": [math.log(50.0), math.log(150.0), 5.0], "log_w_se": [0.01, 0.05, 0.1],
        "held_out": [0.2, 0.04, 0.03], "held_out_se": [0.001, 0.001, 0.001]}}}
    rows = nw.against_optima(data, optima)["rows"]
    assert [r["L"] for r in rows] == [10, 100]
    trained = 0.5 * (math.log(200.0) + math.log(220.0))
    assert rows[1]["log_ratio"] == pytest.approx(trained - math.log(150.0))
    se = math.hypot(0.5 * (math.log(220.0) - math.log(200.0)), 0.05)  # sd/sqrt(2) of two values = half their gap
    assert rows[1]["log_ratio_se"] == pytest.approx(se) and rows[1]["z"] == pytest.approx(rows[1]["log_ratio"] / se)
    assert rows[0]["excess_risk"] == pytest.approx(0.01) and rows[1]["excess_risk"] == pytest.approx(0.01)
    # directions: a window larger at gamma = 4 than at 2 is the expected direction (z > 0), smaller with more noise too
    dep_steps = list(range(0, 101, 10))
    levels = {(1.0, 0.05): 40.0, (2.0, 0.05): 80.0, (4.0, 0.05): 160.0, (2.0, 0.01): 120.0, (2.0, 0.25): 60.0}
    settings = list(levels)
    dep_w = np.array([[[levels[s] * (1 + 0.01 * seed)] * len(dep_steps) for s in settings] for seed in range(3)])
    dep_w *= 1 + 0.02 * np.random.default_rng(0).random(dep_w.shape[:2])[..., None]  # seeds disagree a little
    data = {"dependence": {"length": 100, "settings": [list(s) for s in settings], "steps": dep_steps},
            "per_seed": {"dependence": {"w": dep_w.tolist()}}}
    out = nw.dependence_directions(data)
    by = {(d["setting"], d["from"], d["to"]): d for d in out["directions"]}
    assert set(by) == {("frequency", 1.0, 2.0), ("frequency", 2.0, 4.0), ("noise_var", 0.01, 0.05),
                       ("noise_var", 0.05, 0.25)}
    assert all(d["z"] > 0 for d in out["directions"])
    expected = np.mean(np.log(dep_w[:, 1, -1]) - np.log(dep_w[:, 3, -1]))  # s^2 = 0.01 -> 0.05, paired by seed
    assert by[("noise_var", 0.01, 0.05)]["log_change"] == pytest.approx(expected)
    assert expected == pytest.approx(math.log(80 / 120), abs=0.03)
