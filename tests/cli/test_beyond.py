"""Chapter 6 on the command line (``reproduce beyond``): its files, their names and provenance, time limit and resume,
shards and merge, with a tiny preset."""
import json

import pytest

import softmax_as_linear.cli as cli
from softmax_as_linear.experiments import presets, reproduce

TINY = dict(lengths=(5, 20), seeds=(327, 0), steps=20, record_every=10, eval_prompts=32, batch_size=16)
RUN = ["reproduce", "beyond", "--preset", "smoke", "--covariates", "uniform", "--device", "cpu"]


@pytest.fixture
def tiny_beyond(monkeypatch):
    """The smoke preset of Chapter 6 shrunk further (20 steps, lengths 5 and 20, two seeds)."""
    real = presets.beyond_config

    def config(preset, covariates="uniform", **overrides):
        return real(preset, covariates, **{**TINY, **overrides})
    monkeypatch.setattr(presets, "beyond_config", config)
    monkeypatch.setitem(presets.BEYOND_FINAL_PROMPTS, "smoke", 200)
    monkeypatch.setitem(presets.BEYOND_LIMIT_SAMPLES, "smoke", 1 << 10)


def _load(path):
    return json.loads(path.read_text())


def test_beyond_writes_its_file_with_provenance_and_reuses_its_sweep(tmp_path, tiny_beyond, run_cli):
    code, out, err = run_cli(*RUN, "--out", str(tmp_path))
    assert code == cli.EXIT_COMPLETE, err
    data = _load(tmp_path / "beyond_uniform_smoke.json")
    assert data["complete"] and data["covariates"] == "uniform" and data["run"] == "smoke"
    where = data["provenance"]
    assert where["preset"] == "smoke" and where["overrides"] == {} and where["settings"]["seeds"] == [327, 0]
    assert where["settings"]["covariates"] == "uniform" and "engine_path" in where and "uncommitted_changes" in where
    assert (tmp_path / "sweep_beyond_uniform_smoke.npz").is_file()
    assert (tmp_path / "checkpoints" / "sweep_beyond_uniform_smoke.pt").is_file()
    assert not (tmp_path / "beyond_rademacher_smoke.json").exists()  # --covariates uniform only
    code, out, err = run_cli(*RUN, "--out", str(tmp_path))
    assert code == 0 and "up to date" in out


def test_other_seeds_or_lengths_never_take_the_presets_name(tmp_path, tiny_beyond, run_cli):
    code, out, err = run_cli(*RUN, "--seeds", "1", "--lengths", "5", "10", "--out", str(tmp_path))
    assert code == 0, err
    assert not (tmp_path / "beyond_uniform_smoke.json").exists()
    data = _load(tmp_path / "beyond_uniform_smoke_1seeds_L5-10.json")
    assert data["run"] == "smoke_1seeds_L5-10" and data["provenance"]["preset"] == "smoke"
    assert data["provenance"]["overrides"] == {"seeds": 1, "lengths": [5, 10]}
    assert data["provenance"]["settings"]["lengths"] == [5, 10] and data["final"]["seeds"] == [327]


def _stopped_by_the_time_limit(out, run, patch):
    clock = iter([0.0] + [1e9] * 10_000)  # the deadline passes right after the start
    patch.setattr(reproduce.time, "monotonic", lambda: next(clock))
    return run(*RUN, "--out", str(out), "--max-minutes", "1")


@pytest.fixture
def stopped_by_the_time_limit(tmp_path, tiny_beyond, shared_run):
    """The tiny run stopped by its time limit right after its start (run once), copied into ``tmp_path``; returns
    what the command returned."""
    return shared_run("beyond stopped by its time limit", _stopped_by_the_time_limit, tmp_path)


def test_beyond_stops_at_its_time_limit_and_resumes(tmp_path, stopped_by_the_time_limit, run_cli, monkeypatch):
    code, out, err = stopped_by_the_time_limit
    assert code == cli.EXIT_PARTIAL == 3
    assert _load(tmp_path / "beyond_uniform_smoke.json")["complete"] is False
    monkeypatch.setattr(reproduce.time, "monotonic", lambda: 0.0)
    code, out, err = run_cli(*RUN, "--out", str(tmp_path))
    assert code == 0, err
    assert "resuming the Chapter 6 uniform sweep (smoke preset, seeds 327, 0) from step 10 of 20" in out
    assert _load(tmp_path / "beyond_uniform_smoke.json")["complete"] is True


def test_a_checkpoint_of_other_settings_is_named_not_called_damaged(tmp_path, stopped_by_the_time_limit, run_cli,
                                                                   monkeypatch):
    assert stopped_by_the_time_limit[0] == cli.EXIT_PARTIAL
    monkeypatch.setattr(reproduce.time, "monotonic", lambda: 0.0)
    checkpoint = tmp_path / "checkpoints" / "sweep_beyond_uniform_smoke.pt"
    # the same file name, other settings: the sweep was started with other seeds (as by an older version)
    monkeypatch.setitem(TINY, "seeds", (327, 0, 1))
    code, out, err = run_cli(*RUN, "--out", str(tmp_path))
    assert code == cli.EXIT_ERROR
    assert f"checkpoint {checkpoint} was written for other settings" in err and "damaged" not in err
    assert "restart=True" not in err and "--restart" in err


@pytest.mark.slow
def test_beyond_shards_merge_into_the_file_of_one_process(tiny_beyond, one_process_and_two_shards):
    one, joined, shard_errors = one_process_and_two_shards(RUN, "beyond_uniform_smoke.json")
    assert all("merge beyond" in err and "note: the chapters read" not in err for err in shard_errors)
    assert json.dumps(joined, sort_keys=True) == json.dumps(one, sort_keys=True)


def test_merge_with_other_settings_than_the_shards_says_so(tmp_path, tiny_beyond, run_cli):
    for k in (1, 2):
        assert run_cli(*RUN, "--shard", f"{k}/2", "--out", str(tmp_path))[0] == 0
    code, out, err = run_cli("merge", *RUN[1:], "--seeds", "3", "--shards", "2", "--out", str(tmp_path))
    assert code == cli.EXIT_ERROR and "it holds sweep_beyond_uniform_smoke" in err and "other --seeds" in err
    # the figures' sweeps keep their names whatever the seeds: the settings are compared
    smoke = ["fig2", "--preset", "smoke", "--device", "cpu", "--seeds", "2"]
    for k in (1, 2):
        assert run_cli("reproduce", *smoke, "--shard", f"{k}/2", "--out", str(tmp_path))[0] == 0
    code, out, err = run_cli("merge", *smoke[:-1], "3", "--shards", "2", "--out", str(tmp_path))
    assert code == cli.EXIT_ERROR
    assert "the settings of this merge differ from those the shards were trained with" in err
    assert "seeds [327] (this merge: [327, 0])" in err and "damaged" not in err and "restart=True" not in err
