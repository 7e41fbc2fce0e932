"""Chapter 9's map: its data are the result files' measure, one curve per regime, the theory's stars at infinity."""
import json
import pathlib

import numpy as np
import pytest

from softmax_as_linear.experiments import linearity_map as lm
from softmax_as_linear.figures import linearity_map as figures

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "results"


@pytest.fixture(scope="module")
def maps():
    return lm.linearity_map()


def _trace(fig, start):
    return next(t for t in fig.data if t.name.startswith(start))


def test_the_curves_are_the_files(maps):
    fig = figures.linearity_map_figure(maps, lm.limits())
    fig2 = json.loads((RESULTS / "fig2_paper.json").read_text())
    curve = _trace(fig, "Gaussian inputs, isotropic")
    assert list(curve.x) == fig2["lengths"]
    assert np.asarray(curve.y) == pytest.approx(-np.asarray(fig2["paired_difference_per_seed"]).mean(0) / 0.55)
    nonlinear = json.loads((RESULTS / "nonlinear_lecture.json").read_text())
    curve = _trace(fig, "nonlinear labels, inputs on the circle")
    by_hand = -np.asarray(nonlinear["final"]["difference"]).mean(0) / nonlinear["references"]["zero"]
    assert np.asarray(curve.y) == pytest.approx(by_hand)
    m = maps["nonlinear"]
    assert np.asarray(curve.error_y.array) == pytest.approx(m["high"] - m["mean"])
    assert np.asarray(curve.error_y.arrayminus) == pytest.approx(m["mean"] - m["low"])


def test_every_regime_has_one_curve_told_apart_without_colour(maps):
    fig = figures.linearity_map_figure(maps, lm.limits())
    curves = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(curves) == len(lm.NAMES)
    looks = {(t.line.dash, t.marker.symbol) for t in curves}
    assert len(looks) == len(curves)
    assert _trace(fig, "nonlinear labels, best weights").line.dash == "dash"
    stars = [t for t in fig.data if t.name.startswith("theory at L = ∞")]
    assert len(stars) == 2 and all(list(t.x) == [figures.INFINITY_AT] for t in stars)
    assert [t.y[0] for t in stars] == pytest.approx([0.0, lm.limits()["nonlinear_optima"]])
    assert "∞" in fig.layout.xaxis.ticktext and fig.layout.xaxis.type == "log"


def test_without_limits_and_bad_input(maps):
    fig = figures.linearity_map_figure({"uniform": maps["uniform"]}, None, "zero")
    assert fig.layout.xaxis.ticktext is None and len(fig.data) == 2
    with pytest.raises(ValueError, match="variant"):
        figures.linearity_map_figure(maps, None, "ratio")
    with pytest.raises(ValueError, match="maps"):
        figures.linearity_map_figure({}, None)
