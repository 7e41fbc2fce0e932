"""Trained runs read against the theory: the distance to the infinite-prompt flow, and per-seed outcomes."""
import copy

import numpy as np
import pytest
import torch

from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train
from softmax_as_linear.experiments import analysis
from softmax_as_linear.theory import flow_limits, models, regression, risks
from softmax_as_linear.theory.flow import infinite_prompt_flow

BLOCK = dict(parametrisation="uv", init="block", alpha=0.3, lr=1e-2, record_every=20, eval_prompts=32)


@pytest.fixture(scope="module")
def _block_run():
    return train(TrainConfig(lengths=(10,), models=("linear",), steps=40, batch_size=8, **BLOCK))


@pytest.fixture
def block_run(_block_run):
    """A short run of the block start (40 steps, records at 0, 20, 40), trained once: each test gets its own copy."""
    return copy.deepcopy(_block_run)


@pytest.fixture(scope="module")
def four_matrix_run():
    """A short run of the four-matrix parametrisation (the default), trained once and only read."""
    return train(TrainConfig(lengths=(5,), steps=10, record_every=10, eval_prompts=8, batch_size=8))


def test_flow_gap_is_zero_for_the_flow_itself(block_run):
    # A "run" whose recorded parameters are the flow has distance 0 and the flow's risk.
    result = block_run
    task = result.config.task()
    U0, V0 = flow_limits.block_init(task, 0.3)
    path = infinite_prompt_flow(U0, V0, task, result.times, max_dt=0.1)
    result.params["U"][0, 0, 0] = path["U"]
    result.params["V"][0, 0, 0] = path["V"]
    gap = analysis.flow_gap(result)
    assert max(gap["distance"]["linear"][0]) < 1e-20
    np.testing.assert_allclose(gap["risk"]["linear"][0], gap["flow_risk"], rtol=1e-12)


def test_flow_gap_measures_offsets_planted_on_the_flow_up_to_the_horizon(block_run):
    # Records of the flow moved by known amounts: delta_L(t) is the planted squared distance, its sup counts the
    # records up to the horizon only, the balance is ||U||^2 - ||v||^2 of the records, and the times are 2 lr k.
    result = block_run
    task = result.config.task()
    path = infinite_prompt_flow(*flow_limits.block_init(task, 0.3), task, result.times, max_dt=0.1)
    U, V = path["U"].copy(), path["V"].copy()                      # records at steps 0, 20, 40
    U[1, 0, 1] += 0.1                                              # delta = 0.01 at the middle record
    V[2, -1, -1] += 0.3                                            # delta = 0.09 at the last
    result.params["U"][0, 0, 0], result.params["V"][0, 0, 0] = U, V
    gap = analysis.flow_gap(result)
    np.testing.assert_allclose(gap["distance"]["linear"][0], [0.0, 0.01, 0.09], rtol=1e-9, atol=1e-15)
    assert gap["max_distance"]["linear"][0] == pytest.approx(0.09, rel=1e-9)
    early = analysis.flow_gap(result, horizon=float(result.times[1]))
    assert early["max_distance"]["linear"][0] == pytest.approx(0.01, rel=1e-9) and early["distance"] == gap["distance"]
    np.testing.assert_allclose(gap["balance"]["linear"][0], (U**2).sum((1, 2)) - (V[:, -1] ** 2).sum(-1), rtol=1e-12)
    np.testing.assert_allclose(gap["times"], 2 * 1e-2 * np.asarray(result.steps), rtol=1e-12)


def test_flow_gap_needs_the_uv_parametrisation_and_a_known_seed(four_matrix_run):
    four = four_matrix_run
    with pytest.raises(ValueError, match="parametrisation"):
        analysis.flow_gap(four)
    uv = train(TrainConfig(lengths=(5,), steps=10, batch_size=8, **{**BLOCK, "record_every": 10}))
    with pytest.raises(ValueError, match="seed"):
        analysis.flow_gap(uv, seed=12345)


def test_seed_outcomes_counts_diverged_stalled_and_trained():
    # Seed 1 starts 30 times too large and diverges; seed 2 starts at exactly zero, where every
    # gradient vanishes, so it stalls at the risk of the zero predictor; seed 3 trains.
    base = models.AttentionModel(6, seed=0).weights()
    init = {n: torch.stack([30 * w.detach(), 0 * w.detach(), w.detach()]) for n, w in base.items()}
    cfg = TrainConfig(lengths=(10,), models=("linear",), seeds=(1, 2, 3), steps=300, record_every=50,
                      eval_prompts=256, batch_size=64, init="given", lr=0.05)
    result = train(cfg, init_weights=init)
    out = analysis.seed_outcomes(result, tolerance=0.2)
    assert out["diverged"]["linear"] == [1] and out["stalled"]["linear"] == [1] and out["trained"]["linear"] == [1]
    final = np.array(out["final"]["linear"])[:, 0]
    assert np.isnan(final[0]) and final[1] > final[2]
    assert out["optimal_linear"] == [pytest.approx(risks.optimal_linear_risk(10, cfg.task()))]


def test_seed_outcomes_rejects_bad_arguments(four_matrix_run):
    result = four_matrix_run
    with pytest.raises(ValueError, match="tolerance"):
        analysis.seed_outcomes(result, tolerance=-1)
    with pytest.raises(ValueError, match="tail"):
        analysis.seed_outcomes(result, tail=0)


def test_flow_conserves_the_balance_and_the_horizon_restricts_the_maximum():
    # The block start has ||U||_F^2 = ||v||^2 = alpha^2; the infinite-prompt flow keeps the difference at 0.
    result = train(TrainConfig(lengths=(10,), models=("linear",), steps=100, batch_size=32, **BLOCK))
    gap = analysis.flow_gap(result, horizon=0.4)
    # (the run starts from its float32 copy of the block initialisation, hence a balance of order 1e-8)
    assert np.ptp(gap["flow_balance"]) < 1e-12 and abs(gap["flow_balance"][0]) < 1e-7
    assert gap["balance"]["linear"][0][0] == pytest.approx(gap["flow_balance"][0], abs=1e-15)
    times, distance = np.array(gap["times"]), np.array(gap["distance"]["linear"][0])
    assert gap["max_distance"]["linear"][0] == pytest.approx(distance[times <= 0.4].max())
    assert gap["max_distance"]["linear"][0] < distance.max()
    with pytest.raises(ValueError, match="horizon"):
        analysis.flow_gap(result, horizon=-1.0)


# ------------------------------------------------------------------ read-outs of flows and result files (known answers)

def test_first_time_below_and_squared_distance():
    task = regression.RegressionTask.isotropic(3)            # noise floor 0.05
    flow = {"times": np.array([0.0, 1.0, 2.0, 3.0]), "risk": np.array([0.5, 0.06, 0.0501, 0.050001])}
    assert analysis.first_time_below(flow, task, 5e-3) == 2.0
    assert np.isnan(analysis.first_time_below(flow, task, 1e-7))   # never that close
    U = np.stack([np.eye(2), 2 * np.eye(2)])
    np.testing.assert_allclose(analysis.squared_distance(U, U, np.eye(2), np.zeros((2, 2))), [2.0, 10.0])


def test_linear_excess_is_zero_at_the_optimum_and_positive_elsewhere():
    cfg = TrainConfig(d=3, lengths=(8,), models=("linear",), seeds=(0,), steps=20, batch_size=8, lr=0.01,
                      parametrisation="uv", init="block", alpha=0.3, record_every=10, eval_prompts=8, dtype="float64")
    result = train(cfg, device="cpu")
    U, V = flow_limits.limit_parameters(cfg.task(), 8)
    result.params["U"][0, 0, 0, -1], result.params["V"][0, 0, 0, -1] = U.numpy(), V.numpy()
    excess = analysis.linear_excess(result)
    assert excess.shape == (1, 1, 3) and abs(excess[0, 0, -1]) < 1e-12 and excess[0, 0, 0] > 0.01


def _final_file():
    # seeds listed as (5, 7); lengths 10, 100, 1000; softmax risk - Bayes = 0.5 L^-0.5 exactly for seed 5
    L = np.array([10.0, 100.0, 1000.0])
    bayes = np.array([0.1, 0.06, 0.051])
    soft = np.stack([bayes + 0.5 * L**-0.5, bayes + 0.7 * L**-0.5])
    return {"seeds": [5, 7], "lengths": L.tolist(), "bayes": bayes.tolist(), "softmax_per_seed": soft.tolist(),
            "optimal_linear": [0.2, 0.08, 0.055], "linear_exact_per_seed": [[0.2, 0.08, 0.0551], [0.3, 0.08, 0.055]],
            "linear_per_seed": [[0.2, 0.08, 0.055], [0.3, 0.08, 0.055]],
            "linear_se_per_seed": [[0.001, 0.001, 0.001], [0.001, 0.001, 0.001]],
            "softmax_se_per_seed": [[0.002, 0.002, 0.002], [0.002, 0.002, 0.002]]}


def test_per_seed_and_at_optimum():
    final = _final_file()
    np.testing.assert_allclose(analysis.per_seed(final, "linear_exact_per_seed", [7, 5])[0], [0.3, 0.08, 0.055])
    with pytest.raises(ValueError, match=r"seeds \[9\]"):
        analysis.per_seed(final, "softmax_per_seed", [9])
    reached, excess = analysis.at_optimum(final)
    assert reached.tolist() == [True, False] and excess[1, 0] == pytest.approx(0.1)
    final["linear_exact_per_seed"][0][0] = 0.1
    with pytest.raises(ValueError, match="below R\\*_lin"):
        analysis.at_optimum(final)


def test_seed_difference_excess_slope_and_final_table():
    final = _final_file()
    other = {**final, "softmax_per_seed": (np.array(final["softmax_per_seed"]) - 0.01).tolist()}
    difference = analysis.seed_difference(final, other, [5, 7])
    np.testing.assert_allclose(difference[:, 0], 0.01)
    assert np.all(difference[:, 1] <= 0.01 + 1e-12) and np.all(difference[:, 2] >= 0.01 - 1e-12)
    one = {**final, "softmax_per_seed": final["softmax_per_seed"][:1], "seeds": [5]}
    excess, slope = analysis.excess_slope(one, [5])
    assert slope.slope == pytest.approx(-0.5) and excess[0] == pytest.approx(0.5 / 10**0.5)
    table = analysis.final_table(final, seed=7)
    np.testing.assert_allclose(table["linear_minus_best"], [100, 0, 0], atol=1e-9)
    np.testing.assert_allclose(table["softmax_minus_linear"], (np.array(final["softmax_per_seed"][1]) - [0.3, 0.08, 0.055]) / 0.003)


def test_variation_by_seed_is_one_for_monotone_curves():
    # records after the first: 1, 2, 3, 4 is monotone; 1, 3, 2, 4 travels log 3 + log 3/2 + log 2 for a net log 4
    gap = {"seeds": [1, 2], "gap_per_seed": [[[9.0, 1, 2, 3, 4]], [[9.0, 1, 3, 2, 4]]]}
    np.testing.assert_allclose(analysis.variation_by_seed(gap, "gap", [1, 2])[:, 0],
                               [1.0, (np.log(3) + np.log(1.5) + np.log(2)) / np.log(4)])
    traj = {"seeds": [1], "bayes": [0.5], "softmax_per_seed": [[[9.0, 1.5, 1.0, 0.75]]]}
    assert analysis.variation_by_seed(traj, "softmax", [1])[0, 0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="key"):
        analysis.variation_by_seed(traj, "adam", [1])


def test_sup_interval_covers_the_largest_mean_where_the_picked_record_does_not():
    from scipy import stats as scipy_stats
    rng = np.random.default_rng(0)
    draws, T, n, level = 2000, 20, 50, 0.95
    samples = 1.0 + rng.standard_normal((draws, 1, T, n))       # every record has mean 1: selection at its worst
    mean, sd = samples.mean(-1), samples.std(-1, ddof=1)
    half = scipy_stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n)
    covered, naive = 0, 0
    for d in range(draws):
        gaps = {"n_prompts": n, "level": level,
                "output": {"mean": mean[d], "low": mean[d] - half[d], "high": mean[d] + half[d]}}
        out = analysis.sup_interval(gaps)
        covered += bool(out["low"][0] <= 1.0 <= out["high"][0])
        t = mean[d, 0].argmax()
        naive += bool(mean[d, 0, t] - half[d, 0, t] <= 1.0)
        assert out["mean"][0] == mean[d, 0].max()
    assert covered / draws >= level - 3 * np.sqrt(level * (1 - level) / draws)
    assert naive / draws < 0.8                                  # the interval of the record picked as largest: about 0.6
    with pytest.raises(ValueError, match="name"):
        analysis.sup_interval(gaps, "risk")
