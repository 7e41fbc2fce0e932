"""Chapter 8's experiment: the sweep with cosine labels, its result file, its readings and its figures."""
import json

import numpy as np
import pytest

from softmax_as_linear.core.artifacts import load_json
from softmax_as_linear.engine.evaluation import final_evaluation
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import resolved, train
from softmax_as_linear.experiments import nonlinear, presets
from softmax_as_linear.experiments.reproduce import check_options, reproduce
from softmax_as_linear.experiments.reproductions import REPRODUCTIONS
from softmax_as_linear.experiments.result_files import command_for
from softmax_as_linear.figures import nonlinear as figures


def test_cosine_labels_train_paired_runs_on_the_engine():
    cfg = nonlinear.nonlinear_config("smoke", steps=6, record_every=3)
    result = train(cfg, device="cpu")
    assert result.eval_risk.shape == (2, 2, 2, 3) and np.isfinite(result.eval_risk).all()
    # paired: both activations of a seed start from the same weights
    for values in result.params.values():
        assert np.array_equal(values[:, :, 0, 0], values[:, :, 1, 0])
    assert resolved(cfg, "cpu").rng == "torch"
    with pytest.raises(ValueError, match="labels"):
        final_evaluation(result, 8, device="cpu")


@pytest.mark.parametrize("change, name", [(dict(covariance="kms"), "covariance"), (dict(sampler="published"), "sampler"),
                                          (dict(models=("softmax_limit",)), "models"), (dict(rng="philox"), "rng"),
                                          (dict(labels="quartic"), "labels"), (dict(features=0), "features")])
def test_bad_cosine_settings_are_named(change, name):
    with pytest.raises(ValueError, match=name):
        TrainConfig(**{"labels": "cosine", **change})


def test_window_readings_and_exponent():
    U = np.zeros((3, 2, 3, 3))
    V = np.zeros((3, 2, 3, 3))
    lengths = (10, 100)
    for s in range(3):
        for l, L in enumerate(lengths):
            U[s, l, :2, :2] = np.diag([1.0, 1.0]) * 3.0 * L ** (0.5 + 0.01 * s)
    readings = nonlinear.window_readings(U, V, 2)
    assert np.allclose(readings["anisotropy"], 0) and np.allclose(readings["label_score"], 0)
    fit = nonlinear.window_exponent(lengths, readings["w"])
    assert fit["mean"] == pytest.approx(0.51) and fit["low"] < 0.51 < fit["high"]
    with pytest.raises(ValueError, match="w"):
        nonlinear.window_exponent(lengths, -readings["w"])
    keep = np.ones((3, 2), dtype=bool)
    keep[0, 1] = False
    partial = nonlinear.window_exponent(lengths, readings["w"], keep)
    assert np.isnan(partial["per_seed"][0]) and partial["seeds_fitted"] == 2


def test_reproduce_nonlinear_writes_a_complete_file_and_resumes(tmp_path, monkeypatch):
    written = reproduce("nonlinear", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)
    assert written == [tmp_path / REPRODUCTIONS["nonlinear"].file("smoke")]
    data = load_json(written[0])
    prov = data["provenance"]
    for key in ("device", "torch", "commit", "wall_seconds", "seeds", "engine_path", "allow_dirty"):
        assert key in prov
    assert data["complete"] and data["config"]["labels"] == "cosine"
    ref = data["references"]
    assert ref["noise_floor"] < ref["bayes"][-1] <= ref["bayes"][0] < ref["zero"]
    assert np.asarray(data["final"]["risk"]).shape == (2, 2, 2)
    dependence = data["dependence"]
    assert np.asarray(dependence["w"]).shape == (len(presets.NONLINEAR_DEPENDENCE), 2) and dependence["complete"]
    from softmax_as_linear.engine.tensor_step import TensorStepper

    steps, real = [], TensorStepper.step
    monkeypatch.setattr(TensorStepper, "step", lambda self: steps.append(1) or real(self))
    again = reproduce("nonlinear", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)[0]
    assert load_json(again) == data and steps == []  # up to date: the file is left as it is
    again.unlink()  # the finished checkpoints are still there: measured again from them, no step taken
    resumed = load_json(reproduce("nonlinear", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)[0])
    assert steps == [] and resumed["final"]["risk"] == data["final"]["risk"]
    assert resumed["dependence"]["w"] == data["dependence"]["w"]
    for build in (figures.risk_figure, figures.window_figure):
        assert build(data).layout.title.text
    json.dumps(figures.window_figure(data, 0.4).to_plotly_json(), default=str)


def test_options_that_do_not_apply_are_refused():
    with pytest.raises(ValueError, match="seeds"):
        check_options("lecture", None, seeds=3, names=["nonlinear"])
    assert command_for("nonlinear_lecture.json").endswith("reproduce nonlinear --preset lecture")
