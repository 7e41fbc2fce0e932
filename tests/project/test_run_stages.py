"""`make test` runs every stage even after one failed, and ends with a table of results and wall times."""
import pathlib
import subprocess
import sys

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
\t@sleep 0.5; echo slow ran >> {log}
slowbad:
\t@sleep 0.5; echo slowbad ran >> {log}; exit 4
late:
\t@for i in $$(seq 600); do grep -q other {log} 2>/dev/null && break; sleep 0.05; done; echo late ran >> {log}
latebad:
\t@for i in $$(seq 600); do grep -q good {log} 2>/dev/null && break; sleep 0.05; done; echo latebad ran >> {log}; exit 4
"""
# late and latebad end only once the stage they wait for has run (30 s at most), whatever the load of the machine:
# a stage started with & that did wait for the next stages before they started would never see them.


def _run(tmp_path, *stages):
    log = tmp_path / "ran.txt"
    (tmp_path / "Makefile").write_text(MAKEFILE.format(log=log))
    report = tmp_path / "stages.txt"
    done = subprocess.run([sys.executable, ROOT / "tools" / "run_stages.py", "--make", f"make -s -f {tmp_path}/Makefile",
                           "--report", report, *stages], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60)
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
    done = subprocess.run([sys.executable, ROOT / "tools" / "run_stages.py", "--make",
                           f"make -s -f {tmp_path}/Makefile", "--report", tmp_path / "t.txt", "setup", "good"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    table = (tmp_path / "t.txt").read_text()
    assert done.returncode == 1 and _row(table, "good")[:2] == ["not", "run"]
    # a stage started beside the set-up (as `make test` starts pip-path, which needs only the system's Python) ends
    (tmp_path / "Makefile").write_text("setup:\n\texit 2\nbeside:\n\tsleep 0.5\ngood:\n")
    done = subprocess.run([sys.executable, ROOT / "tools" / "run_stages.py", "--make",
                           f"make -s -f {tmp_path}/Makefile", "--report", tmp_path / "t.txt", "beside&", "setup", "good"],
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


def test_a_failed_stage_beside_the_others_fails_the_run(tmp_path):
    done, ran, table = _run(tmp_path, "setup", "latebad&", "good")
    assert done.returncode == 1 and ran[::2] == ["good", "latebad"]
    assert _row(table, "latebad")[0] == "FAILED" and _row(table, "good")[0] == "passed"
