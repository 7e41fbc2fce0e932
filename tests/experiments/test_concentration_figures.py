"""Figures 1 and 5 (softmax against linear attention at the initialisation) and the gaps along a trained run."""
import numpy as np
import pytest

from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train
from softmax_as_linear.experiments import concentration_figures, paper_figures
from softmax_as_linear.figures import paper

# ------------------------------------------------------------------ Figures 1 and 5 (no training)

@pytest.fixture
def tiny_concentration(monkeypatch):
    from softmax_as_linear.experiments import presets

    monkeypatch.setitem(presets.CONCENTRATION_PRESETS, "tiny", dict(lengths=(10, 1000), batch=16, n_batches=3))


@pytest.mark.parametrize("name, covariance", [("fig1", "isotropic"), ("fig5", "kms")])
def test_concentration_figure_gaps_vanish_and_rerun_identically(tiny_concentration, name, covariance):
    import json

    out = concentration_figures.concentration_figure(name, "tiny", device="cpu")
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
    rerun = concentration_figures.concentration_figure(name, "tiny", device="cpu")
    for key in ("output", "grad_weights", "relative_grad"):
        assert rerun[key] == out[key]


def test_concentration_figure_covariance_option_and_bad_input(tiny_concentration):
    kms = concentration_figures.concentration_figure("fig1", "tiny", device="cpu", covariance="kms")
    fig5 = concentration_figures.concentration_figure("fig5", "tiny", device="cpu")
    assert kms["output"] == fig5["output"] and kms["settings"]["covariance"] == "kms"
    with pytest.raises(ValueError, match="preset"):
        concentration_figures.concentration_figure("fig1", "huge")
    with pytest.raises(ValueError, match="name"):
        concentration_figures.concentration_figure("fig2", "tiny")
    with pytest.raises(ValueError, match="covariance"):
        concentration_figures.concentration_figure("fig1", "tiny", covariance="wishart")


def test_reproduce_command_of_figures_1_and_5():
    assert paper_figures.reproduce_command("fig5") == "python -m softmax_as_linear reproduce fig5 --preset paper"
    assert paper_figures.reproduce_command("fig1", "lecture").endswith("fig1 --preset lecture")


# ------------------------------------------------------------------ concentration along training (Section 4)

def test_concentration_along_training_and_its_figure():
    cfg = TrainConfig(d=3, lengths=(4, 8), parametrisation="uv", init="block", alpha=0.3, lr=0.05, steps=20,
                      record_every=10, eval_prompts=16, batch_size=16)
    result = train(cfg, device="cpu")
    data = concentration_figures.concentration_along_training(result, lengths=(5, 20), n_prompts=16)
    assert data["trained_length"] == 8 and data["steps"] == [0, 10, 20]
    assert np.array(data["output"]["mean"]).shape == (2, 3)
    fig = paper.concentration_along_training_figure(data)
    assert len(fig.layout.sliders[0].steps) == 2
    with pytest.raises(ValueError, match="L=7"):
        concentration_figures.concentration_along_training(result, L=7)


# ------------------------------------------------------------------ per-seed curves and final evaluation
