"""The refusal of a partial file names the stage that stopped: a reproduction stopped in a later stage (the window's
dependence of Chapter 8, the control of Chapter 7) is not "step 12 of 12" of its finished first stage."""
import pytest

import softmax_as_linear.cli as cli
from softmax_as_linear.experiments import pipeline, presets, result_files


def test_a_log_window_file_stopped_in_its_dependence_names_it(tmp_path, run_cli, monkeypatch):
    monkeypatch.setattr(presets, "NONLINEAR_DEPENDENCE", presets.NONLINEAR_DEPENDENCE[:2])
    real = pipeline.train_stage

    def stop_in_the_dependence(what, checkpoint, key, steps, train, device, deadline=None, restart=False):
        return real(what, checkpoint, key, steps, train, device, 0.0 if "dependence" in what else deadline, restart)

    monkeypatch.setattr(pipeline, "train_stage", stop_in_the_dependence)
    code, out, err = run_cli("reproduce", "nonlinear_window", "--preset", "smoke", "--device", "cpu", "--out",
                             str(tmp_path), "--max-minutes", "10")
    assert code == cli.EXIT_PARTIAL, err
    with pytest.raises(result_files.PartialResultError) as caught:
        result_files.saved_nonlinear_window("smoke", folder=tmp_path, required=True)
    message = str(caught.value)
    assert "step 12 of 12" not in message and "dependence 0" in message and "the sweep complete" in message
    assert "step 4 of 8" in message  # how far the stage that stopped went (its first checkpoint)


@pytest.mark.parametrize("data, expected", [
    ({"experiment": "depth", "complete": False, "stages_complete": ["the sweep", "its warm stage"],
      "stopped_in": "its equal-budget control", "stopped_at": [4, 8]},
     "the sweep, its warm stage complete, stopped in its equal-budget control at step 4 of 8"),
    ({"complete": False, "stages_complete": ["the sweep"], "stopped_in": "dependence 2", "stopped_at": [0, 8]},
     "the sweep complete, stopped in dependence 2 at step 0 of 8"),
    ({"complete": False, "stages_complete": [], "stopped_in": "the sweep", "stopped_at": [3, 12]}, "step 3 of 12"),
    ({"complete": False, "steps": [0, 4], "provenance": {"settings": {"steps": 12}}}, "step 4 of 12"),
])
def test_progress_names_the_stage_that_stopped(data, expected):
    assert result_files.progress(data) == expected
