"""Chapter 3's checkers against wrong implementations a student might write (written here, not taken from the
checker's own list), each told what is wrong."""
import math

import numpy as np
import torch

from softmax_as_linear import exercises

from helpers import diagnosis as _message


def test_the_reference_solutions_of_the_chapter_pass():
    def loglog_slope(lengths, gaps):
        x, y = torch.log(lengths), torch.log(gaps)
        x, y = x - x.mean(), y - y.mean()
        return (x * y).sum() / (x * x).sum()

    def effective_sample_size(scores):
        w = torch.exp(scores - scores.amax(-1, keepdims=True))
        return w.sum(-1) ** 2 / (w**2).sum(-1)
    assert exercises.result(loglog_slope).status == "passed"
    assert exercises.result(effective_sample_size).status == "passed"
    def polyfit(lengths, gaps):
        return np.polyfit(np.log(np.asarray(lengths)), np.log(np.asarray(gaps)), 1)[0]
    assert exercises.result(polyfit, "loglog_slope").status == "passed"


def test_loglog_slope_with_the_axes_swapped_in_numpy():
    def swapped(lengths, gaps):
        return np.polyfit(np.log(np.asarray(gaps)), np.log(np.asarray(lengths)), 1)[0]
    assert "axes are swapped" in _message(swapped, "loglog_slope")


def test_loglog_slope_on_semi_log_axes():
    def semilog(lengths, gaps):
        return np.polyfit(np.log(np.asarray(lengths)), np.asarray(gaps), 1)[0]
    assert "gaps are not logged" in _message(semilog, "loglog_slope")
    def semilog_x(lengths, gaps):
        return np.polyfit(np.asarray(lengths), np.log(np.asarray(gaps)), 1)[0]
    assert "lengths are not logged" in _message(semilog_x, "loglog_slope")


def test_loglog_slope_with_log10_on_one_axis():
    def mixed(lengths, gaps):
        return np.polyfit(np.log10(lengths.numpy()), np.log(gaps.numpy()), 1)[0]
    assert "different bases" in _message(mixed, "loglog_slope")


def test_loglog_slope_with_the_same_log10_on_both_axes_passes():
    def both(lengths, gaps):
        return np.polyfit(np.log10(np.asarray(lengths)), np.log10(np.asarray(gaps)), 1)[0]
    assert exercises.result(both, "loglog_slope").status == "passed"


def test_loglog_slope_returning_the_intercept():
    def intercept(lengths, gaps):
        slope, b = np.polyfit(np.log(np.asarray(lengths)), np.log(np.asarray(gaps)), 1)
        return b
    assert "intercept" in _message(intercept, "loglog_slope")


def test_loglog_slope_returning_both_coefficients():
    def coefficients(lengths, gaps):
        return np.polyfit(np.log(np.asarray(lengths)), np.log(np.asarray(gaps)), 1)
    assert "expected a scalar" in _message(coefficients, "loglog_slope")


def test_loglog_slope_through_the_origin():
    def origin(lengths, gaps):
        x, y = torch.log(lengths), torch.log(gaps)
        return torch.linalg.lstsq(x[:, None], y[:, None]).solution[0, 0]
    assert "through the origin" in _message(origin, "loglog_slope")


def test_loglog_slope_from_the_end_points():
    def ends(lengths, gaps):
        return math.log(gaps[-1] / gaps[0]) / math.log(lengths[-1] / lengths[0])
    assert "first and last points" in _message(ends, "loglog_slope")


def test_loglog_slope_as_a_decay_rate():
    def rate(lengths, gaps):
        return -np.polyfit(np.log(np.asarray(lengths)), np.log(np.asarray(gaps)), 1)[0]
    assert "sign is flipped" in _message(rate, "loglog_slope")


def test_effective_sample_size_without_subtracting_the_largest_score():
    def unstable(scores):
        w = torch.exp(scores)
        return w.sum(-1) ** 2 / (w * w).sum(-1)
    assert "subtract each row's largest score" in _message(unstable, "effective_sample_size")


def test_effective_sample_size_with_the_largest_score_of_all_rows():
    def global_max(scores):
        w = torch.exp(scores - scores.max())
        return w.sum(-1) ** 2 / (w * w).sum(-1)
    assert "subtract each row's largest score" in _message(global_max, "effective_sample_size")


def test_effective_sample_size_upside_down():
    def inverted(scores):
        a = torch.softmax(scores, -1)
        return (a**2).sum(-1)
    assert "1 / ESS" in _message(inverted, "effective_sample_size")


def test_effective_sample_size_with_means_in_numpy():
    def means(scores):
        s = np.asarray(scores)
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        return w.mean(-1) ** 2 / (w**2).mean(-1)
    assert "ESS / L" in _message(means, "effective_sample_size")


def test_effective_sample_size_of_the_scores_themselves():
    def scores_as_weights(scores):
        return scores.sum(-1) ** 2 / scores.pow(2).sum(-1)
    assert "uses the scores themselves" in _message(scores_as_weights, "effective_sample_size")


def test_effective_sample_size_without_squaring_the_sum():
    def unsquared(scores):
        w = torch.exp(scores)
        return w.sum(-1) / w.pow(2).sum(-1)
    assert "sum of the weights is squared" in _message(unsquared, "effective_sample_size")


def test_effective_sample_size_over_the_wrong_axis():
    def queries(scores):
        a = torch.softmax(scores, 0)
        return 1 / (a**2).sum(0)
    assert "expected shape" in _message(queries, "effective_sample_size")
