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
The exit code is 0 when every stage passed, 1 when one failed, 130 when interrupted. The table is also
written to _build/stages.txt (--report) and, on GitHub Actions, to the job's summary. Standard library only: it runs
before anything is installed.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _start(make: list[str], stage: str, logs: pathlib.Path | None) -> tuple[subprocess.Popen, object]:
    """Start `make STAGE`; its output goes to the terminal, or to a log file when it runs beside others."""
    log = None if logs is None else open(logs / f"{stage}.log", "w+b")
    process = subprocess.Popen([*make, stage], cwd=ROOT, stdin=subprocess.DEVNULL,
                               stdout=log, stderr=None if log is None else subprocess.STDOUT)
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
            for stage, (process, log) in list(running.items()):
                if process.poll() is None:
                    continue
                results[stage] = ("passed" if process.returncode == 0 else f"FAILED ({process.returncode})",
                                  time.monotonic() - began)
                del running[stage]
                if log is not None:
                    log.seek(0)
                    print(f"--- {stage} ---", flush=True)
                    sys.stdout.buffer.write(log.read())
                    sys.stdout.flush()
                    log.close()
            time.sleep(0.2)
    except KeyboardInterrupt:
        for stage, (process, log) in running.items():
            process.wait()
            results[stage] = ("interrupted", time.monotonic() - began)
        raise


def _name(stage: str) -> str:
    return stage[:-1] if stage.endswith("&") else stage


def _collect(background: dict, results: dict, wait: bool = False) -> None:
    """Record and print the stages started with `&` that have ended (all of them, waiting, with ``wait``)."""
    for stage, (process, log, began) in list(background.items()):
        if wait:
            process.wait()
        if process.poll() is None:
            continue
        results[stage] = ("passed" if process.returncode == 0 else f"FAILED ({process.returncode})",
                          time.monotonic() - began)
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stages", nargs="+", help="make targets; STAGE+STAGE runs both at the same time; "
                        "STAGE& runs beside the stages after it")
    parser.add_argument("--make", default=os.environ.get("MAKE", "make"), help="the make command (default: make)")
    parser.add_argument("--report", type=pathlib.Path, default=ROOT / "_build" / "stages.txt",
                        help="where the table is written (default: _build/stages.txt)")
    args = parser.parse_args(argv)
    make = shlex.split(args.make)
    groups = [group.split("+") for group in args.stages]
    stages = [_name(stage) for group in groups for stage in group]
    results: dict[str, tuple[str, float]] = {}
    background: dict[str, tuple[subprocess.Popen, object, float]] = {}
    began, code = time.monotonic(), 0
    with tempfile.TemporaryDirectory(prefix="stages-") as logs:  # not under _build/: book-strict empties it
        try:
            for group in groups:
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
        except KeyboardInterrupt:
            code = 130
            for stage, (process, log, started) in background.items():
                process.wait()
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
