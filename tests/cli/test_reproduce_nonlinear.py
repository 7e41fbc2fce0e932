"""Chapter 8's sweeps on the command line split into shards (``reproduce nonlinear --shard K/N`` and
``reproduce nonlinear_depth --shard K/N``, then ``merge``): the merged file is the file of one process, number for
number, provenance aside."""
import json

import numpy as np
import pytest

import softmax_as_linear.cli as cli
from softmax_as_linear.experiments import presets

RUN = ["reproduce", "nonlinear", "--preset", "smoke", "--device", "cpu"]


@pytest.fixture
def tiny_nonlinear(monkeypatch):
    """The smoke preset shrunk further: 8 steps, fewer prompts, two settings of the window's dependence."""
    monkeypatch.setitem(presets.NONLINEAR_SETTINGS, "smoke", {**presets.NONLINEAR_SETTINGS["smoke"], "steps": 8,
                                                             "record_every": 4, "eval_prompts": 16})
    monkeypatch.setitem(presets.NONLINEAR_FINAL_PROMPTS, "smoke", 64)
    monkeypatch.setitem(presets.NONLINEAR_REFERENCE_PROMPTS, "smoke", 32)
    monkeypatch.setattr(presets, "NONLINEAR_DEPENDENCE", presets.NONLINEAR_DEPENDENCE[:2])


@pytest.mark.slow
def test_nonlinear_shards_merge_into_the_file_of_one_process(tiny_nonlinear, one_process_and_two_shards, tmp_path):
    one, joined, shard_errors = one_process_and_two_shards(RUN, "nonlinear_smoke.json")
    assert all("merge nonlinear --preset smoke --shards 2" in err for err in shard_errors)
    # every seed trains, and is measured, on its own streams: the same numbers (NaN included), bit for bit on a CPU;
    # the references, computed once by each, to their last bit: the best affine risk (a least-squares solve by MKL)
    # was seen to change in its last bit with what had run before in the process (under xdist, about one run in two)
    one_refs, joined_refs = one.pop("references"), joined.pop("references")
    assert json.dumps(joined, sort_keys=True) == json.dumps(one, sort_keys=True)
    assert one_refs.keys() == joined_refs.keys()
    for key, value in one_refs.items():
        assert joined_refs[key] == pytest.approx(value, rel=1e-12, abs=1e-15, nan_ok=True), key
    assert joined["config"]["seeds"] == [0, 1] and len(joined["final"]["risk"]) == 2
    assert len(joined["windows"]["exponent"]["per_seed"]) == 2  # fitted over every seed, after the merge
    shard = json.loads((tmp_path / "sharded" / "shards" / "2-of-2" / "nonlinear_smoke.json").read_text())
    assert shard["provenance"]["shard"] == "2/2" and shard["config"]["seeds"] == [1] and shard["references"] is None
    merged = json.loads((tmp_path / "sharded" / "nonlinear_smoke.json").read_text())["provenance"]
    assert [s["seeds"] for s in merged["shards"]] == [[0], [1]] and merged["seeds"] == [0, 1]
    assert {"device", "torch", "commit", "wall_seconds", "merged"} <= set(merged)


def test_merge_refuses_a_shard_of_other_settings(tiny_nonlinear, tmp_path, run_cli, monkeypatch):
    for k in (1, 2):
        assert run_cli(*RUN, "--shard", f"{k}/2", "--out", str(tmp_path))[0] == 0
    monkeypatch.setitem(presets.NONLINEAR_SETTINGS, "smoke", {**presets.NONLINEAR_SETTINGS["smoke"], "steps": 12})
    code, out, err = run_cli("merge", *RUN[1:], "--shards", "2", "--out", str(tmp_path))
    assert code == cli.EXIT_ERROR and "shard 1/2" in err and "steps" in err
    assert not (tmp_path / "nonlinear_smoke.json").exists()


def test_too_many_shards_are_named(run_cli):
    code, out, err = run_cli(*RUN, "--shard", "1/3")
    assert code == 2 and "3 shards" in err and "use 2 shards or fewer" in err and "--seeds" not in err


@pytest.mark.slow
def test_nonlinear_depth_shards_merge_into_the_file_of_one_process(one_process_and_two_shards, tmp_path, run_cli,
                                                                    monkeypatch):
    run = ["reproduce", "nonlinear_depth", "--preset", "smoke", "--device", "cpu"]
    one, joined, shard_errors = one_process_and_two_shards(run, "nonlinear_depth_smoke.json")
    assert all("merge nonlinear_depth --preset smoke --shards 2" in err for err in shard_errors)
    assert json.dumps(joined, sort_keys=True) == json.dumps(one, sort_keys=True)  # bit for bit on a CPU
    assert joined["per_seed"]["seeds"] == [0, 1]
    shard = json.loads((tmp_path / "sharded" / "shards" / "2-of-2" / "nonlinear_depth_smoke.json").read_text())
    assert shard["per_seed"]["seeds"] == [1] and shard["provenance"]["shard"] == "2/2"
    merged = json.loads((tmp_path / "sharded" / "nonlinear_depth_smoke.json").read_text())["provenance"]
    assert [s["seeds"] for s in merged["shards"]] == [[0], [1]] and merged["seeds"] == [0, 1]
    assert {"device", "torch", "commit", "wall_seconds", "merged", "settings"} <= set(merged)
    # a shard of other settings is named, and nothing is written
    (tmp_path / "sharded" / "nonlinear_depth_smoke.json").unlink()
    monkeypatch.setitem(presets.NONLINEAR_DEPTH_SETTINGS, "smoke", {**presets.NONLINEAR_DEPTH_SETTINGS["smoke"],
                                                                    "steps": 16})
    code, out, err = run_cli("merge", *run[1:], "--shards", "2", "--out", str(tmp_path / "sharded"))
    assert code == cli.EXIT_ERROR and "shard 1/2" in err and "steps" in err
    assert not (tmp_path / "sharded" / "nonlinear_depth_smoke.json").exists()


@pytest.mark.slow
def test_nonlinear_window_shards_merge_into_the_file_of_one_process(one_process_and_two_shards, tmp_path):
    run = ["reproduce", "nonlinear_window", "--preset", "smoke", "--device", "cpu"]
    one, joined, shard_errors = one_process_and_two_shards(run, "nonlinear_window_smoke.json")
    assert all("merge nonlinear_window --preset smoke --shards 2" in err for err in shard_errors)
    assert json.dumps(joined, sort_keys=True) == json.dumps(one, sort_keys=True)  # bit for bit on a CPU
    assert joined["per_seed"]["seeds"] == [0, 1] and len(joined["per_seed"]["dependence"]["w"]) == 2
    merged = json.loads((tmp_path / "sharded" / "nonlinear_window_smoke.json").read_text())["provenance"]
    assert [s["seeds"] for s in merged["shards"]] == [[0], [1]]
    # the merged provenance records the shards' settings of every stage (their seeds joined), as the data holds them
    shard = json.loads((tmp_path / "sharded" / "shards" / "1-of-2" / "nonlinear_window_smoke.json").read_text())
    assert [{**s, "seeds": None} for s in merged["stages"].values()] == \
        [{**s, "seeds": None} for s in shard["provenance"]["stages"].values()]
    assert len(merged["stages"]) - 1 == len(joined["dependence"]["settings"]) == \
        np.asarray(joined["per_seed"]["dependence"]["w"]).shape[1]


def _stop_early(monkeypatch):
    """The deadline passes right after the start (the clock jumps ahead)."""
    import time

    clock = iter([0.0] + [1e9] * 100_000)
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))


@pytest.mark.parametrize("name", ["nonlinear", "nonlinear_depth", "nonlinear_window"])
def test_a_checkpoint_of_other_settings_or_a_damaged_one_is_named(name, tiny_nonlinear, tmp_path, run_cli,
                                                                   monkeypatch, shared_run):
    """Chapter 8's sweeps map a checkpoint of other settings, and a damaged one, to the documented messages and exit
    code 1, as the other reproductions do: no traceback."""
    run = ["reproduce", name, "--preset", "smoke", "--device", "cpu", "--out", str(tmp_path)]
    code, out, err = _stopped_and_resumed(name, shared_run, tmp_path)["resumed"]  # a finished run's files
    assert code == cli.EXIT_COMPLETE, err
    table = {"nonlinear": presets.NONLINEAR_SETTINGS, "nonlinear_depth": presets.NONLINEAR_DEPTH_SETTINGS,
             "nonlinear_window": presets.NONLINEAR_WINDOW_SETTINGS}[name]
    monkeypatch.setitem(table, "smoke", {**table["smoke"], "steps": 16})
    code, out, err = run_cli(*run)
    assert code == cli.EXIT_ERROR, err
    assert "was written for other settings" in err and "run the command that started it again" in err
    assert "--restart" in err and "Traceback" not in err
    checkpoint = tmp_path / "checkpoints" / f"{name}_smoke.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    code, out, err = run_cli(*run)
    assert code == cli.EXIT_ERROR, err
    assert str(checkpoint) in err and "delete it to train" in err and "from step 0" in err and "Traceback" not in err


def _stopped_and_resumed(name: str, shared_run, tmp_path) -> dict:
    """``reproduce <name>`` (the tiny settings) stopped by ``--max-minutes`` inside training, then run again: what each
    command returned and printed, and the file between the two; run once in a session, its files copied into
    ``tmp_path``."""
    import time

    def make(folder, run_command, patch):
        run = ["reproduce", name, "--preset", "smoke", "--device", "cpu", "--out", str(folder)]
        _stop_early(patch)
        stopped = run_command(*run, "--max-minutes", "1")
        partial = json.loads((folder / f"{name}_smoke.json").read_text()) if stopped[0] == cli.EXIT_PARTIAL else None
        patch.setattr(time, "monotonic", lambda: 0.0)
        return {"stopped": stopped, "partial": partial, "resumed": run_command(*run)}

    return shared_run(f"{name}: tiny_nonlinear, stopped by the time limit and resumed", make, tmp_path)


@pytest.mark.parametrize("name", ["nonlinear", "nonlinear_depth", "nonlinear_window"])
def test_the_time_limit_stops_before_anything_is_measured_and_the_rerun_resumes(name, tiny_nonlinear, tmp_path,
                                                                                shared_run):
    """``--max-minutes`` passed inside training: the file is partial, nothing is measured or printed as final (no
    window, no final risk); the same command then says it resumes, and finishes."""
    runs = _stopped_and_resumed(name, shared_run, tmp_path)
    code, out, err = runs["stopped"]
    assert code == cli.EXIT_PARTIAL, err
    data = runs["partial"]
    assert data["complete"] is False and "final" not in data and "per_seed" not in data and "window at" not in out
    assert "provenance" in data
    reached, steps = data["stopped_at"]
    assert 0 < reached < steps and f"stopped at the time limit in {data['stopped_in']} at step {reached:,} of " \
        f"{steps:,} (partial)" in out  # the step the stage stopped at, not its last
    code, out, err = runs["resumed"]
    assert code == cli.EXIT_COMPLETE, err
    assert "resuming Chapter 8's" in out and "from step 4 of" in out
    assert json.loads((tmp_path / f"{name}_smoke.json").read_text())["complete"] is True


def test_a_library_changed_while_shards_trained_is_named_with_the_merge_to_run(tmp_path, run_cli, monkeypatch):
    """The launch checks the library before training and the merge after it; a change in between ends in the
    documented message and exit code 1 with the merge command to run once it is committed, not a traceback."""
    from softmax_as_linear.experiments import reproduce as reproduce_module

    def changed(allow_dirty=False):
        raise reproduce_module.UncommittedChangesError("the library has uncommitted changes (x.py)")

    import softmax_as_linear.experiments.shards as shards

    monkeypatch.setattr(shards, "check_clean", changed)  # clean when the command starts, changed at the merge
    code, out, err = run_cli("merge", "nonlinear_window", "--preset", "smoke", "--shards", "2", "--out",
                             str(tmp_path), "--allow-dirty")
    assert code == cli.EXIT_ERROR and "Traceback" not in err
    assert "python -m softmax_as_linear merge nonlinear_window --preset smoke --shards 2 --out" in err


def test_a_diverged_log_window_run_reads_nan_in_every_reading(tmp_path, run_cli, monkeypatch):
    """A log-window run that diverges mid-run (an Adam step far too large) is NaN in every reading of the file: its
    window, held-out risk, final weights, and its final risk and standard error (not the blown-up risk of the weights
    it stopped at); a run that did not diverge stays finite."""
    import numpy as np

    monkeypatch.setitem(presets.NONLINEAR_WINDOW_SETTINGS, "smoke", {**presets.NONLINEAR_WINDOW_SETTINGS["smoke"],
                                                                     "lr": 30.0})
    monkeypatch.setattr(presets, "NONLINEAR_DEPENDENCE", presets.NONLINEAR_DEPENDENCE[:2])
    run = ["reproduce", "nonlinear_window", "--preset", "smoke", "--device", "cpu", "--out", str(tmp_path)]
    assert run_cli(*run)[0] == cli.EXIT_COMPLETE
    per = json.loads((tmp_path / "nonlinear_window_smoke.json").read_text())["per_seed"]
    for readings in (per, per["dependence"]):
        diverged = np.asarray(readings["diverged_at"]) >= 0
        assert diverged.any() and (np.asarray(readings["diverged_at"])[diverged] > 0).all()  # mid-run, not at step 0
        for key in ("risk", "risk_se"):
            values = np.asarray(readings[key], dtype=float)
            assert np.isnan(values[diverged]).all(), key
            assert np.isfinite(values[~diverged]).all(), key
        assert np.isnan(np.asarray(readings["theta"], dtype=float)[diverged]).all()
        assert np.isnan(np.asarray(readings["held_out"], dtype=float)[diverged][:, -1]).all()
