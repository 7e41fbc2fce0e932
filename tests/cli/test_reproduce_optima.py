"""Chapter 8's optima on the command line (``reproduce nonlinear_optima``): a reproduction of the registry, with fixed
seeds, no shards and no time limit, "up to date" when its complete file of the same settings is there."""
import json
import pathlib
import shutil

import pytest

from softmax_as_linear.experiments import nonlinear_optima
from softmax_as_linear.experiments.pipeline import up_to_date
from softmax_as_linear.experiments.reproductions import REPRODUCTIONS

OPTIMA = REPRODUCTIONS["nonlinear_optima"]

COMMITTED = pathlib.Path(__file__).parents[2] / "results" / "nonlinear_optima_lecture.json"


def test_the_committed_lecture_file_is_up_to_date_and_kept(tmp_path, run_cli, monkeypatch):
    shutil.copy(COMMITTED, tmp_path / COMMITTED.name)
    before = (tmp_path / COMMITTED.name).read_bytes()
    monkeypatch.setattr(nonlinear_optima, "length_sweep", lambda *a, **k: pytest.fail("the optima were computed"))
    code, out, err = run_cli("reproduce", "nonlinear_optima", "--preset", "lecture", "--out", str(tmp_path))
    assert code == 0, err
    assert f"{tmp_path / COMMITTED.name}: up to date" in out
    assert (tmp_path / COMMITTED.name).read_bytes() == before


def test_a_file_of_other_settings_or_missing_fields_is_not_up_to_date(tmp_path, capsys):
    """The rule of every reproduction (pipeline.up_to_date): complete, every field, the same recorded settings."""
    path = tmp_path / COMMITTED.name
    data = json.loads(COMMITTED.read_text())
    recorded = OPTIMA.recorded("lecture")

    def fresh(settings=None, task=None):
        stage = {**recorded["optima"], **(settings or {}), "task": {**recorded["optima"]["task"], **(task or {})}}
        return {"optima": stage}

    assert up_to_date(COMMITTED, recorded, OPTIMA.fields)
    assert not up_to_date(tmp_path / "missing.json", recorded, OPTIMA.fields)
    assert not up_to_date(COMMITTED, fresh(settings={"replicates": 3}), OPTIMA.fields)
    assert not up_to_date(COMMITTED, fresh(task={"noise_var": 0.25}), OPTIMA.fields)
    path.write_text(json.dumps({key: value for key, value in data.items() if key != "precision"}))
    assert not up_to_date(path, recorded, OPTIMA.fields)
    path.write_text(json.dumps(data)[:100])  # damaged: written again, and said
    assert not up_to_date(path, recorded, OPTIMA.fields)
    assert "writing it again" in capsys.readouterr().out


@pytest.mark.parametrize("options, message", [
    (("--shard", "1/2"), "argument --shard: does not apply to Chapter 8's optima"),
    (("--shards", "2"), "argument --shards: does not apply to Chapter 8's optima"),
    (("--max-minutes", "1"), "argument --max-minutes: does not apply to Chapter 8's optima"),
    (("--seeds", "3"), "seeds, sampler and rng do not apply to Chapter 8's optima"),
    (("--preset", "paper"), "argument --preset: must be one of 'lecture', 'smoke' for Chapter 8's optima"),
])
def test_options_that_do_not_apply_are_refused_before_anything_runs(options, message, run_cli, tmp_path):
    code, _, err = run_cli("reproduce", "nonlinear_optima", *options, "--out", str(tmp_path))
    assert code == 2 and message in err
    code, _, err = run_cli("merge", "nonlinear_optima", "--shards", "2", "--out", str(tmp_path))
    assert code == 2 and "argument --shards: does not apply to Chapter 8's optima" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_the_smoke_preset_writes_its_file_then_is_up_to_date(tmp_path, run_cli):
    code, out, err = run_cli("reproduce", "nonlinear_optima", "--preset", "smoke", "--out", str(tmp_path))
    assert code == 0, err
    path = tmp_path / "nonlinear_optima_smoke.json"
    data = json.loads(path.read_text())
    assert data["provenance"]["command"] == "python -m softmax_as_linear reproduce nonlinear_optima --preset smoke"
    assert data["settings"] == nonlinear_optima.optima_settings("smoke")
    assert data["provenance"]["stages"] == OPTIMA.recorded("smoke")
    stamp = path.stat().st_mtime_ns
    code, out, err = run_cli("reproduce", "nonlinear_optima", "--preset", "smoke", "--out", str(tmp_path))
    assert code == 0 and f"{path}: up to date" in out and path.stat().st_mtime_ns == stamp
