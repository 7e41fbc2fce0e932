"""Chapter 6's experiment: the smoke preset end to end, what its readings mean, its file and its script."""
import importlib.util
import json
import math
import pathlib

import numpy as np
import pytest

from softmax_as_linear.core.artifacts import save_json
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train
from softmax_as_linear.experiments import beyond_gaussian, presets

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smoke():
    return beyond_gaussian.beyond_experiment("uniform", "smoke", device="cpu", n_bayes_samples=500)


def test_smoke_experiment_reads_its_sweep(smoke, tmp_path):
    json.loads(json.dumps(smoke))  # JSON-ready
    tracking = smoke["tracking"]
    assert tracking["covariates"] == "uniform" and tracking["lengths"] == [10, 30]
    for activation in ("softmax", "linear"):
        distance = np.asarray(tracking["distance"][activation])
        assert np.all(distance[..., 0] == 0) and np.all(distance[..., -1] > 0)  # same start, then apart
        assert np.allclose(np.asarray(tracking["sup"][activation]), distance.max(-1))
    assert np.all(np.asarray(tracking["limits"])[:, 0] == 0)
    assert tracking["slopes"]["softmax"] is None  # two lengths: no slope
    limits = smoke["limits"]
    assert len(limits["v_y"]["softmax_limit"]) == 2 and all(se > 0 for se in limits["difference_se"])
    final = smoke["final"]
    assert np.all(np.asarray(final["bayes"]) < np.asarray(final["optimal_linear"]))
    assert np.all(np.asarray(final["optimal_linear"]) < np.asarray(final["optimal_linear_gaussian"]))
    origin = smoke["provenance"]
    assert origin["settings"]["covariates"] == "uniform" and origin["device"] == "cpu" and "torch" in origin
    path = save_json(tmp_path / beyond_gaussian.result_name("uniform", "smoke"), smoke)
    assert beyond_gaussian.saved_result("uniform", "smoke", folder=tmp_path)["covariates"] == "uniform"
    assert beyond_gaussian.saved_result("rademacher", "smoke", folder=tmp_path) is None
    assert path.name == "beyond_uniform_smoke.json"


def test_tracking_of_a_hand_made_sweep():
    """Distances against the limit runs of the same seed, slopes from three lengths on."""
    cfg = presets.beyond_config("smoke", "rademacher", lengths=(5, 10, 20, 40), seeds=(1, 2), steps=12, record_every=4)
    result = train(cfg)
    tracking = beyond_gaussian.limit_tracking(result, fit_from=10)
    W = {n: v for n, v in result.params.items()}
    s, l, t = 1, 2, 2
    expected = sum(float(((W[n][s, l, 0, t] - W[n][s, 0, 2, t]) ** 2).sum()) for n in W)
    assert abs(tracking["distance"]["softmax"][s][l][t] - expected) < 1e-9
    assert len(tracking["slopes"]["softmax"]["per_seed"]) == 2 and tracking["fit_lengths"] == [10, 20, 40]
    with pytest.raises(ValueError, match="result"):
        beyond_gaussian.limit_tracking(train(TrainConfig(lengths=(5,), steps=2, record_every=1, eval_prompts=4)))


def test_concentration_check_recovers_the_delta_method_rate():
    """At the longest length the gap times L is the delta-method constant E[C] (its O(1/L) correction is far below the
    noise of 400 prompts) within four standard errors of the two independent estimates, and the fitted slope's 95 %
    interval holds -1."""
    cfg = presets.beyond_config("smoke", "uniform", lengths=(30, 300, 3000), seeds=(1,), steps=4, record_every=2)
    check = beyond_gaussian.concentration_check(train(cfg), n_prompts=400)
    L, gap, gap_se = check["lengths"][-1], check["gap"][0][-1], check["gap_se"][0][-1]
    constant, constant_se = check["constant"][0], check["constant_se"][0]
    assert gap_se > 0 and constant_se > 0
    assert abs(L * gap - constant) < 4 * math.hypot(L * gap_se, constant_se), (L * gap, constant)
    low, high = check["slopes"]["mean_interval"]
    assert low < -1 < high, (low, high)


def test_names_and_bad_input():
    assert beyond_gaussian.reproduce_command("rademacher", "paper") == \
        "python -m softmax_as_linear reproduce beyond --covariates rademacher --preset paper"
    with pytest.raises(ValueError, match="covariates"):
        beyond_gaussian.result_name("gaussian-ish")
    with pytest.raises(ValueError, match="preset"):
        beyond_gaussian.beyond_experiment("uniform", "huge")
    assert presets.beyond_config("paper", "uniform").lengths[-1] >= 1000
    assert presets.beyond_config("lecture", "rademacher").models == presets.BEYOND_MODELS


def test_script_is_reproduce_beyond_at_the_paper_preset(monkeypatch, capsys):
    """benchmarks/beyond_gaussian.py hands its arguments to ``reproduce beyond``, adding ``--preset paper`` unless a
    preset is given; bad arguments get the command line's usage error (exit 2). The runs themselves are
    ``reproduce beyond``'s, tested in tests/cli/test_beyond.py."""
    spec = importlib.util.spec_from_file_location("beyond_script", ROOT / "benchmarks" / "beyond_gaussian.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with pytest.raises(SystemExit) as bad:
        script.main(["--covariates", "cauchy"])
    assert bad.value.code == 2 and "--covariates" in capsys.readouterr().err
    calls = []
    monkeypatch.setattr("softmax_as_linear.cli.main", lambda argv: calls.append(argv) or 0)
    assert script.main(["--covariates", "uniform", "--seeds", "3"]) == 0
    assert script.main(["--preset=smoke", "--device", "cpu"]) == 0
    assert calls == [["reproduce", "beyond", "--preset", "paper", "--covariates", "uniform", "--seeds", "3"],
                     ["reproduce", "beyond", "--preset=smoke", "--device", "cpu"]]
