"""Chapter 8's optima: the experiment's file, its readings, and the paired difference of the chapter's final risks."""
import math
import types

import numpy as np
import pytest
import torch

from softmax_as_linear.core import seeding
from softmax_as_linear.core.artifacts import load_json
from softmax_as_linear.experiments import nonlinear, optima_precision
from softmax_as_linear.experiments import nonlinear_optima as optima
from softmax_as_linear.theory import attention_optimum as ao
from softmax_as_linear.theory import circle_quadrature


def test_final_risks_pair_softmax_and_linear_on_the_same_prompts():
    # final_risks' difference is softmax minus linear on the same fresh prompts: checked against an independent
    # per-prompt computation, so a flipped sign or a broken pairing (other prompts, shuffled losses) fails
    cfg = nonlinear.nonlinear_config("smoke", lengths=(20,), seeds=(3,))
    soft_theta, lin_theta = ao.start("nadaraya_watson", cfg.d, 30.0), ao.start("linear", cfg.d)
    U, V = np.zeros((1, 1, 2, 1, 3, 3)), np.zeros((1, 1, 2, 1, 3, 3))
    for a, (model, theta) in enumerate((("nadaraya_watson", soft_theta), ("linear", lin_theta))):
        u, v = ao.to_uv(model, theta, cfg.d)
        U[0, 0, a, 0], V[0, 0, a, 0] = u.numpy(), v.numpy()
    result = types.SimpleNamespace(config=cfg, uv=lambda: (U, V), diverged=np.zeros((1, 1, 2), dtype=bool))
    n = 400
    final = nonlinear.nonlinear_final_risks(result, n)
    batch = cfg.task().sample(n, 20, seeding.generator(3, "evaluation", 20), dtype=torch.float64)
    prompts = ao.Prompts(batch.tokens, batch.query, batch.target)
    soft = ao.losses("nadaraya_watson", soft_theta, prompts).numpy()
    lin = ao.losses("linear", lin_theta, prompts).numpy()
    diff = soft - lin
    paired_se = diff.std(ddof=1) / math.sqrt(n)
    assert diff.mean() < -5 * paired_se  # softmax's window beats linear attention here, far beyond the noise
    assert final["difference"][0, 0] == pytest.approx(diff.mean(), rel=1e-10)
    assert final["difference_se"][0, 0] == pytest.approx(paired_se, rel=1e-8)
    unpaired_se = math.sqrt(soft.var(ddof=1) / n + lin.var(ddof=1) / n)
    assert abs(unpaired_se / paired_se - 1) > 0.05  # the pairing is visible in the standard error
    assert final["risk"][0, 0, 0] == pytest.approx(soft.mean(), rel=1e-10)
    assert final["risk"][0, 0, 1] == pytest.approx(lin.mean(), rel=1e-10)


def test_moves_and_exponents_read_synthetic_windows():
    lengths = (10, 100, 1000)
    log_w = [math.log(5.0), math.log(5.0 * 10 ** 0.4), math.log(5.0 * 100 ** 0.4)]
    rows = optima.moves(lengths, log_w, [0.1, 0.1, 0.1])
    assert [r["local_exponent"] for r in rows] == pytest.approx([0.4, 0.4])
    assert rows[0]["z"] == pytest.approx(0.4 * math.log(10) / math.hypot(0.1, 0.1))
    w = np.array([[5.0 * L ** (0.4 + 0.01 * k) for k in range(4)] for L in lengths])  # (nL, K)
    fit = optima.exponents(lengths, w, 100)
    assert fit["all"]["mean"] == pytest.approx(0.415) and fit["large"]["mean"] == pytest.approx(0.415)
    assert fit["all"]["low"] < 0.415 < fit["all"]["high"]


def test_bad_preset_is_refused_and_the_module_has_no_entry_point_of_its_own():
    # only the reproduction command writes the file (it checks the library's uncommitted changes)
    with pytest.raises(ValueError, match="preset"):
        optima.optima("paper-sized")
    assert not hasattr(optima, "main")


def _fixed_fit(model, prompts, theta0=None, **options):
    # a "fit" that returns fixed weights (window 30), so a replicate's held-out mean is the mean of n independent losses
    theta = ao.start(model, prompts.d, 30.0)
    return ao.Fit(model, theta, 0.0, 0.0, np.zeros(theta.size), 1.0, 0, "fixed")


def _chi2_band(dof: int, z: float = 3.29) -> tuple[float, float]:
    # the 0.05 % and 99.95 % quantiles of chi-square / dof (Wilson-Hilferty, within 1 % of the exact ones from 20 dof)
    a = 2 / (9 * dof)
    return (1 - a - z * math.sqrt(a)) ** 3, (1 - a + z * math.sqrt(a)) ** 3


def test_held_out_standard_errors_match_their_spread_over_independent_prompt_sets(monkeypatch):
    # simulation: at fixed weights each replicate's held-out risk (and paired gap) is a mean over its own fresh prompts,
    # independent across replicates; the spread of those means over K replicates must match the standard error each
    # replicate reports. (K - 1) s^2 / sigma^2 is chi-square with K - 1 degrees of freedom: a two-sided 0.1 % band
    monkeypatch.setattr(optima, "fit", _fixed_fit)
    task = nonlinear.nonlinear_config("lecture").task()
    K, n, L = 30, 40, 10
    records = [optima.replicate(task, L, n, k) for k in range(K)]
    low, high = _chi2_band(K - 1)
    for model in optima.FITTED_MODELS:
        held = np.array([r[model]["held_out"] for r in records])
        se = np.array([r[model]["held_out_se"] for r in records])
        ratio = held.var(ddof=1) / np.mean(se ** 2)
        assert low < ratio < high, (model, ratio)
    for name in records[0]["gaps"]:
        mean = np.array([r["gaps"][name][0] for r in records])
        se = np.array([r["gaps"][name][1] for r in records])
        ratio = mean.var(ddof=1) / np.mean(se ** 2)
        assert low < ratio < high, (name, ratio)
    # the replicates' standard error (mean_se, what the summaries report) against the spread of independent means of K
    rng = np.random.default_rng(0)
    groups = rng.lognormal(0.0, 0.5, size=(1000, 8))
    means, ses = zip(*(optima.replicate_mean_se(row) for row in groups))
    ratio = np.var(means, ddof=1) / np.mean(np.square(ses))
    low, high = _chi2_band(999)
    assert low < ratio < high * 1.1  # s^2 / K is unbiased for the mean's variance; se^2 averaged, the band widened


@pytest.mark.slow
def test_smoke_preset_writes_a_consistent_file(tmp_path):
    from softmax_as_linear.experiments.reproductions import REPRODUCTIONS

    [path] = REPRODUCTIONS["nonlinear_optima"].reproduce("smoke", "cpu", tmp_path, None, None, False, None, True)
    data = load_json(path)
    K, lengths = data["replicates"], data["lengths"]
    assert data["provenance"]["replicate_seeds"] == [optima.OPTIMA_SEED + k for k in range(K)]
    for key in ("device", "torch", "commit", "wall_seconds"):
        assert key in data["provenance"]
    task = nonlinear.nonlinear_config("lecture").task()
    assert data["limits"]["linear"] == pytest.approx(circle_quadrature.linear_limit_risk(task))
    soft = data["replicate"]["softmax"]
    assert np.asarray(soft["w"]).shape == (len(lengths), K)
    summary = data["summary"]["softmax"]
    assert summary["w"] == pytest.approx(np.exp(np.log(soft["w"]).mean(1)).tolist())
    assert np.all(np.asarray(soft["gradient_norm"]) < 1e-5)
    # the in-sample minimum sits below the risk of the other replicates' optima on the same prompts
    assert np.mean(summary["optimism"]) > 0
    gaps = data["summary"]["gaps"]
    total = np.asarray(gaps["intercept"]["mean"]) + np.asarray(gaps["locality"]["mean"])
    assert total == pytest.approx(gaps["linear_minus_softmax"]["mean"])
    assert {d["setting"] for d in data["dependence"]["directions"]} == {"noise_var", "frequency"}


RESULT = "nonlinear_optima_lecture.json"


@pytest.fixture(scope="module")
def lecture():
    from softmax_as_linear.core.artifacts import find_result

    path = find_result(RESULT)
    assert path is not None, f"{RESULT} is missing from the results folder"
    return load_json(path)


def test_lecture_file_says_where_it_came_from(lecture):
    prov = lecture["provenance"]
    assert prov["commit"] and prov["uncommitted_changes"] is False and prov["torch_threads"] == 1
    assert prov["replicate_seeds"] == [optima.OPTIMA_SEED + k for k in range(lecture["replicates"])]
    assert lecture["settings"]["lengths"] == lecture["lengths"] == list(optima.SETTINGS["lecture"]["lengths"])
    assert lecture["prompts"] == [optima.prompt_count(optima.SETTINGS["lecture"], L) for L in lecture["lengths"]]


def test_lecture_fits_converged_and_summaries_are_their_replicates(lecture):
    for model in ("softmax", "nadaraya_watson"):
        rep = lecture["replicate"][model]
        assert np.nanmax(rep["gradient_norm"]) < 1e-5
        # the Newton step left on log w is far below the spread of log w* between replicates
        assert np.nanmax(rep["newton_log_w"]) < 0.01 * np.min(lecture["summary"][model]["log_w_se"])
        log_w = np.log(np.asarray(rep["w"]))
        assert lecture["summary"][model]["log_w"] == pytest.approx(log_w.mean(1).tolist())
        assert lecture["summary"][model]["log_w_se"] == pytest.approx(
            (log_w.std(1, ddof=1) / math.sqrt(log_w.shape[1])).tolist())
    assert np.min(lecture["replicate"]["softmax"]["curvature"]) > 0  # strict local minima
    task = nonlinear.nonlinear_config("lecture").task()
    assert lecture["limits"]["linear"] == pytest.approx(circle_quadrature.linear_limit_risk(task), abs=1e-12)
    assert lecture["limits"]["intercept_share"] == pytest.approx(circle_quadrature.intercept_share(task), abs=1e-12)


def test_lecture_optima_respect_the_bounds(lecture):
    # theorems, checked within 3 standard errors over replicates: linear attention is linear in x_q given the prompt,
    # the affine reference affine
    s = lecture["summary"]
    for model, bound in (("linear", lecture["limits"]["linear"]), ("affine", lecture["limits"]["affine"])):
        assert np.all(np.asarray(s[model]["held_out"]) > bound - 3 * np.asarray(s[model]["held_out_se"]))
    # on its fitting prompts softmax (started from Nadaraya-Watson's optimum) is at least as good, replicate by replicate
    rep = lecture["replicate"]
    assert np.all(np.asarray(rep["softmax"]["in_sample"]) <= np.asarray(rep["nadaraya_watson"]["in_sample"]) + 1e-12)
    total = np.asarray(s["gaps"]["intercept"]["mean"]) + np.asarray(s["gaps"]["locality"]["mean"])
    assert total == pytest.approx(s["gaps"]["linear_minus_softmax"]["mean"])


@pytest.mark.slow
def test_lecture_first_replicate_reproduces():
    # retrain a prefix: replicate 0 at L = 10 from the library gives the file's numbers
    from softmax_as_linear.core.artifacts import find_result

    data = load_json(find_result(RESULT))
    task = nonlinear.nonlinear_config("lecture").task()
    L = data["lengths"][0]
    record = optima.replicate(task, L, data["prompts"][0], 0)
    for model in optima.FITTED_MODELS:
        assert record[model]["held_out"] == pytest.approx(data["replicate"][model]["held_out"][0][0], rel=1e-6)
    assert record["softmax"]["w"] == pytest.approx(data["replicate"]["softmax"]["w"][0][0], rel=1e-4)


def test_conditional_losses_are_the_noisy_losses_averaged_over_the_label_noise():
    # identity: the conditional loss is 1/2 (yhat - f)^2 + s^2/2 per query; and the noisy loss's mean over many fresh
    # label noises agrees with it within 4 standard errors
    task = nonlinear.nonlinear_config("lecture").task()
    prompts, x, f = optima_precision.scoring_set(task, 64, 20, 3, seeding.generator(5, "analysis", 20))
    theta = ao.start("softmax", task.d, 20.0)
    cond = ao.conditional_losses("softmax", theta, prompts, x, f, task.noise_var)
    by_hand = []
    for j in range(3):
        one = ao.Prompts(prompts.tokens, torch.cat([x[:, j], torch.zeros(64, 1, dtype=torch.float64)], -1), f[:, j])
        by_hand.append(ao.losses("softmax", theta, one) + 0.5 * task.noise_var)
    assert cond.numpy() == pytest.approx(torch.stack(by_hand).mean(0).numpy(), rel=1e-12)
    g = torch.Generator().manual_seed(1)
    noisy = []
    for j in range(3):
        target = f[:, j] + math.sqrt(task.noise_var) * torch.randn(400, 64, generator=g, dtype=torch.float64)
        one = ao.Prompts(prompts.tokens, torch.cat([x[:, j], torch.zeros(64, 1, dtype=torch.float64)], -1), f[:, j])
        pred = ao.softmax_prediction(theta, one.tokens, one.query)
        noisy.append((0.5 * (pred - target) ** 2).mean(0))
    noisy = torch.stack(noisy).mean(0)
    # per prompt: the mean over 400 noises of the noisy loss against the conditional one
    assert (noisy - cond).abs().max() < 4 * math.sqrt(task.noise_var * (2 * cond.max() + task.noise_var) / 400)


@pytest.mark.slow
def test_fit_at_window_at_the_optimum_s_window_returns_the_optimum():
    # the in-sample profile's minimum is the unconstrained optimum: held at the fitted window, the other weights stay
    # where the fit left them, and a window moved away raises the in-sample loss
    task = nonlinear.nonlinear_config("lecture").task()
    prompts = ao.Prompts.draw(task, 128, 20, seeding.generator(3, "prompts", 20))
    best = ao.fit("softmax", prompts, ao.start("softmax", task.d, 20.0), newton=False)
    H = ao.window_hessian(prompts, best.theta)
    at = ao.fit_at_window(prompts, float(best.theta[0]), best.theta, gtol=1e-8, hessian=H)
    assert at.theta == pytest.approx(best.theta, abs=1e-5) and at.risk == pytest.approx(best.risk, abs=1e-12)
    for step in (-0.3, 0.3):
        moved = ao.fit_at_window(prompts, float(best.theta[0]) + step, best.theta, gtol=1e-7, hessian=H)
        assert moved.gradient_norm < 1e-6 and moved.risk > best.risk
    assert math.isnan(best.curvature)  # newton=False computes no Newton step


def test_lecture_bias_checks_and_draws_are_consistent(lecture):
    # the refits converged; the checks' rows are the sweep's own lengths and standard errors; draw 0 of the draws is the
    # sweep's first replicate, and every draw's constants are the quadrature's
    precision = lecture["precision"]
    assert precision["lengths"] == [L for L in lecture["lengths"] if L >= lecture["settings"]["large_from"]]
    for row in precision["table"]:
        i = lecture["lengths"].index(row["length"])
        assert row["log_w_se"] == pytest.approx(lecture["summary"]["softmax"]["log_w_se"][i])
        pooled, profile = row["pooled"], row["profile"]
        assert np.max(pooled["gradient_norm"]) < 1e-5 and np.max(profile["gradient_norm"]) < 1e-5
        assert pooled["shift"] == pytest.approx(np.mean(pooled["log_w_pooled"]) - np.mean(pooled["members_log_w"]))
        assert len(profile["grid"]) == lecture["settings"]["profile"]["points"]
        # the in-sample profile is lowest near each replicate's own optimum (the parabola's reading of it, within a
        # grid step)
        own = np.log(np.asarray(lecture["replicate"]["softmax"]["w"][i][:profile["replicates"]]))
        inside = (own > profile["grid"][0]) & (own < profile["grid"][-1])
        step = profile["grid"][1] - profile["grid"][0]
        assert (np.abs(np.asarray(profile["per_replicate_in_sample"]) - own)[inside] < step).all()
    draws = lecture["draws"]
    assert draws["feature_seeds"][0] == 0 and len(draws["feature_seeds"]) >= 5
    at = [lecture["lengths"].index(L) for L in draws["lengths"]]
    K = draws["replicates"]
    assert np.asarray(draws["w"]["softmax"])[0] == pytest.approx(
        np.asarray(lecture["replicate"]["softmax"]["w"])[at, :K])
    task = nonlinear.nonlinear_config("lecture").task()
    expected = circle_quadrature.constants_over_draws(task, draws["feature_seeds"])
    assert draws["limits"]["linear"] == pytest.approx(expected["linear"].tolist(), abs=1e-12)
    gaps = draws["summary"]["gaps"]
    total = np.asarray(gaps["intercept"]["per_draw"]) + np.asarray(gaps["locality"]["per_draw"])
    assert total == pytest.approx(np.asarray(gaps["linear_minus_softmax"]["per_draw"]))


def test_the_bias_bound_is_the_shift_scaled_over_its_interval():
    """Sets four times larger shift an O(1/n) bias b by -3b/4: the bound is 4/3 of the shift's farther 95 % limit
    (Student's t with one degree of freedom for two groups), and a length without a precision row has none."""
    from scipy import stats as scipy_stats

    from softmax_as_linear.experiments.optima_precision import bias_bounds

    row = {"length": 1000, "pooled": {"members": [[0, 1, 2, 3], [4, 5, 6, 7]], "shifts": [0.01, 0.03],
                                      "shift": 0.02, "shift_se": 0.01}}
    t = scipy_stats.t.ppf(0.975, 1)
    assert bias_bounds({"precision": {"table": [row]}}) == pytest.approx({1000: 4 / 3 * (0.02 + t * 0.01)})
    assert bias_bounds({}) == {}
