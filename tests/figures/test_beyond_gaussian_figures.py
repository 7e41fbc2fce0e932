"""Chapter 6's figures: built from the experiment's data, with their traces, sliders and notes."""
import numpy as np
import torch

from softmax_as_linear.experiments import beyond_gaussian as experiment
from softmax_as_linear.figures import beyond_gaussian as figures
from softmax_as_linear.theory import covariates, flow_limits, regression
from softmax_as_linear.theory.flow import drift_asymptotics, infinite_prompt_flow


def _fake_tracking(S=3, lengths=(10, 30, 100), T=6):
    g = np.random.default_rng(0)
    distance = {a: (g.random((S, len(lengths), T)) / np.asarray(lengths)[:, None]).tolist() for a in ("softmax", "linear")}
    return {"lengths": list(lengths), "times": list(np.linspace(0, 5, T)), "horizon": 5.0, "seeds": [327, 0, 1][:S],
            "covariates": "uniform", "distance": distance, "sup": {a: np.max(distance[a], -1).tolist() for a in distance},
            "limits": (g.random((S, T)) * 1e-3).tolist(), "limits_sup": [1e-3] * S,
            "paired": g.random((S, len(lengths), T)).tolist()}


def test_tracking_figures():
    tracking = _fake_tracking()
    fig = figures.tracking_figure(tracking)
    assert fig.layout.xaxis.type == "log" and any("limit" in (t.name or "") for t in fig.data)
    timed = figures.tracking_time_figure(tracking)
    assert len(timed.layout.sliders[0].steps) == 3 and timed.layout.sliders[0].active == 2


def test_covariate_law_figures():
    b = torch.linspace(-3, 3, 61, dtype=torch.float64)
    fig = figures.tilted_entry_figure(b.tolist(), {name: covariates.tilted_mean(name, b).tolist()
                                                   for name in ("gaussian", "uniform", "rademacher")})
    assert [t.name for t in fig.data] == ["Gaussian", "uniform", "Rademacher"]
    task = regression.RegressionTask.isotropic(3, covariates="uniform")
    flow = infinite_prompt_flow(*flow_limits.block_init(task, 0.3), task, [0, 1, 2], max_dt=0.5)
    fig = figures.block_flow_figure({"uniform": flow}, drift_asymptotics(task, [1, 2]))
    assert len(fig.data) == 3
    gaps = {"uniform": {"lengths": [10, 100], "scaled": [1.0, 1.1], "low": [0.9, 1.0], "high": [1.1, 1.2],
                        "constant": 1.05, "constant_se": 0.01}}
    assert len(figures.limit_gap_figure(gaps).data) == 3


def test_final_figure_and_missing_note():
    final = {"lengths": [10, 100], "seeds": [327, 0, 1], "covariates": "rademacher", "final_prompts": 100, "noise_floor": 0.05,
             "bayes": [0.09, 0.052], "optimal_linear": [0.2, 0.07], "optimal_linear_gaussian": [0.24, 0.08],
             "risk": {"softmax": [[0.3, 0.09]] * 3}, "linear_exact": [[0.21, 0.072]] * 3}
    fig = figures.final_figure(final)
    assert any("best linear attention, Gaussian inputs" == t.name for t in fig.data)
    note = figures.missing_note("uniform", "paper")
    assert experiment.result_name("uniform", "paper") in note and experiment.reproduce_command("uniform") in note
    assert figures.show_saved("uniform", None, "paper") is None
