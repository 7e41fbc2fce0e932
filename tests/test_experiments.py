"""The data of the paper's figures: built from a sweep, with reference risks drawn by the seeding rule,
per-seed curves with exact and reference risks, saved files found where the reproduction command writes
them, the command that makes them, and the concentration data of Figures 1 and 5 and along training."""
import math

import numpy as np
import pytest

from softmax_as_linear import experiments, figures, icl, seeding
from softmax_as_linear.artifacts import save_json
from softmax_as_linear.evaluation import final_evaluation
from softmax_as_linear.sweep import TrainConfig
from softmax_as_linear.train import train

TINY = dict(lengths=(5, 20), steps=20, record_every=10, eval_prompts=32, batch_size=16)


@pytest.fixture(scope="module")
def sweep():
    return train(TrainConfig(**TINY))


def test_baselines_use_the_bayes_stream_of_the_reference_seed():
    task = icl.RegressionTask.isotropic(3)
    refs = experiments.baselines([5, 20], task, n_bayes_samples=200)
    assert refs["noise_floor"] == task.noise_var / 2
    assert refs["optimal_linear"] == [icl.optimal_linear_risk(L, task) for L in (5, 20)]
    assert experiments.bayes_seed(20) == seeding.stream_seed(seeding.REFERENCE_SEED, "bayes", 20)
    assert refs["bayes"][1] == icl.bayes_risk(20, task, n_samples=200, seed=experiments.bayes_seed(20))[0]


def test_figure_data_dispatches_on_the_registry(sweep):
    assert set(experiments.PAPER_FIGURES) == {"fig2", "fig3", "fig4", "fig6", "fig7", "fig8"}
    gap = experiments.figure_data("fig3", sweep, n_bayes_samples=100)
    assert gap["figure"] == "parameter gap" and gap["lengths"] == [5, 20]
    with pytest.raises(ValueError, match="kms"):
        experiments.figure_data("fig6", sweep)
    with pytest.raises(ValueError, match="figure"):
        experiments.figure_data("fig9", sweep)
    with pytest.raises(ValueError, match="figure"):
        experiments.figure_data("fig5", sweep)  # Figures 1 and 5 need no sweep


def test_saved_figure_loads_when_present_and_says_none_otherwise(tmp_path, sweep):
    assert experiments.saved_figure("fig2", "paper", tmp_path) is None
    data = experiments.parameter_gaps(sweep)
    save_json(tmp_path / "fig3_paper.json", data)
    loaded = experiments.saved_figure("fig3", "paper", tmp_path)
    assert loaded["lengths"] == data["lengths"] and math.isclose(loaded["gap"][1][-1], data["gap"][1][-1])
    with pytest.raises(ValueError, match="figure"):
        experiments.saved_figure("fig9")


def test_reproduce_command_names_the_whole_sweep():
    assert (experiments.reproduce_command("fig3", "lecture")
            == "python -m softmax_as_linear reproduce fig2 fig3 fig4 --preset lecture")
    assert experiments.reproduce_command("fig8") == "python -m softmax_as_linear reproduce fig6 fig7 fig8 --preset paper"


# ------------------------------------------------------------------ Figures 1 and 5 (no training)

@pytest.fixture
def tiny_concentration(monkeypatch):
    from softmax_as_linear import presets

    monkeypatch.setitem(presets.CONCENTRATION_PRESETS, "tiny", dict(lengths=(10, 1000), batch=16, n_batches=3))


@pytest.mark.parametrize("name, covariance", [("fig1", "isotropic"), ("fig5", "kms")])
def test_concentration_figure_gaps_vanish_and_rerun_identically(tiny_concentration, name, covariance):
    import json

    out = experiments.concentration_figure(name, "tiny", device="cpu")
    json.dumps(out)
    assert out["figure"] == name and out["settings"]["covariance"] == covariance
    assert out["lengths"] == [10, 1000] and out["settings"]["n_prompts"] == 48
    for key in ("output", "grad_weights", "grad_uv", "grad_norm_linear", "relative_grad", "ess"):
        assert len(out[key]["mean"]) == 2 and out[key]["low"][0] <= out[key]["mean"][0] <= out[key]["high"][0]
    assert out["output"]["mean"][1] < out["output"]["mean"][0] / 10
    assert out["grad_weights"]["mean"][1] < out["grad_weights"]["mean"][0] / 10
    ratio = out["grad_weights"]["mean"][1] / out["grad_norm_linear"]["mean"][1]
    assert out["relative_grad"]["mean"][1] == pytest.approx(ratio)
    where = out["provenance"]
    assert where["device"] == "cpu" and where["wall_seconds"] >= 0 and where["torch"]
    assert ("identification" in out) == (name == "fig5")
    rerun = experiments.concentration_figure(name, "tiny", device="cpu")
    for key in ("output", "grad_weights", "relative_grad"):
        assert rerun[key] == out[key]


def test_concentration_figure_covariance_option_and_bad_input(tiny_concentration):
    kms = experiments.concentration_figure("fig1", "tiny", device="cpu", covariance="kms")
    fig5 = experiments.concentration_figure("fig5", "tiny", device="cpu")
    assert kms["output"] == fig5["output"] and kms["settings"]["covariance"] == "kms"
    with pytest.raises(ValueError, match="preset"):
        experiments.concentration_figure("fig1", "huge")
    with pytest.raises(ValueError, match="name"):
        experiments.concentration_figure("fig2", "tiny")
    with pytest.raises(ValueError, match="covariance"):
        experiments.concentration_figure("fig1", "tiny", covariance="wishart")


def test_reproduce_command_of_figures_1_and_5():
    assert experiments.reproduce_command("fig5") == "python -m softmax_as_linear reproduce fig5 --preset paper"
    assert experiments.reproduce_command("fig1", "lecture").endswith("fig1 --preset lecture")


# ------------------------------------------------------------------ concentration along training (Section 4)

def test_concentration_along_training_and_its_figure():
    cfg = TrainConfig(d=3, lengths=(4, 8), parametrisation="uv", init="block", alpha=0.3, lr=0.05, steps=20,
                      record_every=10, eval_prompts=16, batch_size=16)
    result = train(cfg, device="cpu")
    data = experiments.concentration_along_training(result, lengths=(5, 20), n_prompts=16)
    assert data["trained_length"] == 8 and data["steps"] == [0, 10, 20]
    assert np.array(data["output"]["mean"]).shape == (2, 3)
    fig = figures.concentration_along_training_figure(data)
    assert len(fig.layout.sliders[0].steps) == 2
    with pytest.raises(ValueError, match="L=7"):
        experiments.concentration_along_training(result, L=7)


# ------------------------------------------------------------------ per-seed curves and final evaluation

KMS_TINY = dict(lengths=(4, 12), steps=30, lr=1e-2, record_every=10, batch_size=32, eval_prompts=128)


@pytest.fixture(scope="module", params=["paper", "published"])
def kms_sweep(request):
    """Two seeds of KMS inputs, for each sampler."""
    return train(TrainConfig(covariance="kms", sampler=request.param, seeds=(327, 3), **KMS_TINY), device="cpu")


def test_figure_data_carry_per_seed_curves_exact_risks_and_references(kms_sweep):
    ev = final_evaluation(kms_sweep, n_prompts=2_000, device="cpu")
    fig2 = experiments.final_risks(kms_sweep, n_bayes_samples=500, evaluation=ev)
    assert fig2["sampler"] == kms_sweep.config.sampler and fig2["final_prompts"] == 2_000
    assert np.asarray(fig2["linear_exact_per_seed"]).shape == (2, 2)
    task = kms_sweep.config.task()
    assert fig2["optimal_linear"] == [icl.optimal_linear_risk(L, task) for L in KMS_TINY["lengths"]]
    # a trained linear run's exact risk is never below the best linear risk at its L
    assert np.all(np.asarray(fig2["linear_exact_per_seed"]) >= np.asarray(fig2["optimal_linear"]) * (1 - 1e-9))
    gaps = experiments.parameter_gaps(kms_sweep, lengths=[4, 12])
    assert np.asarray(gaps["gap_per_seed"]).shape == (2, 2, kms_sweep.steps.size)
    traj = experiments.risk_trajectories(kms_sweep, lengths=[12], n_bayes_samples=500)
    assert np.asarray(traj["softmax_per_seed"]).shape == (2, 1, kms_sweep.steps.size)
    assert np.allclose(traj["softmax_per_seed"], kms_sweep.eval_risk[:, 1:, 0], rtol=1e-4)


def test_provenance_reads_the_commit_from_the_environment_first(monkeypatch):
    monkeypatch.setattr(experiments, "_git", lambda *args: "stale")
    monkeypatch.setenv("SOFTMAX_AS_LINEAR_COMMIT", "0123abc")
    where = experiments.provenance("cpu", 1.0)
    assert where["commit"] == "0123abc" and where["uncommitted_changes"] is None
    monkeypatch.delenv("SOFTMAX_AS_LINEAR_COMMIT")
    assert experiments.provenance("cpu", 1.0)["commit"] == "stale"
    monkeypatch.setattr(experiments, "_git", lambda *args: None)
    assert experiments.provenance("cpu", 1.0)["commit"] is None
