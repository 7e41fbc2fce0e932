"""Every stage's settings count, not only the first's: a reproduction whose later stage (the window's dependence of
Chapter 8, the warm stage of Chapter 7) changed is not "up to date", and shards whose later stage was trained with
other settings are refused by the merge, which records the shards' settings of every stage."""
import json

import pytest

import softmax_as_linear.cli as cli
from softmax_as_linear.experiments import presets

WINDOW = ["reproduce", "nonlinear_window", "--preset", "smoke", "--device", "cpu"]


@pytest.fixture
def two_settings(monkeypatch):
    monkeypatch.setattr(presets, "NONLINEAR_DEPENDENCE", presets.NONLINEAR_DEPENDENCE[:2])


@pytest.mark.slow
def test_a_changed_dependence_stage_is_not_up_to_date(two_settings, tmp_path, run_cli, monkeypatch):
    run = [*WINDOW, "--out", str(tmp_path)]
    assert run_cli(*run)[0] == cli.EXIT_COMPLETE
    code, out, err = run_cli(*run)
    assert code == cli.EXIT_COMPLETE and "up to date" in out
    monkeypatch.setattr(presets, "NONLINEAR_DEPENDENCE", presets.NONLINEAR_DEPENDENCE[:1])
    code, out, err = run_cli(*run)
    assert code == cli.EXIT_COMPLETE, err
    assert "up to date" not in out
    data = json.loads((tmp_path / "nonlinear_window_smoke.json").read_text())
    assert len(data["dependence"]["settings"]) == 1
    assert list(data["provenance"]["stages"]) == ["sweep", "dependence 0"]
    assert len(data["per_seed"]["dependence"]["w"][0]) == 1


def test_shards_of_other_dependence_settings_are_refused(two_settings, tmp_path, run_cli, monkeypatch):
    """Shard 1 trained with two settings of the dependence, shard 2 with one: the merge names shard 2 and its
    dependence instead of joining ragged rows; with both shards alike it merges, and records their settings."""
    out = ["--out", str(tmp_path)]
    assert run_cli(*WINDOW, *out, "--shard", "1/2")[0] == cli.EXIT_COMPLETE
    with monkeypatch.context() as patch:
        patch.setattr(presets, "NONLINEAR_DEPENDENCE", presets.NONLINEAR_DEPENDENCE[:1])
        assert run_cli(*WINDOW, *out, "--shard", "2/2")[0] == cli.EXIT_COMPLETE
    code, _, err = run_cli("merge", *WINDOW[1:], *out, "--shards", "2")
    assert code == cli.EXIT_ERROR and "shard 2/2" in err and "'dependence 1'" in err, err
    assert not (tmp_path / "nonlinear_window_smoke.json").exists()
    assert run_cli(*WINDOW, *out, "--shard", "2/2", "--restart")[0] == cli.EXIT_COMPLETE
    code, _, err = run_cli("merge", *WINDOW[1:], *out, "--shards", "2")
    assert code == cli.EXIT_COMPLETE, err
    origin = json.loads((tmp_path / "nonlinear_window_smoke.json").read_text())["provenance"]
    shard = json.loads((tmp_path / "shards" / "1-of-2" / "nonlinear_window_smoke.json").read_text())["provenance"]
    assert [s["seeds"] for name, s in origin["stages"].items() if name != "sweep"] == [[0, 1]] * 2
    assert [{**s, "seeds": None} for s in origin["stages"].values()] == \
        [{**s, "seeds": None} for s in shard["stages"].values()]
