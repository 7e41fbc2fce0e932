"""Run the stages of `make test`, every one even when one fails, and end with a table of their results and times.

    python3 tools/run_stages.py setup lint unit nbval book-strict browser live pip-path
    python3 tools/run_stages.py --make "make PREPARED=1" setup lint unit+pip-path
    python3 tools/run_stages.py setup 'live&' unit nbval

Each stage is a make target, run as `make TARGET` with no standard input. Stages joined by `+` run at the
same time, and the next stage starts when all of them have ended. A stage written `STAGE&` (quoted in a shell)
starts with its group and runs beside it and the groups after it, as the shell's `&` would: the runner waits for
it only at the end. The output of a stage that runs beside others is printed once it has ended and its group
is over, so that it does not interleave. A failed `setup`
leaves the other stages not run (they all need it); any other failure is reported and the next stage runs.
Each stage runs in a process group of its own. Interrupted, by Ctrl-C (SIGINT) or by SIGTERM (what a CI cancel
sends, or `make test` passes on when it gets it), the runner passes the signal on to every running stage's whole
group (make, pytest and whatever they started), waits for them (SIGKILL after GRACE_S seconds), and ends with the
table, the running stages marked interrupted and the others not run. The exit code is 0 when every stage passed,
1 when one failed, 130 when interrupted by SIGINT, 143 by SIGTERM. The table is also
written to _build/stages.txt (--report) and, on GitHub Actions, to the job's summary. Standard library only: it runs
before anything is installed.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
GRACE_S = 20.0  # after the signal is passed on, how long a stage has to end before it is killed
POLL_S = 0.2  # how often the running stages are looked at (--poll)
STARTED: list[subprocess.Popen] = []  # every stage started, to pass a signal on to
RECEIVED: list[int] = []  # the signals received; the first one stops the runner
SENT: set[tuple[int, int]] = set()  # (stage's process id, signal) already passed on
ENDED: dict[int, float] = {}  # stage's process id -> when it was first seen ended (time.monotonic())


class Interrupted(Exception):
    """The runner got SIGINT or SIGTERM (``signum``); the running stages have been sent the same."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _pass_on(signum: int) -> None:
    """Send ``signum`` to the process group of every running stage that has not been sent it yet."""
    for process in STARTED:
        if process.poll() is None and (process.pid, signum) not in SENT:
            SENT.add((process.pid, signum))
            try:
                os.killpg(process.pid, signum)
            except ProcessLookupError:
                pass


def _on_signal(signum, frame) -> None:
    """Pass the signal on at once; the runner stops at its next check (``_check``), so no stage is lost."""
    RECEIVED.append(signum)
    _pass_on(signum)


def _check() -> None:
    """Raise Interrupted once a signal was received (passing it on to a stage started as it came, too)."""
    if RECEIVED:
        _pass_on(RECEIVED[0])
        raise Interrupted(RECEIVED[0])


def _end(processes, deadline: float) -> None:
    """Wait for the stages that were sent the signal; kill the group of any that has not ended by ``deadline``."""
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def _note_ends() -> None:
    """Record when each stage started has ended, as soon as it is seen (every POLL_S seconds while a group runs): a
    stage running beside the others is timed to its own end, not to that of the group that collects it."""
    for process in STARTED:
        if process.pid not in ENDED and process.poll() is not None:
            ENDED[process.pid] = time.monotonic()


def _ended(process: subprocess.Popen) -> float:
    """When ``process`` (which has ended) was first seen ended."""
    _note_ends()
    return ENDED[process.pid]


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _start(make: list[str], stage: str, logs: pathlib.Path | None) -> tuple[subprocess.Popen, object]:
    """Start `make STAGE`; its output goes to the terminal, or to a log file when it runs beside others."""
    log = None if logs is None else open(logs / f"{stage}.log", "w+b")
    process = subprocess.Popen([*make, stage], cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True,
                               stdout=log, stderr=None if log is None else subprocess.STDOUT)
    STARTED.append(process)
    return process, log


def run_group(make: list[str], stages: list[str], results: dict[str, tuple[str, float]]) -> None:
    """Run the stages of one group at the same time, recording (result, seconds) of each in `results`."""
    print(f"\n=== {' + '.join(stages)} " + "=" * max(0, 60 - len(" + ".join(stages))), flush=True)
    with tempfile.TemporaryDirectory(prefix="stages-") as logs:  # not under _build/: book-strict empties it
        _run_group(make, stages, results, pathlib.Path(logs) if len(stages) > 1 else None)


def _run_group(make, stages, results, logs) -> None:
    began = time.monotonic()
    running = {stage: _start(make, stage, logs) for stage in stages}
    try:
        while running:
            _check()
            _note_ends()
            for stage, (process, log) in list(running.items()):
                if process.poll() is None:
                    continue
                results[stage] = ("passed" if process.returncode == 0 else f"FAILED ({process.returncode})",
                                  _ended(process) - began)
                del running[stage]
                if log is not None:
                    log.seek(0)
                    print(f"--- {stage} ---", flush=True)
                    sys.stdout.buffer.write(log.read())
                    sys.stdout.flush()
                    log.close()
            time.sleep(POLL_S)
    except Interrupted:
        _end([process for process, log in running.values()], time.monotonic() + GRACE_S)
        for stage in running:
            results[stage] = ("interrupted", time.monotonic() - began)
        raise


def _name(stage: str) -> str:
    return stage[:-1] if stage.endswith("&") else stage


def _collect(background: dict, results: dict, wait: bool = False) -> None:
    """Record and print the stages started with `&` that have ended (all of them, waiting, with ``wait``)."""
    for stage, (process, log, began) in list(background.items()):
        while wait and process.poll() is None:
            _check()
            _note_ends()
            time.sleep(POLL_S)
        if process.poll() is None:
            continue
        results[stage] = ("passed" if process.returncode == 0 else f"FAILED ({process.returncode})",
                          _ended(process) - began)
        del background[stage]
        log.seek(0)
        print(f"--- {stage} (ran beside the stages after it) ---", flush=True)
        sys.stdout.buffer.write(log.read())
        sys.stdout.flush()
        log.close()


def table(results: dict[str, tuple[str, float]], stages: list[str], total: float) -> str:
    width = max(len(s) for s in stages + ["stage"])
    lines = [f"{'stage':<{width}}  {'result':<14}  wall time", f"{'-' * width}  {'-' * 14}  ---------"]
    for stage in stages:
        result, seconds = results.get(stage, ("not run", None))
        lines.append(f"{stage:<{width}}  {result:<14}  {_minutes(seconds) if seconds is not None else '':>9}")
    lines.append(f"{'total':<{width}}  {'':<14}  {_minutes(total):>9}")
    return "\n".join(lines)


def main(argv=None) -> int:
    global POLL_S
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stages", nargs="+", help="make targets; STAGE+STAGE runs both at the same time; "
                        "STAGE& runs beside the stages after it")
    parser.add_argument("--make", default=os.environ.get("MAKE", "make"), help="the make command (default: make)")
    parser.add_argument("--report", type=pathlib.Path, default=ROOT / "_build" / "stages.txt",
                        help="where the table is written (default: _build/stages.txt)")
    parser.add_argument("--poll", type=float, default=POLL_S, metavar="SECONDS",
                        help=f"how often the running stages are looked at (default: {POLL_S:g})")
    args = parser.parse_args(argv)
    POLL_S = args.poll
    make = shlex.split(args.make)
    groups = [group.split("+") for group in args.stages]
    stages = [_name(stage) for group in groups for stage in group]
    results: dict[str, tuple[str, float]] = {}
    background: dict[str, tuple[subprocess.Popen, object, float]] = {}
    began, code = time.monotonic(), 0
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_signal)
    with tempfile.TemporaryDirectory(prefix="stages-") as logs:  # not under _build/: book-strict empties it
        try:
            for group in groups:
                _check()
                for stage in (_name(s) for s in group if s.endswith("&")):
                    print(f"\n=== {stage} (started; it runs beside the next stages) ", flush=True)
                    background[stage] = (*_start(make, stage, pathlib.Path(logs)), time.monotonic())
                now = [s for s in group if not s.endswith("&")]
                if now:
                    run_group(make, now, results)
                _collect(background, results)
                if "setup" in now and results["setup"][0] != "passed":
                    break  # every other stage needs the environment
            _collect(background, results, wait=True)
        except Interrupted as interrupted:
            code = 128 + interrupted.signum
            print(f"\n{interrupted} received: the running stages were sent it too", file=sys.stderr, flush=True)
            _end([process for process, log, started in background.values()], time.monotonic() + GRACE_S)
            for stage, (process, log, started) in background.items():
                results[stage] = ("interrupted", time.monotonic() - started)
    report = table(results, stages, time.monotonic() - began)
    print("\n" + report, flush=True)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(report + "\n")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as summary:
            summary.write(f"```\n{report}\n```\n")
    if code:
        return code
    return 0 if all(results.get(s, ("not run",))[0] == "passed" for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main())
