"""Chapter 8's optima: the experiment's file, its readings, and the paired difference of the chapter's final risks."""
import math
import types

import numpy as np
import pytest
import torch

from softmax_as_linear.core import seeding
from softmax_as_linear.core.artifacts import load_json
from softmax_as_linear.experiments import nonlinear
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
    final = nonlinear.final_risks(result, n, "cpu")
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


def test_bad_preset_exits_with_2(capsys):
    assert optima.main(["paper-sized"]) == 2
    assert "preset" in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_preset_writes_a_consistent_file(tmp_path):
    path = optima.reproduce_nonlinear_optima("smoke", out=tmp_path, progress=False)
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
