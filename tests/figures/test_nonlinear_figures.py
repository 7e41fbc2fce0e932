"""Chapter 8's figures of the trained windows, drawn from the stored lecture result."""
import numpy as np
import pytest

from softmax_as_linear.experiments.result_files import saved_nonlinear
from softmax_as_linear.figures import nonlinear as figures


@pytest.fixture(scope="module")
def data():
    return saved_nonlinear("lecture", required=True)


def test_window_figure_draws_every_run_and_fits_no_power_law(data):
    fig = figures.window_figure(data, 0.4)
    soft = data["models"].index("softmax")
    w = np.asarray(data["windows"]["w"])[:, :, soft]
    markers = [t for t in fig.data if t.mode == "markers"]
    assert sum(len(t.y) for t in markers) == w.size
    assert sorted(np.concatenate([t.y for t in markers])) == pytest.approx(sorted(w.ravel()))
    assert not any("fit" in (t.name or "") for t in fig.data)
    assert "narrows" not in fig.layout.title.text


def test_window_paths_figure_draws_the_recorded_windows(data):
    fig = figures.window_paths_figure(data, 1)
    soft = data["models"].index("softmax")
    paths = np.asarray(data["trajectories"]["w"])[1, :, soft]
    assert len(fig.data) == len(data["references"]["lengths"])
    for trace, path in zip(fig.data, paths):
        np.testing.assert_allclose(trace.y, path[1:])
    with pytest.raises(ValueError, match="seed_index"):
        figures.window_paths_figure(data, 9)


def test_risk_figure_draws_linear_attention_s_bound_when_given(data):
    plain, bounded = figures.risk_figure(data), figures.risk_figure(data, 0.337)
    assert len(bounded.data) == len(plain.data) + 1
    line = [t for t in bounded.data if "bound" in (t.name or "")]
    assert len(line) == 1 and np.allclose(line[0].y, 0.337)


def _optima():
    """A small result of the optima's shape: two lengths, three replicates."""
    summary = {model: {"held_out": [0.3, 0.2], "held_out_se": [0.01, 0.02]}
               for model in ("nadaraya_watson", "softmax", "linear", "affine")}
    summary["softmax"].update(log_w=[np.log(30.0), np.log(90.0)], log_w_se=[0.1, 0.2])
    summary["nadaraya_watson"].update(log_w=[np.log(14.0), np.log(93.0)], log_w_se=[0.05, 0.1])
    return {"lengths": [10, 100], "replicates": 3, "models": ["nadaraya_watson", "softmax", "linear", "affine"],
            "summary": summary, "limits": {"linear": 0.337, "affine": 0.2375, "noise_floor": 0.025}}


def test_optimum_window_figure_draws_each_optimum_with_its_band_and_the_trained_windows(data):
    optima = _optima()
    fig = figures.optimum_window_figure(optima, data)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    np.testing.assert_allclose(lines[0].y, [30, 90])
    np.testing.assert_allclose(lines[0].y + lines[0].error_y.array, [30 * np.exp(0.2), 90 * np.exp(0.4)])
    np.testing.assert_allclose(lines[0].y - lines[0].error_y.arrayminus, [30 * np.exp(-0.2), 90 * np.exp(-0.4)])
    bands = [t for t in fig.data if t.fill == "toself"]
    assert len(bands) == 2
    trained = [t for t in fig.data if t.mode == "markers"]
    soft = data["models"].index("softmax")
    kept = np.asarray(data["windows"]["anisotropy"])[:, :, soft] < 0.5
    assert len(trained) == 1 and len(trained[0].y) == kept.sum()
    assert len(figures.optimum_window_figure(optima).data) == 4


def test_optimum_risk_figure_draws_every_model_and_the_limits():
    fig = figures.optimum_risk_figure(_optima())
    assert len(fig.data) == 3 + 4
    bound = [t for t in fig.data if "bound" in (t.name or "")]
    assert np.allclose(bound[0].y, 0.337)
    assert all(np.allclose(t.error_y.array, [0.02, 0.04]) for t in fig.data if t.mode == "lines+markers")


def test_the_figures_and_the_fit_draw_the_same_runs_as_kernel_smoothers(data):
    # one rule (experiments.nonlinear.kernel_smoothers): a run with an isotropic score but a negative window is not a
    # kernel smoother, in the fit of the window's exponent as in both figures
    import copy

    from softmax_as_linear.experiments import nonlinear

    changed = copy.deepcopy(data)
    soft = changed["models"].index("softmax")
    changed["windows"]["w"][0][1][soft] = -abs(changed["windows"]["w"][0][1][soft])
    changed["windows"]["anisotropy"][0][1][soft] = 0.1
    changed["windows"]["kernel_anisotropy"] = 0.9  # a file's record of the threshold does not change the rule
    kept = nonlinear.kernel_smoothers(changed["windows"], soft)
    assert not kept[0, 1] and kept.sum() >= 2
    aniso = np.asarray(changed["windows"]["anisotropy"], dtype=float)[:, :, soft]
    assert np.array_equal(kept, (aniso < nonlinear.KERNEL_ANISOTROPY)
                          & (np.asarray(changed["windows"]["w"], dtype=float)[:, :, soft] > 0))
    fig = figures.window_figure(changed)
    drawn = [t for t in fig.data if t.mode == "markers" and "kernel-like" in t.name]
    assert sum(len(t.y) for t in drawn) == kept.sum()
    trained = [t for t in figures.optimum_window_figure(_optima(), changed).data if t.mode == "markers"]
    assert len(trained[0].y) == kept.sum()


def _phone_figures(data):
    """Every figure builder of Chapter 8, on the stored lecture result and a small optima result."""
    t = np.linspace(-2, 2, 5)
    optima = _optima()
    settled = {"steps": [0, 10, 20], "lengths": [10, 100], "decay_step": 10,
               "per_seed": {"w": np.ones((2, 2, 3)).tolist()}}
    return {
        "limit": figures.limit_figure(t, t, t, t, {100: t, 1000: t}),
        "gap": figures.gap_figure([10, 100], {"softmax": [1.0, 0.1], "linear": [1.0, 0.1]},
                                  {"softmax": [0.1, 0.01], "linear": [0.1, 0.01]}),
        "risk": figures.risk_figure(data, 0.337),
        "window": figures.window_figure(data, -0.5),
        "window paths": figures.window_paths_figure(data, 1),
        "kernel": figures.kernel_figure(t, t, {1.0: np.ones(5), 10.0: np.ones(5)}, 0.5),
        "optimum window": figures.optimum_window_figure(optima, data),
        "settling": figures.settling_figure(settled, None),
        "optimum risk": figures.optimum_risk_figure(optima),
    }


def test_every_figure_reads_at_a_phones_width(data):
    """Titles wrapped to lines that fit a phone's text column, legends below the axes with entries that fit it,
    y-axis titles no longer than the axes are high (the issue: titles cut, legends needing a sideways swipe)."""
    from softmax_as_linear.figures import style

    for name, fig in _phone_figures(data).items():
        layout = fig.layout
        lines = layout.title.text.split("<br>")
        assert all(len(style._plain(line)) <= style.TITLE_CHARS for line in lines), (name, lines)
        assert layout.title.font.size == style.TITLE_SIZE
        assert layout.margin.t >= 60 + style.TITLE_LINE_PX * (len(lines) - 1), name
        assert layout.legend.orientation == "h" and layout.legend.y < 0, name
        for trace in fig.data:
            if trace.showlegend is not False and trace.name:
                assert all(len(style._plain(x)) <= style.LEGEND_CHARS for x in trace.name.split("<br>")), trace.name
        axes = layout.height - layout.margin.t - layout.margin.b
        for line in (layout.yaxis.title.text or "").split("<br>"):
            assert len(style._plain(line)) * style.AXIS_CHAR_PX <= axes, (name, line, axes)
