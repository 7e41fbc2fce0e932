"""`make test` runs every stage even after one failed, ends with a table of results and wall times, and ends the
running stages when it is interrupted."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAKEFILE = """\
setup:
\t@echo set up
good:
\t@echo good ran >> {log}
bad:
\t@echo bad ran >> {log}; exit 3
other:
\t@echo other ran >> {log}
slow:
\t@sleep 0.2; echo slow ran >> {log}
slowbad:
\t@sleep 0.2; echo slowbad ran >> {log}; exit 4
late:
\t@for i in $$(seq 600); do grep -q other {log} 2>/dev/null && break; sleep 0.05; done; echo late ran >> {log}
latebad:
\t@for i in $$(seq 600); do grep -q good {log} 2>/dev/null && break; sleep 0.05; done; echo latebad ran >> {log}; exit 4
"""
# late and latebad end only once the stage they wait for has run (30 s at most), whatever the load of the machine:
# a stage started with & that did wait for the next stages before they started would never see them.


def _runner(tmp_path, *args) -> list:
    """The runner's command line with the Makefile in ``tmp_path``. It looks at its stages every 0.02 s: the default,
    0.2 s, would add up to that much to every group and every stage collected."""
    return [sys.executable, ROOT / "tools" / "run_stages.py", "--poll", "0.02", "--make",
            f"make -s -f {tmp_path}/Makefile", *args]


def _run(tmp_path, *stages):
    log = tmp_path / "ran.txt"
    (tmp_path / "Makefile").write_text(MAKEFILE.format(log=log))
    report = tmp_path / "stages.txt"
    done = subprocess.run(_runner(tmp_path, "--report", report, *stages), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    ran = log.read_text().split() if log.exists() else []
    return done, ran, report.read_text()


def _row(table: str, stage: str) -> list[str]:
    """The result and wall time of a stage in the table."""
    return next(line.split()[1:] for line in table.splitlines() if line.split()[:1] == [stage])


def test_every_stage_runs_after_a_failure_and_the_table_says_which_failed(tmp_path):
    done, ran, table = _run(tmp_path, "setup", "good", "bad", "slow+other")
    assert done.returncode == 1, done.stdout + done.stderr
    assert ran[::2][:2] == ["good", "bad"] and sorted(ran[::2][2:]) == ["other", "slow"]  # in order, then side by side
    assert _row(table, "bad")[0] == "FAILED" and _row(table, "slow")[0] == "passed"
    assert _row(table, "total")[0].count(":") == 1 and table in done.stdout  # the same table is printed at the end


def test_all_stages_passing_exit_zero(tmp_path):
    done, ran, table = _run(tmp_path, "setup", "good+slow")
    assert done.returncode == 0 and [_row(table, s)[0] for s in ("setup", "good", "slow")] == ["passed"] * 3


def test_a_failed_setup_leaves_the_other_stages_not_run(tmp_path):
    done, ran, table = _run(tmp_path, "bad", "good")
    assert done.returncode == 1 and _row(table, "good")[0] == "passed"  # an ordinary failure: the next runs
    (tmp_path / "ran.txt").unlink()
    (tmp_path / "Makefile").write_text("setup:\n\texit 2\n")
    done = subprocess.run(_runner(tmp_path, "--report", tmp_path / "t.txt", "setup", "good"), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=60)
    table = (tmp_path / "t.txt").read_text()
    assert done.returncode == 1 and _row(table, "good")[:2] == ["not", "run"]
    # a stage started beside the set-up (as `make test` starts pip-path, which needs only the system's Python) ends
    (tmp_path / "Makefile").write_text("setup:\n\texit 2\nbeside:\n\tsleep 0.2\ngood:\n")
    done = subprocess.run(_runner(tmp_path, "--report", tmp_path / "t.txt", "beside&", "setup", "good"),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    table = (tmp_path / "t.txt").read_text()
    assert done.returncode == 1 and _row(table, "beside")[0] == "passed" and _row(table, "good")[:2] == ["not", "run"]


def test_a_stage_started_with_ampersand_runs_beside_the_next_stages(tmp_path):
    done, ran, table = _run(tmp_path, "setup", "late&", "good", "other")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran[::2] == ["good", "other", "late"]  # good and other did not wait for late
    assert [_row(table, s)[0] for s in ("late", "good", "other")] == ["passed"] * 3
    assert "--- late (ran beside the stages after it) ---" in done.stdout
    assert table.splitlines()[2].split()[0] == "setup" and table.splitlines()[3].split()[0] == "late"


def test_a_stage_beside_the_others_is_timed_to_its_own_end(tmp_path):
    """A stage started with & that ends long before the group that collects it is timed to its own end, not to the
    end of that group (quick& takes no time; long, beside it, 2 s: quick timed to the group's end would read 0:02)."""
    (tmp_path / "Makefile").write_text("quick:\n\t@true\nlong:\n\t@sleep 2\n")
    done = subprocess.run(_runner(tmp_path, "--report", tmp_path / "t.txt", "quick&", "long"), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=60)
    table = (tmp_path / "t.txt").read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    assert _row(table, "long")[1] in ("0:02", "0:03") and _row(table, "quick")[1] in ("0:00", "0:01"), table


def test_a_failed_stage_beside_the_others_fails_the_run(tmp_path):
    done, ran, table = _run(tmp_path, "setup", "latebad&", "good")
    assert done.returncode == 1 and ran[::2] == ["good", "latebad"]
    assert _row(table, "latebad")[0] == "FAILED" and _row(table, "good")[0] == "passed"


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie, ended but not yet reaped by whoever adopted it, does not)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_runner_ends_the_running_stages_and_the_table_says_so(tmp_path, signum, code):
    """SIGTERM (a CI cancel) or SIGINT sent to the runner alone: the stages running beside it and in its group, and
    what they started, end too; the table marks them interrupted and the stages after them not run."""
    (tmp_path / "Makefile").write_text("".join(
        f"{stage}:\n\t@echo $$$$ > {tmp_path}/{stage}.pid.tmp; mv {tmp_path}/{stage}.pid.tmp {tmp_path}/{stage}.pid; "
        "exec sleep 60\n"
        for stage in ("beside", "sleepy")) + f"after:\n\t@echo after ran > {tmp_path}/after.txt\n")
    runner = subprocess.Popen(_runner(tmp_path, "--report", tmp_path / "t.txt", "beside&", "sleepy", "after"),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid_files = [tmp_path / "beside.pid", tmp_path / "sleepy.pid"]
    deadline = time.monotonic() + 30
    while not all(f.exists() for f in pid_files):
        assert time.monotonic() < deadline and runner.poll() is None, "the stages did not start"
        time.sleep(0.05)
    pids = [int(f.read_text()) for f in pid_files]  # each stage's shell, then the sleep it became
    began = time.monotonic()
    runner.send_signal(signum)
    output, _ = runner.communicate(timeout=30)
    assert runner.returncode == code, output
    assert time.monotonic() - began < 15  # the stages ended on the signal, not at the end of their minute
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if _alive(pid)], "a stage's process outlived the runner"
    table = (tmp_path / "t.txt").read_text()
    assert _row(table, "beside")[0] == _row(table, "sleepy")[0] == "interrupted"
    assert _row(table, "after")[:2] == ["not", "run"] and not (tmp_path / "after.txt").exists()
    assert f"{signal.Signals(signum).name} received" in output and table in output
