"""The command line with damaged or impossible inputs: every preset for every figure, unwritable output
folders, truncated files (each named, with what to do, and nothing else lost), options named as typed."""
import json
import pathlib

import pytest

import softmax_as_linear.cli as cli
from softmax_as_linear.experiments import sweep_stage


@pytest.mark.parametrize("figure", ["fig1", "fig5"])
def test_smoke_preset_writes_the_concentration_figures(figure, tmp_path, run_cli):
    code, _, err = run_cli("reproduce", figure, "--preset", "smoke", "--device", "cpu", "--out", str(tmp_path))
    assert code == 0, err
    data = json.loads((tmp_path / f"{figure}_smoke.json").read_text())
    assert data["preset"] == "smoke" and len(data["output"]["mean"]) == len(data["lengths"])


@pytest.mark.slow
def test_smoke_preset_writes_every_figure(tmp_path, run_cli):
    code, _, err = run_cli("reproduce", "all", "--preset", "smoke", "--device", "cpu", "--out", str(tmp_path))
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.glob("fig*_smoke.json")) == [f"fig{k}_smoke.json" for k in range(1, 9)]


@pytest.mark.parametrize("out", ["/proc/x", "/dev/null", "a-file"])
def test_unwritable_out_exits_2_naming_the_option(out, tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pathlib.Path("a-file").write_text("not a folder")
    code, _, err = run_cli("reproduce", "fig2", "--preset", "smoke", "--device", "cpu", "--out", out)
    assert code == cli.EXIT_USAGE == 2
    assert "--out" in err and out in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing computed, nothing written


def _finished_run(tmp_path, shared_run) -> dict[str, pathlib.Path]:
    """The files of ``reproduce fig2 fig3`` (the tiny presets), trained once in a session and copied into
    ``tmp_path``."""
    code, err = shared_run("fig2 fig3, tiny presets", lambda out, run, patch: run(
        "reproduce", "fig2", "fig3", "--device", "cpu", "--out", str(out))[::2], tmp_path)
    assert code == 0, err
    files = {"sweep": tmp_path / "sweep_isotropic_lecture.npz",
             "final": tmp_path / "sweep_isotropic_lecture_final.npz",
             "checkpoint": tmp_path / "checkpoints" / "sweep_isotropic_lecture.pt",
             "figure": tmp_path / "fig2_lecture.json"}
    assert all(path.is_file() for path in files.values())
    return files


def _truncate(path: pathlib.Path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("kind", ["sweep", "final", "checkpoint"])
def test_a_truncated_file_is_named_with_what_to_do(kind, tmp_path, tiny_presets, run_cli, shared_run):
    files = _finished_run(tmp_path, shared_run)
    if kind == "checkpoint":  # an interrupted run: a checkpoint and no sweep file yet
        files["sweep"].unlink()
        files["final"].unlink()
    _truncate(files[kind])
    others = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file() and path != files[kind]}
    code, _, err = run_cli("reproduce", "fig2", "--device", "cpu", "--out", str(tmp_path))
    assert code == cli.EXIT_ERROR == 1
    assert str(files[kind]) in err and "damaged" in err and "delete it" in err and "--restart" in err
    assert "Traceback" not in err
    assert {path: path.read_bytes() for path in others} == others  # nothing else lost
    # What the message says to do works: deleting the file, or --restart.
    code, _, err = run_cli("reproduce", "fig2", "--device", "cpu", "--out", str(tmp_path), "--restart")
    assert code == 0, err
    assert json.loads(files["figure"].read_text())["complete"] is True


def test_deleting_a_damaged_sweep_file_rebuilds_it_from_the_checkpoint(tmp_path, tiny_presets, run_cli, monkeypatch,
                                                                      shared_run):
    files = _finished_run(tmp_path, shared_run)
    expected = json.loads(files["figure"].read_text())
    _truncate(files["sweep"])
    files["sweep"].unlink()
    steps = []
    real = sweep_stage.train
    monkeypatch.setattr(sweep_stage, "train", lambda *a, **k: steps.append(1) or real(*a, **k))
    code, _, err = run_cli("reproduce", "fig2", "--device", "cpu", "--out", str(tmp_path))
    assert code == 0, err
    rebuilt = json.loads(files["figure"].read_text())
    assert rebuilt["softmax"] == expected["softmax"]  # the finished state came from the checkpoint


def test_a_truncated_result_file_is_rewritten(tmp_path, tiny_presets, run_cli, shared_run):
    files = _finished_run(tmp_path, shared_run)
    expected = json.loads(files["figure"].read_text())
    _truncate(files["figure"])
    code, _, err = run_cli("reproduce", "fig2", "--device", "cpu", "--out", str(tmp_path))
    assert code == 0, err
    assert json.loads(files["figure"].read_text())["softmax"] == expected["softmax"]


def test_a_truncated_result_file_read_by_a_chapter_is_named(tmp_path, tiny_presets, run_cli, shared_run):
    from softmax_as_linear.core.artifacts import DamagedFileError
    from softmax_as_linear.experiments import paper_figures

    files = _finished_run(tmp_path, shared_run)
    _truncate(files["figure"])
    with pytest.raises(DamagedFileError, match="fig2_lecture.json") as caught:
        paper_figures.saved_figure("fig2", "lecture", tmp_path)
    assert "python -m softmax_as_linear reproduce" in str(caught.value)


def test_restart_trains_afresh_and_keeps_other_sweeps(tmp_path, tiny_presets, run_cli, monkeypatch, shared_run):
    _finished_run(tmp_path, shared_run)
    code, _, err = run_cli("reproduce", "fig6", "--device", "cpu", "--out", str(tmp_path))
    assert code == 0, err
    kms = {path: path.read_bytes() for path in tmp_path.rglob("*kms*")}
    calls = []
    real = sweep_stage.train
    monkeypatch.setattr(sweep_stage, "train",
                        lambda *a, **k: calls.append((k["checkpoint"].name, k["checkpoint"].exists())) or real(*a, **k))
    code, _, err = run_cli("reproduce", "fig2", "--device", "cpu", "--out", str(tmp_path), "--restart")
    assert code == 0, err
    assert calls == [("sweep_isotropic_lecture.pt", False)]  # from step 0, not from the finished checkpoint
    assert {path: path.read_bytes() for path in tmp_path.rglob("*kms*")} == kms


def test_a_figure_file_of_other_seeds_is_not_replaced(tmp_path, tiny_presets, run_cli, monkeypatch, shared_run):
    """A figure file is named by its preset alone: a run with other seeds refuses to overwrite it before training,
    and says how to keep both (--out) or replace it (--restart)."""
    _finished_run(tmp_path, shared_run)                                # the lecture preset: seed 327
    files = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    real = sweep_stage.train
    monkeypatch.setattr(sweep_stage, "train", lambda *a, **k: pytest.fail("trained before refusing"))
    code, _, err = run_cli("reproduce", "fig2", "--seeds", "2", "--device", "cpu", "--out", str(tmp_path))
    assert code == cli.EXIT_ERROR and "fig2_lecture.json" in err and "seeds 327," in err
    assert "--out" in err and "--restart" in err and "Traceback" not in err
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == files
    monkeypatch.setattr(sweep_stage, "train", real)
    code, _, err = run_cli("reproduce", "fig2", "--seeds", "2", "--device", "cpu", "--out", str(tmp_path), "--restart")
    assert code == 0, err
    assert json.loads((tmp_path / "fig2_lecture.json").read_text())["seeds"] == [327, 0]


@pytest.mark.parametrize("name", ["nonlinear_window", pytest.param("depth", marks=pytest.mark.slow)])
def test_one_rule_for_a_damaged_result_file(name, tmp_path, run_cli, monkeypatch, shared_run):
    """Every reproduction: a truncated result file is written again from its stages' finished checkpoints, which is
    said on stdout, each finished stage "reused", not "resumed from step 12 of 12"; the same numbers."""
    from softmax_as_linear.experiments import presets

    monkeypatch.setattr(presets, "NONLINEAR_DEPENDENCE", presets.NONLINEAR_DEPENDENCE[:2])
    monkeypatch.setitem(presets.DEPTH_SETTINGS, "smoke", {**presets.DEPTH_SETTINGS["smoke"], **dict(
        lengths=(4, 8), steps=12, record_every=4, batch_size=8, held_out_prompts=16, final_prompts=64,
        pgd_samples=200, bayes_samples=100)})
    run = ["reproduce", name, "--preset", "smoke", "--device", "cpu", "--out", str(tmp_path)]
    key = f"reproduce {name} --preset smoke: two settings of the dependence" + (", shrunk" if name == "depth" else "")
    assert shared_run(key, lambda out, run_command, patch: run_command(*run[:-1], str(out))[0],
                      tmp_path) == cli.EXIT_COMPLETE
    path = tmp_path / f"{name}_smoke.json"
    expected = json.loads(path.read_text())
    _truncate(path)
    code, out, err = run_cli(*run)
    assert code == cli.EXIT_COMPLETE, err
    assert f"{path} is damaged" in out and "writing it again from its checkpoints" in out, out
    assert "reusing the finished" in out and "resuming" not in out
    rebuilt = json.loads(path.read_text())
    assert rebuilt["complete"] is True
    assert json.dumps(rebuilt["per_seed"]["risk"]) == json.dumps(expected["per_seed"]["risk"])
