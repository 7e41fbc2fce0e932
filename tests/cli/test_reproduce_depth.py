"""Chapter 7's regression on the command line (``reproduce depth``): its file and provenance, time limit and resume,
shards and merge, with a tiny preset."""
import json

import numpy as np
import pytest

import softmax_as_linear.cli as cli
from softmax_as_linear.experiments import depth_regression, presets, reproduce, result_files

TINY = dict(lengths=(4, 8), steps=12, record_every=4, batch_size=8, held_out_prompts=16, final_prompts=64,
            pgd_samples=200, bayes_samples=100)
RUN = ["reproduce", "depth", "--preset", "smoke", "--device", "cpu"]


@pytest.fixture
def tiny_depth(monkeypatch):
    """The smoke preset of Chapter 7's regression shrunk further (12 steps, lengths 4 and 8)."""
    monkeypatch.setitem(presets.DEPTH_SETTINGS, "smoke", {**presets.DEPTH_SETTINGS["smoke"], **TINY})


def _load(path):
    return json.loads(path.read_text())


def test_depth_stops_at_its_time_limit_resumes_and_is_then_up_to_date(tmp_path, tiny_depth, run_cli, monkeypatch):
    clock = iter([0.0] + [1e9] * 100_000)  # the deadline passes right after the start
    monkeypatch.setattr(reproduce.time, "monotonic", lambda: next(clock))
    code, out, err = run_cli(*RUN, "--out", str(tmp_path), "--max-minutes", "1")
    assert code == cli.EXIT_PARTIAL == 3, err
    partial = _load(tmp_path / "depth_smoke.json")
    assert partial["complete"] is False and partial["stopped_at"] == [4, 12] and partial["stopped_in"] == "the sweep"
    assert (tmp_path / "checkpoints" / "depth_smoke.pt").is_file()
    assert "no chapter reads its files" in err and "SOFTMAX_AS_LINEAR_RESULTS" not in err  # a smoke run
    with pytest.raises(result_files.PartialResultError, match=r"partial \(step 4 of 12\)") as caught:
        result_files.saved_depth("smoke", tmp_path, required=True)
    assert f"reproduce depth --preset smoke --out {tmp_path}\nagain to finish it" in str(caught.value)
    monkeypatch.setattr(reproduce.time, "monotonic", lambda: 0.0)
    code, out, err = run_cli(*RUN, "--out", str(tmp_path))
    assert code == cli.EXIT_COMPLETE, err
    assert "resuming the Chapter 7 regression sweep (smoke preset, seeds 327, 0) from step 4 of 12" in out
    data = _load(tmp_path / "depth_smoke.json")
    assert data["complete"] is True and data["steps"][-1] == 12 and data["run"] == "smoke"
    where = data["provenance"]
    assert where["preset"] == "smoke" and where["settings"]["seeds"] == [327, 0] and where["engine_path"] == "deep"
    assert {"torch", "commit", "uncommitted_changes", "wall_seconds", "device_name", "date"} <= set(where)
    per = data["per_seed"]
    assert per["seeds"] == [327, 0] and set(per["risk"]) == set(depth_regression.MODEL_NAMES)
    assert len(per["risk"]["softmax_2"]) == 2 and len(per["risk"]["softmax_2"][0]) == 2
    warm = data["warm"]
    assert warm["complete"] and len(warm["risk"]) == 2 and set(warm["minus"]) == set(depth_regression.MODEL_NAMES)
    assert {"torch", "commit", "date"} <= set(warm["provenance"])
    control = data["control"]  # the equal-budget control: the same stage from the block-start softmax weights
    assert control["complete"] and control["source"] == "softmax_2" and control["settings"] == warm["settings"]
    assert len(control["risk"]) == 2 and {"torch", "commit", "date"} <= set(control["provenance"])
    refs = data["references"]
    assert len(refs["pgd_2"]) == 2 and refs["noise_floor"] == 0.05
    summary = depth_regression.depth_summary(data)
    assert summary["mean"]["second_layer_linear"].shape == (2,)
    code, out, err = run_cli(*RUN, "--out", str(tmp_path))
    assert code == 0 and "up to date" in out


def test_a_checkpoint_of_other_settings_is_named(tmp_path, tiny_depth, run_cli, monkeypatch):
    clock = iter([0.0] + [1e9] * 100_000)
    monkeypatch.setattr(reproduce.time, "monotonic", lambda: next(clock))
    assert run_cli(*RUN, "--out", str(tmp_path), "--max-minutes", "1")[0] == cli.EXIT_PARTIAL
    monkeypatch.setattr(reproduce.time, "monotonic", lambda: 0.0)
    monkeypatch.setitem(presets.DEPTH_SETTINGS, "smoke", {**presets.DEPTH_SETTINGS["smoke"], "steps": 16})
    code, out, err = run_cli(*RUN, "--out", str(tmp_path))
    assert code == cli.EXIT_ERROR and "was written for other settings" in err and "--restart" in err


@pytest.mark.slow
def test_depth_shards_merge_into_the_file_of_one_process(tiny_depth, one_process_and_two_shards):
    one, joined, shard_errors = one_process_and_two_shards(RUN, "depth_smoke.json")
    assert all("merge depth" in err for err in shard_errors)
    assert joined["per_seed"]["seeds"] == one["per_seed"]["seeds"] == [327, 0]
    for name in depth_regression.MODEL_NAMES:  # every seed trains on its own streams: the same numbers
        assert np.allclose(joined["per_seed"]["risk"][name], one["per_seed"]["risk"][name], rtol=1e-4)
    assert joined["references"] == one["references"]
    assert np.allclose(joined["warm"]["risk"], one["warm"]["risk"], rtol=1e-4)
    assert np.allclose(joined["control"]["risk"], one["control"]["risk"], rtol=1e-4)


def test_a_control_stopped_by_the_time_limit_leaves_the_file_partial(tmp_path, tiny_depth, run_cli, monkeypatch):
    """The deadline passing inside the equal-budget control (the sweep and the warm stage done) writes a partial file
    and exits with the partial code; the same command then finishes the control alone."""
    real = depth_regression.train_warm

    def control_stops(settings, warm, U, v, device="cpu", checkpoint=None, should_stop=None, source="linear_2",
                      **kwargs):
        if source == "softmax_2" and stop_control:
            should_stop = lambda: True  # noqa: E731
        return real(settings, warm, U, v, device, checkpoint, should_stop, source=source, **kwargs)

    monkeypatch.setattr(depth_regression, "train_warm", control_stops)
    stop_control = True
    code, out, err = run_cli(*RUN, "--out", str(tmp_path))
    assert code == cli.EXIT_PARTIAL, err
    data = _load(tmp_path / "depth_smoke.json")
    assert data["stages_complete"] == ["the sweep", "its warm stage"] and data["complete"] is False
    assert data["stopped_in"] == "its equal-budget control"
    with pytest.raises(result_files.PartialResultError):
        result_files.saved_depth("smoke", tmp_path, required=True)
    stop_control = False
    code, out, err = run_cli(*RUN, "--out", str(tmp_path))
    assert code == cli.EXIT_COMPLETE, err
    assert "resuming" in out and "equal-budget control" in out
    data = _load(tmp_path / "depth_smoke.json")
    assert data["control"]["complete"] and data["complete"] is True
