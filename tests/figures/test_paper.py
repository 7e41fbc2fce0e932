"""Figures of the regression chapters: they draw what the data says (values, seed bands, diverged runs, sliders),
and a paper-scale artifact is shown when given and announced as missing otherwise."""
import numpy as np
import plotly.graph_objects as go
import pytest

from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train
from softmax_as_linear.experiments import paper_figures
from softmax_as_linear.figures import paper

TINY = dict(lengths=(5, 20), steps=20, record_every=10, eval_prompts=32, batch_size=16)


@pytest.fixture(scope="module")
def sweep():
    return train(TrainConfig(**TINY))


def _trace(fig, name_start):
    matches = [t for t in fig.data if (t.name or "").startswith(name_start)]
    assert len(matches) == 1, [t.name for t in fig.data]
    return matches[0]


def test_final_risk_figure_draws_the_data(sweep):
    data = paper_figures.final_risks(sweep, n_bayes_samples=200)
    fig = paper.final_risk_figure(data)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    np.testing.assert_allclose(_trace(fig, "trained softmax").y.astype(float), data["softmax"], rtol=1e-5)
    np.testing.assert_allclose(_trace(fig, "best linear").y.astype(float), data["optimal_linear"], rtol=1e-5)
    assert list(_trace(fig, "label-noise").y) == [0.05, 0.05]


def test_diverged_runs_are_gaps_and_counted():
    data = {"lengths": [10, 20], "steps": 100, "covariance": "isotropic", "noise_floor": 0.05,
            "bayes": [0.1, 0.07], "optimal_linear": [0.2, 0.15], "softmax": [0.3, 0.2],
            "linear": [float("nan"), 0.16], "linear_diverged": [1, 0], "softmax_diverged": [0, 0]}
    fig = paper.final_risk_figure(data)
    linear = _trace(fig, "trained linear")
    assert "1 diverged run" in linear.name and linear.y[0] is None
    assert "diverged" not in _trace(fig, "trained softmax").name


def test_parameter_gap_figure_leaves_out_step_zero(sweep):
    data = paper_figures.parameter_gaps(sweep)
    fig = paper.parameter_gap_figure(data)
    assert len(fig.data) == len(data["lengths"])
    assert list(fig.data[0].x) == data["steps"][1:]
    np.testing.assert_allclose(fig.data[-1].y.astype(float), data["gap"][-1][1:], rtol=1e-5, atol=1e-12)


def test_risk_trajectory_figure_has_one_slider_step_per_length(sweep):
    data = paper_figures.risk_trajectories(sweep, n_bayes_samples=200)
    fig = paper.risk_trajectory_figure(data, active=0)
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == [str(L) for L in data["lengths"]]
    shown = [t for t in fig.data if t.visible is not False]
    softmax = [t for t in shown if t.name == "softmax attention"]
    np.testing.assert_allclose(softmax[0].y.astype(float), data["softmax"][0], rtol=1e-5)


def test_figure_from_data_dispatches_and_checks_the_name(sweep):
    data = paper_figures.parameter_gaps(sweep)
    assert paper.figure_from_data("fig3", data, title="x").layout.title.text == "x"
    with pytest.raises(ValueError, match="name"):
        paper.figure_from_data("fig5", data)


def test_run_figure_marks_a_diverged_run():
    from softmax_as_linear.theory import models

    base = models.AttentionModel(6, seed=0).weights()
    init = {n: 30 * w.detach() for n, w in base.items()}
    result = train(TrainConfig(**{**TINY, "lengths": (10,)}, init="given", lr=0.05), init_weights=init)
    assert result.diverged.all()
    references = {"noise_floor": 0.05, "optimal_linear": [0.3], "bayes": [0.2]}
    fig = paper.run_figure(result, references)
    assert _trace(fig, "label-noise floor").y == (0.05, 0.05)
    assert _trace(fig, "best linear attention, L = 10").y == (0.3, 0.3)
    assert _trace(fig, "Bayes (ridge), L = 10").y == (0.2, 0.2)
    line = _trace(fig, "softmax attention, L = 10: DIVERGED at step")
    np.testing.assert_allclose(line.x, result.steps)
    at = int(result.diverged_at[0, 0, result.config.models.index("softmax")])
    cross = _trace(fig, "softmax diverged")
    assert cross.marker.symbol == "x" and cross.x == (at,)
    with pytest.raises(ValueError, match="references"):
        paper.run_figure(result, {**references, "bayes": [0.2, 0.1]})


def test_missing_note_gives_the_command():
    note = paper.missing_note("fig6")
    assert "has not been generated" in note
    assert "python -m softmax_as_linear reproduce fig6 fig7 fig8 --preset paper" in note
    published = paper.missing_note("fig7", "lecture", sampler="published")
    assert "results/fig7_lecture_published.json" in published
    assert "reproduce fig6 fig7 fig8 --preset lecture --sampler published" in published


def test_show_saved_shows_the_note_or_the_figure(sweep):
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    with capture_output() as missing:
        assert paper.show_saved("fig4", None) is False
    assert "reproduce fig2 fig3 fig4 --preset paper" in missing.outputs[0].data["text/markdown"]
    data = paper_figures.risk_trajectories(sweep, n_bayes_samples=100)
    with capture_output() as present:
        assert paper.show_saved("fig4", {**data, "complete": False}) is True
    assert "application/vnd.plotly.v1+json" in present.outputs[0].data
    assert "partial: training stopped at step 20" in present.outputs[0].data["text/plain"]


def test_flow_figure_overlays_the_flow_under_every_panel():
    data = {"lengths": [10, 100], "activations": ["softmax"], "times": [0.0, 1.0, 2.0],
            "flow_risk": [0.5, 0.2, 0.1], "risk": {"softmax": [[0.5, 0.3, 0.2], [0.5, 0.21, 0.11]]}}
    fig = paper.flow_figure(data)
    assert fig.data[0].name == "infinite-prompt gradient flow"
    for step in fig.layout.sliders[0].steps:
        assert step.args[0]["visible"][0] is True
    assert isinstance(fig, go.Figure)


def test_flow_figures_show_the_flow_and_its_limit():
    from softmax_as_linear.theory import flow_limits, regression
    from softmax_as_linear.theory.flow import infinite_prompt_flow

    task = regression.RegressionTask.isotropic(3)
    flow = infinite_prompt_flow(*flow_limits.block_init(task, 0.5), task, [0.0, 1.0, 15.0], max_dt=0.1)
    limit = flow_limits.limit_parameters(task)
    fig = paper.flow_convergence_figure({"isotropic": (flow, limit, task.noise_floor())})
    excess, distance = fig.data
    assert excess.y[0] == pytest.approx(flow["risk"][0] - task.noise_var / 2)
    assert distance.y[-1] is None or distance.y[-1] < 1e-10  # converged to (U*, V*): 3e-14 at t = 15
    heat = paper.flow_matrices_figure(flow, limit)
    labels = [s.label for s in heat.layout.sliders[0].steps]
    assert labels == ["0", "1", "U*, V*"]  # at t = 15 the flow has reached the limit: no repeated picture
    assert heat.data[-1].z[0][0] == pytest.approx(float(limit[0][0, 0]), abs=1e-4)
    assert heat.data[-1].z[0][task.D] is None  # the column between U and V


@pytest.mark.slow
def test_flow_matrices_figure_keeps_only_steps_that_move():
    from softmax_as_linear.theory import flow_limits, regression
    from softmax_as_linear.theory.flow import infinite_prompt_flow

    task = regression.RegressionTask.isotropic(3)
    flow = infinite_prompt_flow(*flow_limits.block_init(task, 0.5), task, np.linspace(0, 60, 121), max_dt=0.1)
    heat = paper.flow_matrices_figure(flow, flow_limits.limit_parameters(task), min_change=0.05)
    scale = heat.data[0].zmax  # the colour scale shared by every step
    pictures = [np.asarray(t.z, dtype=float) for t in heat.data]
    assert 3 <= len(pictures) < 121
    for before, after in zip(pictures, pictures[1:]):
        assert np.nanmax(np.abs(after - before)) >= 0.05 * scale - 1e-4  # z is rounded to 4 decimals
    with pytest.raises(ValueError, match="every"):
        paper.flow_matrices_figure(flow, flow_limits.limit_parameters(task), every=0)
    with pytest.raises(ValueError, match="min_change"):
        paper.flow_matrices_figure(flow, flow_limits.limit_parameters(task), min_change=1.5)


def test_seed_figure_marks_diverged_seeds():
    outcome = {"seeds": [0, 1, 2], "final": {"linear": [[0.2], [float("nan")], [0.3]], "softmax": [[0.3], [0.31], [0.4]]}}
    fig = paper.seed_figure({"lr = 1": outcome})
    crosses = [t for t in fig.data if t.name.endswith("diverged")]
    assert len(crosses) == 1 and list(crosses[0].x) == [1] and crosses[0].y[0] > 0.4


def test_concentration_gap_figure_draws_every_series_with_its_band():
    data = {"figure": "fig5", "preset": "paper", "lengths": [10, 100, 1000],
            "settings": {"covariance": "kms"}}
    for key in ("output", "grad_weights", "grad_uv", "relative_grad"):
        data[key] = {"mean": [1.0, 0.1, 0.01], "low": [-0.5, 0.05, 0.005], "high": [2.0, 0.2, 0.02]}
    fig = paper.concentration_gap_figure(data)
    assert "Course reproduction of Figure 5" in fig.layout.title.text and "kms" in fig.layout.title.text
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(lines) == 4 and any("relative" in t.name for t in lines)
    bands = [t for t in fig.data if t.fill == "toself"]
    assert len(bands) == 4 and min(min(b.y) for b in bands) > 0  # negative interval ends drawn at the floor
    old = {k: v for k, v in data.items() if k != "relative_grad"}  # files written before the relative gap
    assert len([t for t in paper.concentration_gap_figure(old).data if t.mode == "lines+markers"]) == 3


def test_seed_bands_are_drawn_from_the_seeds():
    seeds = [327, 0, 1]
    per_seed = [[0.3, 0.2], [0.31, 0.21], [0.29, 0.19]]
    data = {"lengths": [10, 20], "seeds": seeds, "steps": 100, "covariance": "kms", "noise_floor": 0.05,
            "bayes": [0.1, 0.08], "optimal_linear": [0.2, 0.15], "softmax": [0.3, 0.2], "linear": [0.3, 0.2],
            "softmax_per_seed": per_seed, "linear_per_seed": per_seed, "linear_exact_per_seed": per_seed}
    traces = paper.final_risk_figure(data).data
    names = [trace.name for trace in traces]
    assert any("median of 3 seeds" in n for n in names) and any("range of 3 seeds" in n for n in names)
    band = next(t for t in traces if t.name == "range of 3 seeds")        # lowest to highest seed
    assert min(v for v in band.y if v is not None) == 0.19 and max(v for v in band.y if v is not None) == 0.31
    ten = {**data, "seeds": list(range(10)), "softmax_per_seed": [[0.3 + i / 100, 0.2] for i in range(10)]}
    assert any("10-90 % of 10 seeds" in (t.name or "") for t in paper.final_risk_figure(ten).data)
    assert any("seed 327" in n for n in names) and any("exact risk" in n for n in names)
    one = {**data, "seeds": [327], "softmax_per_seed": per_seed[:1], "linear_exact_per_seed": per_seed[:1]}
    assert not any("median" in (t.name or "") for t in paper.final_risk_figure(one).data)


def test_provenance_note_says_where_a_partial_sweep_stopped_and_how_long_it_trained():
    origin = {"preset": "paper", "settings": {"seeds": [327, 0], "steps": 300_000, "sampler": "published"},
              "device_name": "GPU X", "torch": "2.x", "commit": "abcdef1234567", "training_seconds": 67.3,
              "wall_seconds": 73.7, "date": "2026-11-26T12:02:08Z"}
    partial = paper.provenance_note({"provenance": origin, "complete": False, "steps": [0, 1000, 83000]})
    assert "stopped at step 83,000 of 300,000 (partial)" in partial and "67.3 s of training" in partial
    assert "2 seeds" in partial and "sampler published" in partial and "GPU X" in partial
    done = paper.provenance_note({"provenance": origin, "complete": True, "steps": 300_000})
    assert "300,000 steps" in done and "partial" not in done
    assert paper.provenance_note({}) == "Provenance: not recorded in this file."
    ten = {"provenance": {**origin, "settings": {**origin["settings"], "seeds": [327, *range(9)]}}}
    assert "10 seeds (lines: their median; shaded: their 10-90 % range; dotted: seed 327)" in paper.provenance_note(ten)
    one = {"provenance": {**origin, "settings": {**origin["settings"], "seeds": [327]}}}
    assert "1 seed," in paper.provenance_note(one)


def test_one_or_two_seeds_draw_their_mean_leaving_diverged_runs_out():
    per_seed = [[0.3, np.nan, np.nan], [0.5, 0.2, np.nan]]
    (line,) = paper._seed_traces([10, 20, 30], per_seed, [0, 1], "#000000", "softmax")
    assert list(line.y) == [pytest.approx(0.4), 0.2, None]
