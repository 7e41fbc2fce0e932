"""Chapter 9's measure read from the shipped result files, against hand computations on the files themselves."""
import json
import pathlib

import numpy as np
import pytest
from scipy import stats as scipy_stats

from softmax_as_linear.experiments import linearity_map as lm

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "results"


def _file(name):
    return json.loads((RESULTS / name).read_text())


def test_the_measure_on_figure_2_by_hand():
    """Isotropic Gaussian tokens, d = 5, tau^2 = 1/d, s^2 = 0.1: R_0 = tau^2 tr(I)/2 + s^2/2 = 0.55; the paired
    difference R_soft - R_lin of every seed, over R_0, its mean and Student-t interval over the ten seeds."""
    data = _file("fig2_paper.json")
    m = lm.regime_map("isotropic")
    assert m["zero"] == pytest.approx(0.2 * 5 / 2 + 0.1 / 2)
    assert m["lengths"] == data["lengths"] and m["seeds"] == data["seeds"]
    for i in (0, 9, 18):
        column = [-row[i] / 0.55 for row in data["paired_difference_per_seed"]]
        mean = sum(column) / len(column)
        sd = (sum((x - mean) ** 2 for x in column) / (len(column) - 1)) ** 0.5
        half = scipy_stats.t.ppf(0.975, len(column) - 1) * sd / len(column) ** 0.5
        assert m["mean"][i] == pytest.approx(mean, rel=1e-12)
        assert m["se"][i] == pytest.approx(sd / len(column) ** 0.5, rel=1e-9)
        assert (m["low"][i], m["high"][i]) == pytest.approx((mean - half, mean + half), rel=1e-9)
        assert m["per_seed"][:, i] == pytest.approx(column, rel=1e-12)


def test_the_excess_variant_on_chapter_8_by_hand():
    """(R_lin - R_soft) / (R_lin - R_Bayes(L)), seed by seed, from the trained nonlinear runs."""
    data = _file("nonlinear_lecture.json")
    m = lm.regime_map("nonlinear", "excess")
    risk, bayes = np.asarray(data["final"]["risk"]), np.asarray(data["references"]["bayes"])
    soft, lin = risk[..., data["models"].index("softmax")], risk[..., data["models"].index("linear")]
    # the file's paired difference is softmax minus linear on the same prompts: it equals the risks' difference
    assert np.asarray(data["final"]["difference"]) == pytest.approx(soft - lin, abs=1e-9)
    assert m["per_seed"] == pytest.approx((lin - soft) / (lin - bayes), rel=1e-6)
    assert m["mean"] == pytest.approx(((lin - soft) / (lin - bayes)).mean(0), rel=1e-6)


def test_the_optima_read_as_chapter_8_summarises_them():
    data = _file("nonlinear_optima_lecture.json")
    m = lm.regime_map("nonlinear_optima")
    gaps = data["summary"]["gaps"]["linear_minus_softmax"]
    assert m["regime"].kind == "optima" and m["lengths"] == data["lengths"] and len(m["seeds"]) == data["replicates"]
    assert m["mean"] * data["limits"]["zero"] == pytest.approx(gaps["mean"], rel=1e-9)
    assert m["se"] * data["limits"]["zero"] == pytest.approx(gaps["se"], rel=1e-6)


@pytest.mark.parametrize("name, file, key", [("rademacher", "beyond_rademacher_paper.json", "final"),
                                             ("uniform", "beyond_uniform_paper.json", "final")])
def test_chapter_6_files(name, file, key):
    data = _file(file)[key]
    m = lm.regime_map(name)
    assert m["zero"] == pytest.approx(0.55)
    assert m["per_seed"] == pytest.approx(-np.asarray(data["paired_difference"]) / 0.55, rel=1e-12)


def test_two_layers_and_what_the_second_layer_changes():
    data = _file("depth_lecture.json")
    per, zero = data["per_seed"]["difference"], data["references"]["zero_risk"]
    m = lm.regime_map("two_layers")
    assert m["per_seed"] == pytest.approx(-np.asarray(per["softmax_minus_linear_2"]) / zero, rel=1e-12)
    change = lm.second_layer_change()
    by_hand = (np.asarray(per["softmax_minus_linear_1"]) - np.asarray(per["softmax_minus_linear_2"])) / zero
    assert change["per_seed"] == pytest.approx(by_hand, rel=1e-9)
    assert change["mean"] == pytest.approx(by_hand.mean(0), rel=1e-9)


def test_every_regime_reads_and_the_limits():
    maps = lm.linearity_map()
    assert tuple(maps) == lm.NAMES
    for m in maps.values():
        assert m["per_seed"].shape == (len(m["seeds"]), len(m["lengths"]))
        assert np.all(m["low"] <= m["mean"]) and np.all(m["mean"] <= m["high"])
    limits = lm.limits()
    assert all(limits[name] == 0.0 for name in lm.GAUSSIAN_TOKENS)
    lim = _file("nonlinear_optima_lecture.json")["limits"]
    assert limits["nonlinear_optima"] == pytest.approx((lim["linear"] - lim["noise_floor"]) / lim["zero"])
    assert lm.limits("excess") == {"nonlinear_optima": 1.0}


def test_table_rows_and_their_text():
    maps = lm.linearity_map(names=("two_layers", "nonlinear_optima"))
    rows = lm.table_rows(maps)
    assert [r["L"] for r in rows] == [10, 20, 40, 10, 32, 100, 316, 1000, 3162, 10000]
    assert rows[0]["chapter"] == 7 and rows[0]["file"] == "depth_lecture.json" and rows[0]["seeds"] == 3
    assert rows[-1]["kind"] == "optima" and rows[-1]["mean"] == pytest.approx(maps["nonlinear_optima"]["mean"][-1])
    text = lm.format_table(rows)
    assert text.count("depth_lecture.json") == 1 and len(text.splitlines()) == len(rows) + 1


def test_outlying_runs_and_paired_change():
    m = {"seeds": [0, 1, 2, 3], "lengths": [10, 100],
         "per_seed": np.array([[-0.2, -0.02], [-0.21, -0.02], [-0.19, 0.09], [-0.2, -0.03]])}
    assert lm.outlying_runs(m) == {2: [100]}
    mean, low, high = lm.paired_change(m, 0, 1)
    assert mean == pytest.approx(np.mean([0.18, 0.19, 0.28, 0.17])) and low < mean < high


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="variant"):
        lm.regime_map("isotropic", "ratio")
    with pytest.raises(ValueError, match="name"):
        lm.regime("gaussian")
    with pytest.raises(ValueError, match="zero"):
        lm.measure([[0.1]], [[0.2]], [0.05], 0.0)
    with pytest.raises(ValueError, match="distance"):
        lm.outlying_runs({"seeds": [0], "lengths": [10], "per_seed": np.zeros((1, 1))}, -1.0)


def test_a_partial_file_is_refused_with_the_command_that_finishes_it(tmp_path):
    from softmax_as_linear.experiments.result_files import PartialResultError

    for name in ("beyond_uniform_paper.json", "depth_lecture.json"):
        data = _file(name)
        (tmp_path / name).write_text(json.dumps({**data, "complete": False}))
    with pytest.raises(PartialResultError, match="reproduce beyond"):
        lm.regime_map("uniform", folder=tmp_path)
    with pytest.raises(PartialResultError, match="reproduce depth"):
        lm.regime_map("two_layers", folder=tmp_path)
