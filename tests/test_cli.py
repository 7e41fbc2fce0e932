"""The reproduction command: artifacts written atomically, sweeps reused, clear errors."""
import json

import numpy as np
import pytest
import torch

import softmax_as_linear.__main__ as cli
from softmax_as_linear import experiments
from softmax_as_linear.presets import sweep_config
from softmax_as_linear.train import TrainConfig

TINY = dict(lengths=(5, 20), steps=30, record_every=10, eval_prompts=32, batch_size=16)


@pytest.fixture
def tiny_presets(monkeypatch):
    monkeypatch.setattr(cli, "sweep_config", lambda preset, covariance: sweep_config(preset, covariance, **TINY))


def test_reproduce_writes_figure_and_sweep_artifacts(tmp_path, tiny_presets, capsys):
    assert cli.main(["reproduce", "fig3", "--preset", "lecture", "--device", "cpu", "--out", str(tmp_path)]) == 0
    figure = json.loads((tmp_path / "fig3_lecture.json").read_text())
    assert figure["lengths"] == [5, 20] and len(figure["gap"][0]) == len(figure["steps"]) == 4
    sweep = experiments.load_sweep(tmp_path / "sweep_isotropic_lecture.npz")
    assert sweep.config == sweep_config("lecture", "isotropic", **TINY) and sweep.complete
    assert not list(tmp_path.glob(".*.tmp"))


def test_reproduce_reuses_a_finished_sweep(tmp_path, tiny_presets, monkeypatch, capsys):
    cli.main(["reproduce", "fig2", "--out", str(tmp_path), "--device", "cpu"])

    def no_training(*args, **kwargs):
        raise AssertionError("the finished sweep should have been reused")

    monkeypatch.setattr("softmax_as_linear.train.train", no_training)
    cli.main(["reproduce", "fig4", "--out", str(tmp_path), "--device", "cpu"])
    assert "up to date" in capsys.readouterr().out
    fig2 = json.loads((tmp_path / "fig2_lecture.json").read_text())
    fig4 = json.loads((tmp_path / "fig4_lecture.json").read_text())
    assert np.isclose(fig4["linear"][1][-1], experiments.load_sweep(tmp_path / "sweep_isotropic_lecture.npz")
                      .eval_risk[0, 1, 1, -1])
    assert fig2["bayes"][1] < fig2["optimal_linear"][1]


def test_several_figures_share_one_training(tmp_path, tiny_presets, monkeypatch):
    from softmax_as_linear import train as train_module

    calls, threads = [], torch.get_num_threads()
    real = train_module.train
    monkeypatch.setattr(train_module, "train", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert cli.main(["reproduce", "fig2", "fig3", "fig4", "--out", str(tmp_path), "--device", "cpu"]) == 0
    assert len(calls) == 1
    assert torch.get_num_threads() == threads  # the command's --threads does not outlive it
    assert sorted(p.name for p in tmp_path.glob("fig*.json")) == ["fig2_lecture.json", "fig3_lecture.json",
                                                                  "fig4_lecture.json"]
    with pytest.raises(ValueError, match="at least one"):
        cli.reproduce([])


def test_sweep_round_trip(tmp_path):
    from softmax_as_linear.train import train

    result = train(TrainConfig(**TINY))
    experiments.save_sweep(tmp_path / "s.npz", result)
    again = experiments.load_sweep(tmp_path / "s.npz")
    assert again.config == result.config
    np.testing.assert_array_equal(again.eval_risk, result.eval_risk)
    np.testing.assert_array_equal(again.parameter_gap(), result.parameter_gap())


@pytest.mark.parametrize("argv, name", [
    (["reproduce", "fig5"], "figure"),
    (["reproduce", "fig2", "--preset", "huge"], "preset"),
    (["reproduce", "fig2", "--device", "tpu"], "device"),
    (["reproduce", "fig2", "--threads", "0"], "threads"),
])
def test_bad_arguments_name_the_argument(argv, name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert name in capsys.readouterr().err


def test_reproduce_function_rejects_bad_values():
    with pytest.raises(ValueError, match="figure"):
        cli.reproduce("fig9")
    with pytest.raises(ValueError, match="preset"):
        cli.reproduce("fig2", preset="full")


def test_figure_data_checks_the_sweep():
    from softmax_as_linear.train import train

    result = train(TrainConfig(**TINY))
    with pytest.raises(ValueError, match="kms"):
        experiments.figure_data("fig6", result)
    with pytest.raises(ValueError, match="figure"):
        experiments.figure_data("fig5", result)


def test_time_boxed_run_writes_partial_artifacts_then_resumes(tmp_path, tiny_presets, monkeypatch):
    clock = iter([0.0] + [1e9] * 10_000)  # the deadline passes right after the start
    monkeypatch.setattr(cli.time, "monotonic", lambda: next(clock))
    cli.main(["reproduce", "fig2", "--out", str(tmp_path), "--device", "cpu", "--max-minutes", "1"])
    partial = json.loads((tmp_path / "fig2_lecture.json").read_text())
    assert partial["complete"] is False and partial["steps"] == 10
    monkeypatch.setattr(cli.time, "monotonic", lambda: 0.0)
    cli.main(["reproduce", "fig2", "--out", str(tmp_path), "--device", "cpu"])
    final = json.loads((tmp_path / "fig2_lecture.json").read_text())
    assert final["complete"] is True and final["steps"] == 30
