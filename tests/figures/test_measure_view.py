"""Figures of the measure-view chapters: each builder draws one trace per curve, cloud or contour, one slider
step per precomputed panel, and a mismatched or impossible argument is a ValueError naming it."""
import math

import numpy as np
import pytest
import torch

from softmax_as_linear.figures import concentration as concentration_figures
from softmax_as_linear.figures import lemma_2_1 as lemma_figures
from softmax_as_linear.figures import measure_view
from softmax_as_linear.registry import LAW_KINDS as KINDS
from softmax_as_linear.theory import concentration
from softmax_as_linear.theory.measures import TokenLaw

LENGTHS = [10, 20, 40]
GAP_LENGTHS = [10, 100, 200, 400]   # the output-gap figure fits its slope over L >= 100
F64 = dict(dtype=torch.float64)


def _steps(fig):
    return len(fig.layout.sliders[0].steps)


def _circle(n=9, radius=1.5):
    angles = torch.linspace(0, 2 * math.pi, n, **F64)
    return radius * torch.stack([angles.cos(), angles.sin()], dim=-1)


@pytest.fixture(scope="module")
def curves():
    law = TokenLaw.standard("gaussian", 2, 0.5)
    eye = torch.eye(2, **F64)
    return {sigma: concentration.gap_curve(law, sigma * eye, eye, GAP_LENGTHS, n_prompts=4, n_queries=2, gradients=True)
            for sigma in (0.5, 1.0)}


def test_quick_tour_figures():
    error = np.array([1.0, 0.5, 0.25])
    fig = measure_view.prompt_error_figure(LENGTHS, error, 0.1 * error)
    assert len(fig.data) == 3 and fig.layout.xaxis.type == "log"
    np.testing.assert_allclose(fig.data[2].y, [1.0, 0.5, 0.25])        # slope -1 through the first point
    pairs = [(np.arange(4.0), np.arange(4.0) + 0.1)] * 3
    fig = measure_view.limit_scatter_figure(LENGTHS, pairs)
    assert len(fig.data) == 1 + 3 and _steps(fig) == 3


def test_measure_view_figures():
    rms = {kind: np.array([0.3, 0.2, 0.1]) for kind in KINDS}
    assert len(measure_view.lln_figure(LENGTHS, rms, 5).data) == len(KINDS) + 1
    clouds = {kind: torch.zeros(3, 5, 2, **F64) for kind in KINDS}
    limits = {kind: torch.zeros(2, **F64) for kind in KINDS}
    fig = measure_view.cloud_figure(LENGTHS, clouds, limits, active=1, x_range=(-1, 1), y_range=(-1, 1))
    assert len(fig.data) == 3 * 2 * len(KINDS) and _steps(fig) == 3
    assert fig.layout.title.text == "Outputs of 5 prompts of length L"
    images = {kind: [_circle(), _circle()] for kind in KINDS}
    fig = measure_view.circle_image_figure([0.1, 0.2], images, radius=1.5, active=0, x_range=(-2, 2),
                                              y_range=(-2, 2))
    assert len(fig.data) == 2 * len(KINDS) and _steps(fig) == 2
    values = np.array([1.0, 2.0, 3.0])
    assert len(measure_view.normalisation_figure(LENGTHS, values, values, values, 5).data) == 3
    outputs = [dict.fromkeys(KINDS, torch.zeros(4, 2, **F64))] * 2
    fig = measure_view.query_angle_figure([0, 30], outputs, [limits] * 2, {k: _circle() for k in KINDS},
                                             length=100, radius=1.5, active=0, x_range=(-2, 2), y_range=(-2, 2))
    assert len(fig.data) == len(KINDS) + 2 * 2 * len(KINDS) and _steps(fig) == 2
    assert fig.layout.title.text.startswith("4 prompts of L = 100 tokens")


def test_live_measure_view_figure_draws_its_data():
    curve, reference = _circle(), 0.5 * _circle()
    outputs, limit = torch.randn(32, 2, generator=torch.Generator().manual_seed(0), **F64), torch.tensor([0.3, -0.2], **F64)
    fig = measure_view.measure_view_figure(curve, reference, outputs, limit, kind="laplace", reference_kind="gaussian",
                                           length=20)
    assert fig.layout.title.text == "Laplace tokens, L = 20"
    reference_trace, curve_trace, cloud, star = fig.data
    np.testing.assert_allclose(reference_trace.x, reference[:, 0].numpy(), atol=1e-4)
    np.testing.assert_allclose(curve_trace.y, curve[:, 1].numpy(), atol=1e-4)
    np.testing.assert_allclose(np.stack([cloud.x, cloud.y], 1), outputs.numpy(), atol=1e-4)
    np.testing.assert_allclose([star.x[0], star.y[0]], limit.numpy(), atol=1e-4)
    # with the Gaussian law chosen, its curve is the reference: drawn and named once
    fig = measure_view.measure_view_figure(curve, reference, outputs, limit, kind="gaussian", reference_kind="gaussian",
                                           length=20)
    curves = [trace for trace in fig.data if trace.name and "T[μ] on the circle" in trace.name]
    assert len(curves) == 1
    np.testing.assert_allclose(curves[0].x, curve[:, 0].numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="length"):
        measure_view.measure_view_figure(curve, reference, outputs, limit, kind="gaussian", reference_kind="gaussian",
                                         length=0)


def test_lemma_figures():
    points, mean, cov = torch.randn(10, 2, **F64), torch.zeros(2, **F64), torch.eye(2, **F64)
    fig = lemma_figures.tilted_measure_figure(points, mean, cov, [0, 90], [points, points], [mean, mean],
                                                active=1, x_range=(-3, 3), y_range=(-3, 3))
    assert len(fig.data) == 3 + 2 * 3 and _steps(fig) == 2
    assert len(lemma_figures.output_cloud_figure(points, mean, cov, length=50).data) == 1 + 3
    fig = lemma_figures.mean_shift_gap_figure([0, 1, 2], [0, 1, 2], [0, 2], [0, 2], [0.1, 0.1], length=100_000,
                                                n_prompts=8)
    assert fig.data[1].name == "prompts of 10⁵ tokens (8 per point)"
    fig = lemma_figures.mean_shift_circle_figure([0, 1], [points] * 2, [points] * 2, radius=1.5, x_range=(-3, 3),
                                                   y_range=(-3, 3))
    assert len(fig.data) == 4 and _steps(fig) == 2
    line, few = torch.linspace(-1, 1, 5, **F64)[:, None], torch.zeros(2, 1, **F64)
    values = {kind: torch.zeros(5, **F64) for kind in KINDS}
    two = {kind: torch.zeros(2, **F64) for kind in KINDS}
    fig = lemma_figures.one_dimensional_figure(line, values, few, two, few, two, two, U=torch.tensor([[0.4]]),
                                                 V=torch.eye(1), length=1_000)
    assert len(fig.data) == 3 * len(KINDS) and fig.layout.title.text.endswith("(U = 0.4, V = 1)")
    fig = lemma_figures.one_dimensional_scale_figure(line, [0.1, 0.2], [values, values], active=0, y_range=(-5, 5))
    assert len(fig.data) == 2 * len(KINDS) and _steps(fig) == 2
    fig = lemma_figures.query_outputs_figure([0.5, 1.0], [points] * 2, [points] * 2, [points] * 2, [points[:5]] * 2,
                                               radius=1.5, length=100, active=0, x_range=(-3, 3), y_range=(-3, 3))
    assert len(fig.data) == 2 * 4 and fig.data[2].name == "2 prompts, L = 100"
    assert fig.layout.title.text.startswith("Outputs at five queries")
    tilted, weighted, quadrature, lemma = (torch.tensor(p, **F64) for p in ([0.2, 0.1], [0.21, 0.09], [0.2, 0.11], [1, 2]))
    fig = lemma_figures.lemma_figure(mean, cov, tilted, points, weighted, quadrature, _circle(), 0.5 * _circle(),
                                    points[:4], lemma, radius=1.5, length=2_000)
    samples, *contours, weighted_trace, quadrature_trace, softmax, linear, outputs, star = fig.data
    np.testing.assert_allclose(np.stack([samples.x, samples.y], 1), points.numpy(), atol=1e-4)
    np.testing.assert_allclose(np.mean(contours[1].x[:-1]), 0.2, atol=1e-3)   # the contour of nu_z, about its mean
    assert (weighted_trace.x[0], quadrature_trace.y[0]) == (0.21, 0.11)
    np.testing.assert_allclose(linear.x, 0.5 * _circle()[:, 0].numpy(), atol=1e-4)
    assert softmax.name == "softmax limit on ‖z‖ = 1.5" and outputs.name == "4 prompts, L = 2,000"
    assert (star.x[0], star.y[0]) == (1.0, 2.0)


def _band_and_line(traces, estimate, lengths):
    """The two traces of one estimate: its interval as a closed band, then its mean."""
    band, line = traces
    np.testing.assert_allclose(band.x, np.concatenate([lengths, lengths[::-1]]))
    np.testing.assert_allclose(band.y, np.concatenate([estimate.high, estimate.low[::-1]]))
    np.testing.assert_allclose(line.x, lengths)
    np.testing.assert_allclose(line.y, estimate.mean)


def _panel(fig, index):
    """The traces the slider shows at step ``index``."""
    visible = fig.layout.sliders[0].steps[index].args[0]["visible"]
    return [trace for trace, shown in zip(fig.data, visible) if shown]


def test_concentration_figures_draw_each_curve_its_interval_and_its_slope(curves):
    # Each figure plots the numbers of the curve it is given, in the order given: a swapped estimate, a band
    # from the wrong bounds or a slope line through the wrong point changes the data checked here.
    (s1, first), (s2, second) = curves.items()
    lengths = np.array(GAP_LENGTHS, dtype=float)
    fitted = {s1: -0.987, s2: -0.5}
    fig = concentration_figures.output_gap_figure(curves, fitted)
    assert len(fig.data) == 2 * 2 + 1
    for traces, sigma, curve in ((fig.data[0:2], s1, first), (fig.data[2:4], s2, second)):
        _band_and_line(traces, curve.output, lengths)
        assert traces[1].name == f"σ = {sigma} (slope {fitted[sigma]:.2f})"
    with pytest.raises(ValueError, match="slopes"):
        concentration_figures.output_gap_figure(curves, {s1: -1.0})
    np.testing.assert_allclose(fig.data[4].y, first.output.mean[2] * lengths[2] / lengths)  # slope -1, third point

    fig = concentration_figures.ess_figure(curves, 2)
    assert len(fig.data) == 2 * 2
    for (line, limit), sigma, curve in ((fig.data[0:2], s1, first), (fig.data[2:4], s2, second)):
        np.testing.assert_allclose(line.y, curve.ess.mean / lengths)
        np.testing.assert_allclose(limit.y, [(1 + 2 * sigma**2) ** -1.0] * 2)  # (1 + 2 sigma^2)^(-D/2), D = 2

    fig = concentration_figures.gradient_gap_figure(curves)
    assert len(fig.data) == 2 * 3
    for traces, curve in ((fig.data[0:3], first), (fig.data[3:6], second)):
        _band_and_line(traces[:2], curve.grad_U, lengths)
        np.testing.assert_allclose(traces[2].y, curve.grad_V.mean)

    fig = concentration_figures.self_attention_gap_figure(first, second, query_norm=2.5, sigma=0.5)
    _band_and_line(fig.data[0:2], first.output, lengths)
    _band_and_line(fig.data[2:4], second.output, lengths)
    assert len(fig.data) == 4 and "query in the measure" in fig.data[1].name

    paired = {(k, inc): curve for k in (0.5, 1.0) for inc, curve in ((False, first), (True, second))}
    fig = concentration_figures.query_in_measure_figure([0.5, 1.0], paired, sigma=0.5, active=1)
    assert len(fig.data) == 2 * 4 and _steps(fig) == 2
    for step in (0, 1):
        shown = _panel(fig, step)
        _band_and_line(shown[0:2], first.output, lengths)  # query outside
        _band_and_line(shown[2:4], second.output, lengths)  # query in the measure

    by_law = {("gaussian", s1): first, ("gaussian", s2): second, ("uniform", s1): second, ("uniform", s2): first}
    slopes = {key: -0.5 - i / 10 for i, key in enumerate(by_law)}
    fig = concentration_figures.law_gap_figure([s1, s2], ["gaussian", "uniform"], by_law, slopes, norm_U=1, active=0)
    assert len(fig.data) == 2 * 2 and _steps(fig) == 2 and "two token laws, ‖U‖ = 1" in fig.layout.title.text
    for step, sigma in enumerate((s1, s2)):
        for trace, kind in zip(_panel(fig, step), ("gaussian", "uniform")):
            np.testing.assert_allclose(trace.y, by_law[(kind, sigma)].output.mean)
            assert trace.name == f"{kind} (slope {slopes[(kind, sigma)]:.2f})"

    fig = concentration_figures.gap_figure(second, "E_L")
    assert len(fig.data) == 2
    _band_and_line(fig.data, second.output, lengths)


@pytest.mark.parametrize("call, match", [
    (lambda: measure_view.prompt_error_figure(LENGTHS, [1.0, 0.5], [0.1, 0.1]), "mean_error"),
    (lambda: measure_view.limit_scatter_figure(LENGTHS, []), "pairs"),
    (lambda: measure_view.lln_figure(LENGTHS, {"gaussian": [1.0]}, 5), "rms"),
    (lambda: lemma_figures.mean_shift_gap_figure([0, 1], [0], [0], [0], [0.1], length=10, n_prompts=2),
     "closed_gap"),
    (lambda: lemma_figures.one_dimensional_scale_figure(torch.zeros(3, 1), [0.1, 0.2], [{}], active=0,
                                                          y_range=(-1, 1)), "curves"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
