"""Means, intervals and log-log slopes: the numbers claims are checked against."""
import numpy as np
import pytest
import torch

from softmax_as_linear.core import stats


def test_mean_interval_matches_the_t_interval():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    mean, low, high = stats.mean_interval(x, 0.95)
    assert mean == pytest.approx(3.5)
    assert high - mean == pytest.approx(3.182446 * x.std(ddof=1) / 2, rel=1e-5)
    assert mean - low == pytest.approx(high - mean)


def test_estimate_has_one_interval_per_row():
    rows = np.array([[1.0, 2.0, 3.0], [10.0, 10.0, 10.0]])
    est = stats.estimate(rows, level=0.9)
    assert est.mean.tolist() == [2.0, 10.0] and est.level == 0.9
    assert est.low[0] < 2.0 < est.high[0] and est.low[1] == est.high[1] == 10.0
    assert est.as_dict()["mean"] == [2.0, 10.0]


def test_loglog_slope_recovers_a_power_law_and_its_error():
    x = np.array([10.0, 20.0, 50.0, 100.0, 200.0])
    slope, se = stats.loglog_slope(x, 3.0 * x**-1.0)
    assert slope == pytest.approx(-1.0) and se == pytest.approx(0.0, abs=1e-10)
    noisy = stats.loglog_slope(x, 3.0 * x**-1.0 * np.exp([0.1, -0.1, 0.05, -0.05, 0.0]))
    low, high = noisy.interval(0.95)
    assert noisy.se > 0 and low < noisy.slope < high and noisy.dof == 3
    assert high - noisy.slope == pytest.approx(3.182446 * noisy.se, rel=1e-5)


@pytest.mark.parametrize("call, match", [
    (lambda: stats.mean_interval([1.0]), "samples"),
    (lambda: stats.mean_interval([1.0, 2.0], level=0.0), "level"),
    (lambda: stats.loglog_slope([1.0, 2.0], [1.0, 2.0]), "3 points"),
    (lambda: stats.loglog_slope([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]).interval(1.0), "level"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_ratio_interval_is_the_delta_method_interval():
    x = np.array([2.0, 4.0, 3.0, 5.0])
    y = np.array([1.0, 2.0, 2.0, 3.0])
    ratio, low, high = stats.ratio_interval(x, y, 0.95)
    assert ratio == pytest.approx(14 / 8)
    half = 3.182446 * (x - ratio * y).std(ddof=1) / (2 * 2.0)
    assert high - ratio == pytest.approx(half, rel=1e-5) and ratio - low == pytest.approx(half, rel=1e-5)
    exact = stats.ratio_interval(2 * y, y)  # x proportional to y: no spread
    assert exact[0] == exact[1] == exact[2] == 2.0


def test_ratio_interval_covers_at_about_its_level():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(400):
        y = rng.exponential(1.0, 200) + 1
        x = 0.5 * y + rng.normal(0, 0.3, 200)
        _, low, high = stats.ratio_interval(x, y, 0.9)
        hits += low <= 0.5 <= high
    assert 0.85 < hits / 400 < 0.95  # binomial s.e. 0.015 around 0.9


@pytest.mark.parametrize("x, y, match", [([1.0], [1.0], "same length"), ([1.0, 2.0], [1.0], "same length"),
                                         ([1.0, 2.0], [1.0, -1.0], "mean 0")])
def test_ratio_interval_bad_input(x, y, match):
    with pytest.raises(ValueError, match=match):
        stats.ratio_interval(x, y)


def test_variation_ratio_is_one_for_monotone_curves_and_counts_the_detours():
    monotone = np.array([[1.0, 2.0, 4.0, 8.0], [8.0, 4.0, 2.0, 1.0]])
    assert np.allclose(stats.variation_ratio(monotone), 1.0)
    detour = np.array([1.0, 8.0, 2.0])                 # up by log 8, down by log 4: net log 2
    assert stats.variation_ratio(detour) == pytest.approx((np.log(8) + np.log(4)) / np.log(2))
    assert stats.variation_ratio(monotone.T, axis=0).shape == (2,)
    with pytest.raises(ValueError, match="positive"):
        stats.variation_ratio([1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="2 points"):
        stats.variation_ratio([1.0])


def test_mean_se_of_arrays_and_tensors():
    import torch

    values = np.array([[1.0, 2.0], [3.0, 6.0]])
    mean, se = stats.mean_se(values)
    assert mean == 3.0 and se == pytest.approx(np.std(values, ddof=1) / 2)
    assert stats.mean_se(torch.tensor([1.0, 3.0], dtype=torch.float64)) == pytest.approx((2.0, 1.0))
    with pytest.raises(ValueError, match="at least 2"):
        stats.mean_se([1.0])


def test_proportion_interval_is_clopper_pearson():
    low, high = stats.proportion_interval(9, 10)
    assert abs(low - 0.5550) < 1e-4 and abs(high - 0.99747) < 1e-4  # tabulated values
    assert stats.proportion_interval(0, 5)[0] == 0.0 and stats.proportion_interval(5, 5)[1] == 1.0
    # Exact intervals cover at least their level, for every p: the coverage summed over the binomial law.
    from scipy import stats as scipy_stats

    intervals = np.array([stats.proportion_interval(k, 20) for k in range(21)])
    for p in (0.03, 0.3, 0.5, 0.77):
        covered = (intervals[:, 0] <= p) & (p <= intervals[:, 1])
        assert scipy_stats.binom.pmf(np.arange(21), 20, p)[covered].sum() >= 0.95
    with pytest.raises(ValueError, match="successes"):
        stats.proportion_interval(11, 10)


def _power_rows(rng, lengths, exponent_a, exponent_b, n=64):
    """Paired samples: a = L^-exponent_a E, b = L^-exponent_b E', with E, E' correlated exponentials."""
    common = rng.exponential(1.0, (len(lengths), n))
    a = lengths[:, None] ** -exponent_a * (common + rng.exponential(0.5, (len(lengths), n)))
    b = lengths[:, None] ** -exponent_b * (common + rng.exponential(0.5, (len(lengths), n)))
    return a, b


def test_paired_slope_difference_is_the_difference_of_the_two_fits():
    rng = np.random.default_rng(1)
    lengths = np.array([100.0, 300.0, 1000.0, 3000.0, 10000.0])
    a, b = _power_rows(rng, lengths, 0.8, 1.0)
    result = stats.paired_slope_difference(lengths, a, b, n_boot=200)
    fits = stats.loglog_slope(lengths, a.mean(1)).slope - stats.loglog_slope(lengths, b.mean(1)).slope
    assert result.difference == pytest.approx(fits, abs=1e-12)
    assert result.delta[0] < result.difference < result.delta[1]
    assert result.bootstrap[0] < result.difference < result.bootstrap[1]


@pytest.mark.slow
@pytest.mark.parametrize("exponent_a, truth", [(0.8, 0.2), (1.0, 0.0)])
def test_paired_slope_difference_covers_the_true_difference_at_about_its_level(exponent_a, truth):
    # the slopes of a and b differ by `truth`; 200 independent experiments, delta-method interval at 90%
    rng = np.random.default_rng(2)
    lengths = np.array([100.0, 300.0, 1000.0, 3000.0, 10000.0])
    hits = sum(low <= truth <= high for low, high in
               (stats.paired_slope_difference(lengths, *_power_rows(rng, lengths, exponent_a, 1.0), 0.9,
                                              n_boot=100).delta for _ in range(200)))
    assert 0.82 < hits / 200 < 0.97  # binomial s.e. 0.02 around 0.9


def test_paired_slope_difference_bad_input():
    with pytest.raises(ValueError, match="shape"):
        stats.paired_slope_difference([1, 2, 3], np.ones((3, 4)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="positive"):
        stats.paired_slope_difference([1, 2, 3], -np.ones((3, 4)), np.ones((3, 4)))
    with pytest.raises(ValueError, match="n_boot"):
        stats.paired_slope_difference([1, 2, 3], np.ones((3, 4)), np.ones((3, 4)), n_boot=10)


# Every interval and standard error above, against an independent computation on data with real spread:
# a one-character slip (a divisor n - 1 for n - 2, a t quantile with the wrong degrees of freedom, an
# unpaired bootstrap) moves these numbers far beyond rounding.

LEVELS = (0.5, 0.9, 0.95, 0.99)


@pytest.mark.parametrize("n", [2, 3, 7, 50])
def test_mean_se_and_mean_interval_against_the_textbook_t_interval(n):
    from scipy import stats as scipy_stats

    x = np.random.default_rng(n).exponential(1.0, n)
    se = np.sqrt(((x - x.mean()) ** 2).sum() / (n - 1) / n)
    assert stats.mean_se(x) == pytest.approx((x.mean(), se), rel=1e-12)
    for level in LEVELS:
        half = scipy_stats.t.isf((1 - level) / 2, n - 1) * se
        assert stats.mean_interval(x, level) == pytest.approx((x.mean(), x.mean() - half, x.mean() + half), rel=1e-10)
        est = stats.estimate(np.stack([x, 2 * x]), level)
        assert est.high[1] - est.mean[1] == pytest.approx(2 * half, rel=1e-10)


def test_constant_samples_have_a_zero_width_interval():
    assert stats.mean_interval(np.full(5, 2.5)) == (2.5, 2.5, 2.5)
    assert stats.loglog_slope([1.0, 2.0, 4.0], [1.0, 2.0, 4.0]).interval() == pytest.approx((1.0, 1.0))


@pytest.mark.parametrize("n", [3, 4, 6, 12])
def test_loglog_slope_and_its_standard_error_against_numpy_and_scipy(n):
    from scipy import stats as scipy_stats

    rng = np.random.default_rng(n)
    x = np.geomspace(10, 1e4, n)
    y = 2.0 * x**-0.7 * np.exp(rng.normal(0, 0.2, n))
    fit = stats.loglog_slope(x, y)
    (slope, _), cov = np.polyfit(np.log(x), np.log(y), 1, cov=True)  # numpy scales by RSS / (n - 2)
    reference = scipy_stats.linregress(np.log(x), np.log(y))
    assert fit.slope == pytest.approx(slope, rel=1e-10) and fit.se == pytest.approx(np.sqrt(cov[0, 0]), rel=1e-8)
    assert fit.se == pytest.approx(reference.stderr, rel=1e-10) and fit.dof == n - 2
    for level in LEVELS:
        low, high = scipy_stats.t.interval(level, n - 2, loc=slope, scale=np.sqrt(cov[0, 0]))
        assert fit.interval(level) == pytest.approx((low, high), rel=1e-8)


@pytest.mark.parametrize("successes, n", [(0, 1), (1, 1), (0, 5), (5, 5), (3, 10), (9, 10), (17, 40)])
def test_proportion_interval_against_the_beta_quantiles_of_clopper_and_pearson(successes, n):
    from scipy import stats as scipy_stats

    for level in LEVELS:
        tail = (1 - level) / 2
        low = 0.0 if successes == 0 else scipy_stats.beta.ppf(tail, successes, n - successes + 1)
        high = 1.0 if successes == n else scipy_stats.beta.isf(tail, successes + 1, n - successes)
        assert stats.proportion_interval(successes, n, level) == pytest.approx((low, high), rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("n", [2, 5, 80])
def test_ratio_interval_against_the_delta_method_written_with_the_covariance(n):
    from scipy import stats as scipy_stats

    rng = np.random.default_rng(n)
    y = rng.exponential(1.0, n) + 1
    x = 0.5 * y + rng.normal(0, 0.3, n)
    r = x.mean() / y.mean()
    (vx, cxy), (_, vy) = np.cov(x, y)
    se = np.sqrt((vx - 2 * r * cxy + r**2 * vy) / n) / y.mean()  # Var(x/y) to first order
    for level in LEVELS:
        half = scipy_stats.t.isf((1 - level) / 2, n - 1) * se
        assert stats.ratio_interval(x, y, level) == pytest.approx((r, r - half, r + half), rel=1e-10)


def test_paired_slope_difference_intervals_against_the_covariance_and_an_independent_bootstrap():
    from scipy import stats as scipy_stats

    rng = np.random.default_rng(3)
    lengths = np.array([100.0, 300.0, 1000.0, 3000.0])
    a, b = _power_rows(rng, lengths, 0.8, 1.0, n=40)
    result = stats.paired_slope_difference(lengths, a, b, level=0.9, n_boot=4000, seed=1)
    lx = np.log(lengths)
    w = (lx - lx.mean()) / ((lx - lx.mean()) ** 2).sum()
    # Delta method: Var(log a_bar - log b_bar) = Var(a)/a_bar^2 + Var(b)/b_bar^2 - 2 Cov(a, b)/(a_bar b_bar), over n.
    var = np.array([(np.cov(ai, bi) / np.outer([ai.mean(), bi.mean()], [ai.mean(), bi.mean()])
                     * np.array([[1, -1], [-1, 1]])).sum() / ai.size for ai, bi in zip(a, b)])
    half = scipy_stats.norm.isf(0.05) * np.sqrt((w**2 * var).sum())
    assert result.delta == pytest.approx((result.difference - half, result.difference + half), rel=1e-10)
    # Bootstrap: SciPy's percentile bootstrap, resampling the sample indices of each length on their own
    # (a and b together): the same interval up to the Monte Carlo error of the two bootstraps.
    indices = [np.arange(a.shape[1])] * len(lengths)

    def difference(*picks):
        return w @ np.log([ai[p].mean() / bi[p].mean() for ai, bi, p in zip(a, b, picks)])

    reference = scipy_stats.bootstrap(indices, difference, n_resamples=4000, confidence_level=0.9,
                                      method="percentile", vectorized=False, random_state=7).confidence_interval
    width = reference.high - reference.low
    assert abs(result.bootstrap[0] - reference.low) < 0.08 * width
    assert abs(result.bootstrap[1] - reference.high) < 0.08 * width
    # Resampling a and b apart would lose their covariance: the unpaired interval is much wider.
    unpaired = np.sqrt((w**2 * (a.var(1, ddof=1) / a.mean(1) ** 2 + b.var(1, ddof=1) / b.mean(1) ** 2)
                        / a.shape[1]).sum())
    assert unpaired > 1.3 * half / scipy_stats.norm.isf(0.05)


def test_chance_of_at_least_is_the_binomial_upper_tail():
    assert stats.chance_of_at_least(0, 240, 0.0027) == 1.0
    assert abs(stats.chance_of_at_least(1, 240, 0.0027) - (1 - (1 - 0.0027) ** 240)) < 1e-12
    assert abs(stats.chance_of_at_least(2, 3, 0.5) - 0.5) < 1e-12              # P(2) + P(3) = 3/8 + 1/8
    for bad in (dict(count=5, n=3, p=0.1), dict(count=1, n=0, p=0.1), dict(count=1, n=3, p=1.5)):
        with pytest.raises(ValueError):
            stats.chance_of_at_least(**bad)


def test_seed_summary_against_numpy_on_the_seeds_that_did_not_diverge():
    rng = np.random.default_rng(3)
    values = rng.lognormal(size=(7, 4))
    values[[1, 4], 0] = np.nan        # two diverged runs at the first length
    values[:, 3] = np.nan             # every run diverged at the last
    summary = stats.seed_summary(values, (0.1, 0.9))
    for j in range(3):
        kept = values[~np.isnan(values[:, j]), j]
        assert summary["count"][j] == kept.size
        assert summary["mean"][j] == pytest.approx(kept.mean(), rel=1e-14)
        assert summary["median"][j] == pytest.approx(np.median(kept), rel=1e-14)
        assert (summary["low"][j], summary["high"][j]) == pytest.approx(tuple(np.quantile(kept, (0.1, 0.9))), rel=1e-14)
    assert summary["count"][3] == 0 and all(np.isnan(summary[k][3]) for k in ("mean", "median", "low", "high"))
    whole = stats.seed_summary(values, (0.0, 1.0))   # (0, 1): the range of the seeds
    assert whole["low"][2] == values[:, 2].min() and whole["high"][2] == values[:, 2].max()
    with pytest.raises(ValueError, match="quantiles"):
        stats.seed_summary(values, (0.9, 0.1))
    with pytest.raises(ValueError, match="per_seed"):
        stats.seed_summary(np.zeros((0, 3)))


def test_mean_se_along_an_axis_leaves_out_nan_on_request():
    values = np.array([[1.0, 2.0, 3.0], [4.0, np.nan, 8.0]])
    mean, se = stats.mean_se_along(values, axis=0)
    assert np.allclose(mean[[0, 2]], [2.5, 5.5]) and np.isnan(mean[1]) and np.allclose(se[0], 1.5)
    mean, se = stats.mean_se_along(values, axis=0, skip_nan=True)
    assert mean[1] == 2.0 and np.isnan(se[1])  # one value: a mean without a standard error
    mean, se = stats.mean_se_along(torch.tensor(values[0]))
    assert (mean, se) == pytest.approx(stats.mean_se(values[0]), rel=1e-12)
    mean, _ = stats.mean_se_along(np.full((2, 3), np.nan), skip_nan=True)
    assert np.isnan(mean).all()
