"""``--restart`` with a time limit: the command printed to resume resumes (it does not restart again), and a restart
stopped in an early stage leaves no old checkpoint of a later stage to be resumed as finished."""
import json
import shlex
import time

import pytest

import softmax_as_linear.cli as cli
from softmax_as_linear.experiments import presets


@pytest.fixture
def tiny_window(monkeypatch):
    """Chapter 8's log-window runs of the smoke preset with two settings of the dependence."""
    monkeypatch.setattr(presets, "NONLINEAR_DEPENDENCE", presets.NONLINEAR_DEPENDENCE[:2])


def _stop_early(monkeypatch):
    """The deadline passes right after the start (the clock jumps ahead)."""
    clock = iter([0.0] + [1e9] * 100_000)
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))


def _resume_command(err: str) -> list[str]:
    """The command the partial message names, as arguments of ``python -m softmax_as_linear``."""
    line = next(line for line in err.splitlines() if line.strip().startswith("python -m softmax_as_linear "))
    return shlex.split(line.strip())[3:]


def test_the_resume_advice_drops_restart():
    assert cli.resume_advice(["reproduce", "fig2", "--max-minutes", "1"]) == "run the same command again"
    for flag in ("--restart", "--resta"):  # argparse's prefixes too
        advice = cli.resume_advice(["reproduce", "fig2", flag, "--out", "a b"])
        assert "--rest" not in advice.replace("without --restart", "")
        assert "python -m softmax_as_linear reproduce fig2 --out 'a b'" in advice


@pytest.mark.slow
def test_a_restart_stopped_by_the_time_limit_names_a_command_that_resumes(tiny_window, tmp_path, run_cli,
                                                                         monkeypatch):
    run = ["reproduce", "nonlinear_window", "--preset", "smoke", "--device", "cpu", "--out", str(tmp_path)]
    _stop_early(monkeypatch)
    code, out, err = run_cli(*run, "--restart", "--max-minutes", "1")
    assert code == cli.EXIT_PARTIAL, err
    assert "without --restart" in err and "run the same command again" not in err
    resume = _resume_command(err)
    assert "--restart" not in resume and resume == [*run, "--max-minutes", "1"]
    monkeypatch.setattr(time, "monotonic", lambda: 0.0)
    code, out, err = run_cli(*resume)
    assert code == cli.EXIT_COMPLETE, err
    assert "resuming Chapter 8's log-window sweep" in out and "from step 4 of 12" in out


def test_the_plain_partial_message_keeps_the_same_command(tiny_window, tmp_path, run_cli, monkeypatch):
    _stop_early(monkeypatch)
    code, out, err = run_cli("reproduce", "nonlinear_window", "--preset", "smoke", "--device", "cpu", "--out",
                             str(tmp_path), "--max-minutes", "1")
    assert code == cli.EXIT_PARTIAL and "run the same command again to resume" in err


@pytest.mark.parametrize("name", ["nonlinear_window", pytest.param("nonlinear", marks=pytest.mark.slow)])
def test_a_restart_stopped_early_leaves_no_checkpoint_of_a_later_stage(name, tiny_window, tmp_path, run_cli,
                                                                       monkeypatch, shared_run):
    """A finished run, then ``--restart`` stopped in its first stage: the later stages' old (finished) checkpoints
    are gone, so the next run trains them from step 0 instead of resuming them as finished."""
    if name == "nonlinear":
        monkeypatch.setitem(presets.NONLINEAR_SETTINGS, "smoke", {**presets.NONLINEAR_SETTINGS["smoke"], "steps": 8,
                                                                 "record_every": 4, "eval_prompts": 16})
        monkeypatch.setitem(presets.NONLINEAR_FINAL_PROMPTS, "smoke", 64)
        monkeypatch.setitem(presets.NONLINEAR_REFERENCE_PROMPTS, "smoke", 32)
    run = ["reproduce", name, "--preset", "smoke", "--device", "cpu", "--out", str(tmp_path)]
    finished = shared_run(f"reproduce {name} --preset smoke: two settings of the dependence"
                          + (", 8 steps" if name == "nonlinear" else ""),
                          lambda out, run_command, patch: run_command(*run[:-1], str(out))[0], tmp_path)
    assert finished == cli.EXIT_COMPLETE
    later = sorted((tmp_path / "checkpoints").glob(f"{name}_smoke_dependence*.pt"))
    assert len(later) == 2
    with monkeypatch.context() as patch:
        _stop_early(patch)
        assert run_cli(*run, "--restart", "--max-minutes", "1")[0] == cli.EXIT_PARTIAL
    assert not any(path.exists() for path in later)
    code, out, err = run_cli(*run)
    assert code == cli.EXIT_COMPLETE, err
    assert "dependence" in out and not any("resuming" in line and "dependence" in line for line in out.splitlines())
    assert json.loads((tmp_path / f"{name}_smoke.json").read_text())["complete"] is True


def test_launched_shards_stopped_after_a_restart_name_the_command_without_it(tiny_window, tmp_path, run_cli,
                                                                            monkeypatch):
    """``--shards N --restart --max-minutes M``: the shards stop at the time limit, and the message says to run the
    same command without --restart (with it, every shard would start from step 0 again)."""
    import sys
    import types

    class Job:
        def __init__(self, result):
            self.job_id, self._result = "local", result
            self.paths = types.SimpleNamespace(stdout="out.log", stderr="err.log")

        def result(self):
            return self._result

    class Executor:  # submitit's interface, the shards run in this process
        def __init__(self, folder, cluster):
            pass

        def update_parameters(self, **kw):
            pass

        def batch(self):
            import contextlib

            return contextlib.nullcontext()

        def submit(self, function, *args):
            return Job(function(*args))

    import importlib.machinery

    fake = types.ModuleType("submitit")
    fake.AutoExecutor, fake.__spec__ = Executor, importlib.machinery.ModuleSpec("submitit", None)
    monkeypatch.setitem(sys.modules, "submitit", fake)
    _stop_early(monkeypatch)
    code, out, err = run_cli("reproduce", "nonlinear_window", "--preset", "smoke", "--device", "cpu", "--out",
                             str(tmp_path), "--shards", "2", "--restart", "--max-minutes", "1")
    assert code == cli.EXIT_PARTIAL, err
    assert "stopped at the time limit; run the same command again without --restart to resume them" in err
