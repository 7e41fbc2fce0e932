"""The reproduction command: artifacts written atomically, sweeps reused, seeds and samplers with their
provenance, clear errors, exit codes."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import softmax_as_linear.cli as cli
from softmax_as_linear.engine.sweep import load_sweep
from softmax_as_linear.experiments import paper_figures, presets, reproduce, sweep_stage
from softmax_as_linear.experiments.presets import sweep_config
from softmax_as_linear.figures import paper


@pytest.fixture
def tiny_presets(tiny_presets, monkeypatch) -> dict:
    """The tiny lecture sweeps of conftest.py, their final evaluation and changes of risk estimated on the smoke
    preset's numbers of fresh prompts: these tests check the command, which does the same with 2,000 prompts as with
    150,000 (most of a tiny run's time); the estimates themselves are tested in tests/engine."""
    monkeypatch.setitem(presets.FINAL_PROMPTS, "lecture", presets.FINAL_PROMPTS["smoke"])
    monkeypatch.setitem(presets.CHANGE_PROMPTS, "lecture", presets.CHANGE_PROMPTS["smoke"])
    return tiny_presets


def test_reproduce_writes_figure_and_sweep_artifacts(tmp_path, tiny_presets, capsys):
    assert cli.main(["reproduce", "fig3", "--preset", "lecture", "--device", "cpu", "--out", str(tmp_path)]) == 0
    figure = json.loads((tmp_path / "fig3_lecture.json").read_text())
    assert figure["lengths"] == [5, 20] and len(figure["gap"][0]) == len(figure["steps"]) == 4
    sweep = load_sweep(tmp_path / "sweep_isotropic_lecture.npz")
    # the stream that rng="auto" meant on this device is recorded (torch's generators on a CPU)
    assert sweep.config == sweep_config("lecture", "isotropic", **tiny_presets, rng="torch") and sweep.complete
    assert not list(tmp_path.glob(".*.tmp"))


def test_reproduce_reuses_a_finished_sweep(tmp_path, tiny_presets, monkeypatch, capsys):
    cli.main(["reproduce", "fig2", "--out", str(tmp_path), "--device", "cpu"])

    def no_training(*args, **kwargs):
        raise AssertionError("the finished sweep should have been reused")

    monkeypatch.setattr("softmax_as_linear.experiments.sweep_stage.train", no_training)
    cli.main(["reproduce", "fig4", "--out", str(tmp_path), "--device", "cpu"])
    assert "up to date" in capsys.readouterr().out
    fig2 = json.loads((tmp_path / "fig2_lecture.json").read_text())
    fig4 = json.loads((tmp_path / "fig4_lecture.json").read_text())
    assert np.isclose(fig4["linear"][1][-1], load_sweep(tmp_path / "sweep_isotropic_lecture.npz")
                      .eval_risk[0, 1, 1, -1])
    assert fig2["bayes"][1] < fig2["optimal_linear"][1]


def test_several_figures_share_one_training(tmp_path, tiny_presets, monkeypatch):
    from softmax_as_linear.experiments import reproduce

    calls, threads = [], torch.get_num_threads()
    real = sweep_stage.train
    monkeypatch.setattr(sweep_stage, "train", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert cli.main(["reproduce", "fig2", "fig3", "fig4", "--out", str(tmp_path), "--device", "cpu"]) == 0
    assert len(calls) == 1
    assert torch.get_num_threads() == threads  # the command's --threads does not outlive it
    assert sorted(p.name for p in tmp_path.glob("fig*.json")) == ["fig2_lecture.json", "fig3_lecture.json",
                                                                  "fig4_lecture.json"]
    with pytest.raises(ValueError, match="at least one"):
        reproduce.reproduce([])


def test_reproduce_function_rejects_bad_values():
    with pytest.raises(ValueError, match="figure"):
        reproduce.reproduce("fig9")
    with pytest.raises(ValueError, match="preset"):
        reproduce.reproduce("fig2", preset="full")


def test_time_boxed_run_writes_partial_artifacts_then_resumes(tmp_path, tiny_presets, monkeypatch):
    clock = iter([0.0] + [1e9] * 10_000)  # the deadline passes right after the start
    monkeypatch.setattr(reproduce.time, "monotonic", lambda: next(clock))
    code = cli.main(["reproduce", "fig2", "--out", str(tmp_path), "--device", "cpu", "--max-minutes", "1"])
    assert code == cli.EXIT_PARTIAL == 3
    partial = json.loads((tmp_path / "fig2_lecture.json").read_text())
    assert partial["complete"] is False and partial["steps"] == 10
    monkeypatch.setattr(reproduce.time, "monotonic", lambda: 0.0)
    assert cli.main(["reproduce", "fig2", "--out", str(tmp_path), "--device", "cpu"]) == 0
    final = json.loads((tmp_path / "fig2_lecture.json").read_text())
    assert final["complete"] is True and final["steps"] == 30


def test_choices_come_from_the_registry_which_needs_no_torch():
    from softmax_as_linear import registry
    from softmax_as_linear.experiments.reproductions import REPRODUCTIONS

    assert cli.FIGURE_CHOICES == (*REPRODUCTIONS, "all")
    assert cli.FIGURE_CHOICES[:10] == (*registry.FIGURES, "beyond", "depth")
    assert registry.FIGURES == ("fig1", "fig2", "fig3", "fig4", "fig5", "fig6", "fig7", "fig8")
    code = "import sys, softmax_as_linear.registry, softmax_as_linear.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _command(*args, cwd=None, env=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "softmax_as_linear", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, **(env or {})}, timeout=120, **kwargs)


def test_help_and_version_answer_without_importing_torch():
    probe = ("import sys\nfrom softmax_as_linear.cli import main\n"
             "for argv in (['--help'], ['reproduce', '--help'], ['--version']):\n"
             "    try:\n        main(argv)\n    except SystemExit as stop:\n        assert stop.code == 0\n"
             "print('torch' in sys.modules, 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False False"
    import softmax_as_linear

    version = _command("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"softmax_as_linear {softmax_as_linear.__version__}"


def test_help_shows_defaults_examples_and_exit_codes():
    text = _command("reproduce", "--help").stdout
    for needed in ("(default: lecture)", "(default: auto)", "SOFTMAX_AS_LINEAR_RESULTS", "examples:",
                   "exit codes:", "130", "resumes"):
        assert needed in text, needed
    assert "exit codes:" in _command("--help").stdout


@pytest.mark.slow
def test_interrupt_exits_130_and_leaves_a_checkpoint(tmp_path):
    # A real process, stopped by Ctrl-C (SIGINT) while it trains.
    runner = ("import sys\nfrom softmax_as_linear.experiments import presets\nreal = presets.sweep_config\n"
              "presets.sweep_config = lambda p, c='isotropic', **kw: real(p, c, **{**dict(lengths=(5, 20), steps=10**5, "
              "record_every=10, eval_prompts=32, batch_size=16), **kw})\n"
              "from softmax_as_linear.experiments import pipeline\npipeline.CHECKPOINT_EVERY, pipeline.CHECKPOINT_SECONDS = 20, 0.0\n"
              "from softmax_as_linear import cli\nsys.exit(cli.main(sys.argv[1:]))")
    process = subprocess.Popen([sys.executable, "-c", runner, "reproduce", "fig2", "--device", "cpu",
                                "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    checkpoint = tmp_path / "checkpoints" / "sweep_isotropic_lecture.pt"
    deadline = time.monotonic() + 90
    while not checkpoint.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)  # training is under way once its first periodic checkpoint is written
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == cli.EXIT_INTERRUPTED == 130, err
    assert "run the same command again" in err
    assert checkpoint.exists(), err


def test_default_out_is_the_folder_chapters_read(tmp_path, tiny_presets, monkeypatch):
    from softmax_as_linear.core import artifacts

    monkeypatch.setenv(artifacts.ENV_VAR, str(tmp_path / "runs"))
    assert cli.main(["reproduce", "fig2", "--device", "cpu"]) == 0
    assert (tmp_path / "runs" / "fig2_lecture.json").is_file()
    assert artifacts.find_result("fig2_lecture.json") == tmp_path / "runs" / "fig2_lecture.json"
    assert paper_figures.saved_figure("fig2", "lecture")["lengths"] == [5, 20]


def test_reproduce_smoke_with_seeds_and_sampler(tmp_path):
    code = cli.main(["reproduce", "fig6", "fig7", "fig8", "--preset", "smoke", "--seeds", "3", "--sampler", "published",
                 "--device", "cpu", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "fig6_smoke_published.json").read_text())
    origin = data["provenance"]
    for key in ("device", "device_name", "torch", "commit", "preset", "settings", "wall_seconds", "date",
                "final_prompts"):
        assert key in origin
    assert origin["settings"]["sampler"] == "published" and origin["settings"]["seeds"] == [327, 0, 1]
    assert origin["final_prompts"] == presets.FINAL_PROMPTS["smoke"]
    assert data["seeds"] == [327, 0, 1] and len(data["linear_exact_per_seed"]) == 3
    assert (tmp_path / "sweep_kms_published_smoke_final.npz").exists()
    note = paper.provenance_note(data)
    assert "Data: smoke preset, 3 seeds (lines: their median; shaded: their range" in note and "sampler published" in note
    fig8 = json.loads((tmp_path / "fig8_smoke_published.json").read_text())
    assert np.asarray(fig8["softmax_per_seed"]).shape[0] == 3
    assert paper_figures.saved_figure("fig6", "smoke", tmp_path, sampler="published")["sampler"] == "published"
    assert paper_figures.saved_figure("fig6", "smoke", tmp_path) is None  # the paper sampler's file is another one


def test_reproduce_with_the_counter_based_stream_records_it_and_reuses_the_sweep(tmp_path):
    argv = ["reproduce", "fig2", "--preset", "smoke", "--seeds", "2", "--rng", "philox", "--device", "cpu",
            "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    data = json.loads((tmp_path / "fig2_smoke.json").read_text())
    assert data["provenance"]["settings"]["rng"] == "philox" and data["complete"]
    assert load_sweep(tmp_path / "sweep_isotropic_smoke.npz").config.rng == "philox"
    stamp = (tmp_path / "sweep_isotropic_smoke.npz").stat().st_mtime_ns
    assert cli.main(argv) == 0  # the same stream resolved the same way: the sweep is up to date
    assert (tmp_path / "sweep_isotropic_smoke.npz").stat().st_mtime_ns == stamp


def test_help_names_every_chapters_reproduction_with_an_example():
    """The help lists, from the registry, every chapter's reproduction with what it writes and an example, Chapter 8's
    among them."""
    from softmax_as_linear.experiments.reproductions import REPRODUCTIONS

    text = _command("--help").stdout + _command("reproduce", "--help").stdout
    for reproduction in REPRODUCTIONS.values():
        if reproduction.example or not reproduction.in_all:  # the figures' examples name several at once
            assert f"python -m softmax_as_linear reproduce {reproduction.name} --preset" in text, reproduction.name
    assert "reproduce nonlinear --preset lecture" in text and "reproduce nonlinear_depth --preset lecture" in text


def test_a_smoke_run_does_not_advise_pointing_the_chapters_at_its_folder(tmp_path, run_cli, monkeypatch):
    """No chapter reads a smoke preset's file: its run says so, instead of how the chapters would read its folder."""
    from softmax_as_linear.experiments import presets

    monkeypatch.setattr(presets, "NONLINEAR_DEPENDENCE", presets.NONLINEAR_DEPENDENCE[:1])
    code, out, err = run_cli("reproduce", "nonlinear_window", "--preset", "smoke", "--device", "cpu", "--out",
                             str(tmp_path))
    assert code == cli.EXIT_COMPLETE, err
    assert "SOFTMAX_AS_LINEAR_RESULTS" not in err and "no chapter reads" in err


def test_a_run_of_a_preset_the_chapters_read_elsewhere_says_how_they_would_read_it(tmp_path, run_cli, monkeypatch):
    """A lecture run written with --out: the note says how the chapters would read that folder, and that they refuse
    a partial file (the training itself replaced by a partial file)."""
    from softmax_as_linear.experiments import reproduce

    def partial(figure, **options):
        path = tmp_path / "depth_lecture.json"
        path.write_text(json.dumps({"complete": False}))
        return [path]

    monkeypatch.setattr(reproduce, "reproduce", partial)
    code, out, err = run_cli("reproduce", "depth", "--device", "cpu", "--out", str(tmp_path))
    assert code == cli.EXIT_PARTIAL
    assert f"SOFTMAX_AS_LINEAR_RESULTS={tmp_path}" in err and "once its files are complete" in err
