"""The data of the paper's paper: built from a sweep, with reference risks drawn by the seeding rule,
per-seed curves with exact and reference risks, saved files found where the reproduction command writes
them, the command that makes them, and the concentration data of Figures 1 and 5 and along training."""
import math

import numpy as np
import pytest

from softmax_as_linear.core import seeding
from softmax_as_linear.core.artifacts import save_json
from softmax_as_linear.engine.evaluation import final_evaluation
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train
from softmax_as_linear.experiments import paper_figures
from softmax_as_linear.registry import TRAINING_FIGURES
from softmax_as_linear.theory import regression, risks

TINY = dict(lengths=(5, 20), steps=20, record_every=10, eval_prompts=32, batch_size=16)


@pytest.fixture(scope="module")
def sweep():
    return train(TrainConfig(**TINY))


def test_baselines_use_the_bayes_stream_of_the_reference_seed():
    task = regression.RegressionTask.isotropic(3)
    refs = paper_figures.baselines([5, 20], task, n_bayes_samples=200)
    assert refs["noise_floor"] == task.noise_var / 2
    assert refs["optimal_linear"] == [risks.optimal_linear_risk(L, task) for L in (5, 20)]
    assert paper_figures.bayes_seed(20) == seeding.stream_seed(seeding.REFERENCE_SEED, "bayes", 20)
    assert refs["bayes"][1] == risks.bayes_risk(20, task, n_samples=200, seed=paper_figures.bayes_seed(20))[0]


def test_figure_data_dispatches_on_the_registry(sweep):
    assert set(TRAINING_FIGURES) == {"fig2", "fig3", "fig4", "fig6", "fig7", "fig8"}
    gap = paper_figures.figure_data("fig3", sweep, n_bayes_samples=100)
    assert gap["figure"] == "parameter gap" and gap["lengths"] == [5, 20]
    with pytest.raises(ValueError, match="kms"):
        paper_figures.figure_data("fig6", sweep)
    with pytest.raises(ValueError, match="figure"):
        paper_figures.figure_data("fig9", sweep)
    with pytest.raises(ValueError, match="figure"):
        paper_figures.figure_data("fig5", sweep)  # Figures 1 and 5 need no sweep


def test_saved_figure_loads_when_present_and_says_none_otherwise(tmp_path, sweep):
    assert paper_figures.saved_figure("fig2", "paper", tmp_path) is None
    data = paper_figures.parameter_gaps(sweep)
    save_json(tmp_path / "fig3_paper.json", data)
    loaded = paper_figures.saved_figure("fig3", "paper", tmp_path)
    assert loaded["lengths"] == data["lengths"] and math.isclose(loaded["gap"][1][-1], data["gap"][1][-1])
    with pytest.raises(ValueError, match="figure"):
        paper_figures.saved_figure("fig9")


def test_reproduce_command_names_the_whole_sweep():
    assert (paper_figures.reproduce_command("fig3", "lecture")
            == "python -m softmax_as_linear reproduce fig2 fig3 fig4 --preset lecture")
    assert paper_figures.reproduce_command("fig8") == "python -m softmax_as_linear reproduce fig6 fig7 fig8 --preset paper"


KMS_TINY = dict(lengths=(4, 12), steps=30, lr=1e-2, record_every=10, batch_size=32, eval_prompts=128)


@pytest.fixture(scope="module", params=["paper", "published"])
def kms_sweep(request):
    """Two seeds of KMS inputs, for each sampler."""
    return train(TrainConfig(covariance="kms", sampler=request.param, seeds=(327, 3), **KMS_TINY), device="cpu")


def test_figure_data_carry_per_seed_curves_exact_risks_and_references(kms_sweep):
    ev = final_evaluation(kms_sweep, n_prompts=2_000, device="cpu")
    fig2 = paper_figures.final_risks(kms_sweep, n_bayes_samples=500, evaluation=ev)
    assert fig2["sampler"] == kms_sweep.config.sampler and fig2["final_prompts"] == 2_000
    assert np.asarray(fig2["linear_exact_per_seed"]).shape == (2, 2)
    task = kms_sweep.config.task()
    assert fig2["optimal_linear"] == [risks.optimal_linear_risk(L, task) for L in KMS_TINY["lengths"]]
    # a trained linear run's exact risk is never below the best linear risk at its L
    assert np.all(np.asarray(fig2["linear_exact_per_seed"]) >= np.asarray(fig2["optimal_linear"]) * (1 - 1e-9))
    gaps = paper_figures.parameter_gaps(kms_sweep, lengths=[4, 12])
    assert np.asarray(gaps["gap_per_seed"]).shape == (2, 2, kms_sweep.steps.size)
    traj = paper_figures.risk_trajectories(kms_sweep, lengths=[12], n_bayes_samples=500)
    assert np.asarray(traj["softmax_per_seed"]).shape == (2, 1, kms_sweep.steps.size)
    assert np.allclose(traj["softmax_per_seed"], kms_sweep.eval_risk[:, 1:, 0], rtol=1e-4)
