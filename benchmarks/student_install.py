"""A student's install, measured: from a fresh clone to JupyterLab answering, its download and its disk.

    python benchmarks/student_install.py                  # this clone's HEAD
    python benchmarks/student_install.py --commit 112d3ac  # another commit of it
    python benchmarks/student_install.py --then-setup      # then `make setup` in the same clone, as `make test` would

Clones the repository into a fresh folder under /tmp, runs `make lab` there with an empty pip cache (as a new
user would), waits until the JupyterLab server answers an HTTP request, then stops it. Prints one JSON object:
the wall time of the clone and of `make lab` until the server answered, the load average and time of day at
the start and the end, the number of distributions installed in the clone's `.venv`, its size on disk, and
the download: every installed distribution fetched again with `pip download --no-deps` (same versions, same
indexes) into an empty folder and summed. With --then-setup, `make setup` (what `make test` installs first) then
runs in the same clone, and the report adds its time, the distributions it added, every installed one whose
version it changed (there should be none) and what `pip check` says of the result. The clone is removed at the
end unless --keep is given.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
SERVER_URL = re.compile(r"(http://127\.0\.0\.1:\d+/lab\S*)")


def _disk_bytes(path: pathlib.Path) -> int:
    """Bytes on disk under ``path`` (as `du -s`, counted in blocks)."""
    return int(subprocess.run(["du", "-s", "--block-size=1", str(path)], check=True, capture_output=True,
                              text=True).stdout.split()[0])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer: the server is up
    except OSError:
        return False


def _cpu() -> str:
    try:
        info = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.uname().machine
    names = re.findall(r"^model name\s*:\s*(.*)$", info, re.M)
    return f"{names[0] if names else os.uname().machine}, {os.cpu_count()} logical CPUs"


def _moment() -> dict:
    return {"utc": time.strftime("%H:%M:%S", time.gmtime()), "load": os.getloadavg()[0]}


def run_lab(clone: pathlib.Path, env: dict, limit_s: float, log: pathlib.Path) -> float:
    """Seconds from `make lab`'s start until its server answers; the server is then stopped."""
    start = time.monotonic()
    with open(log, "w") as out:
        make = subprocess.Popen(["make", "lab"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        while time.monotonic() - start < limit_s:
            if make.poll() is not None:
                sys.exit(f"`make lab` ended (exit {make.returncode}) before JupyterLab answered; see {log}")
            found = SERVER_URL.search(log.read_text(errors="replace"))
            if found and _answers(found.group(1)):
                return time.monotonic() - start
            time.sleep(0.5)
        sys.exit(f"JupyterLab did not answer within {limit_s:g} s; see {log}")
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGTERM)
            try:
                make.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait()


def download_bytes(python: pathlib.Path, folder: pathlib.Path, env: dict) -> tuple[int, int]:
    """(bytes, files) of every distribution installed by ``python``'s pip, downloaded again into ``folder``."""
    frozen = subprocess.run([str(python), "-m", "pip", "freeze", "--exclude-editable"], check=True,
                            capture_output=True, text=True, env=env).stdout
    requirements = folder.parent / "installed.txt"
    requirements.write_text(frozen)
    subprocess.run([str(python), "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                    "-d", str(folder),
                    "-r", str(requirements)], check=True, env=env)
    files = list(folder.iterdir())
    return sum(f.stat().st_size for f in files), len(files)


def _versions(python: pathlib.Path, env: dict) -> dict[str, str]:
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True,
                            text=True, env=env).stdout.split()
    return dict(line.split("==", 1) for line in listed)


def then_setup(clone: pathlib.Path, python: pathlib.Path, env: dict, log: pathlib.Path) -> dict:
    """`make setup` in the clone after `make lab`: its time, what it added, what it changed, and `pip check`."""
    before = _versions(python, env)
    start = time.monotonic()
    with open(log, "w") as out:
        done = subprocess.run(["make", "setup"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
    seconds = round(time.monotonic() - start, 1)
    after = _versions(python, env)
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, env=env)
    return {"exit": done.returncode, "seconds": seconds, "added": len(set(after) - set(before)),
            "changed": {name: f"{before[name]} -> {after[name]}" for name in before
                        if name in after and after[name] != before[name]},
            "removed": sorted(set(before) - set(after)), "pip_check": check.stdout.strip() or check.stderr.strip(),
            "distributions": len(after)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="HEAD", help="the commit to clone (default: HEAD)")
    parser.add_argument("--limit", type=float, default=1800, help="seconds to wait for JupyterLab (default 1800)")
    parser.add_argument("--keep", action="store_true", help="keep the clone and its .venv")
    parser.add_argument("--then-setup", action="store_true",
                        help="then run `make setup` in the same clone and report what it added and changed")
    args = parser.parse_args(argv)

    work = pathlib.Path(tempfile.mkdtemp(prefix="student-install-"))
    clone, cache = work / "clone", work / "pip-cache"
    env = dict(os.environ, PIP_CACHE_DIR=str(cache), BROWSER="true")
    env.pop("VIRTUAL_ENV", None)
    commit = subprocess.run(["git", "-C", str(REPOSITORY), "rev-parse", args.commit], check=True, capture_output=True,
                            text=True).stdout.strip()
    report = {"commit": commit[:7], "start": _moment(), "cpu": _cpu()}
    try:
        start = time.monotonic()
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(REPOSITORY), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True)
        report["clone_s"] = round(time.monotonic() - start, 1)
        report["make_lab_until_answer_s"] = round(run_lab(clone, env, args.limit, work / "make-lab.log"), 1)
        report["clone_to_lab_s"] = round(time.monotonic() - start, 1)
        report["answered"] = _moment()
        venv = clone / ".venv"
        python = venv / "bin" / "python"
        listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], check=True,
                                capture_output=True, text=True, env=env).stdout.split()
        report["distributions"] = len(listed)
        report["venv_mb"] = round(_disk_bytes(venv) / 1e6)
        report["pip_cache_mb"] = round(_disk_bytes(cache) / 1e6) if cache.exists() else 0
        (work / "download").mkdir()
        size, files = download_bytes(python, work / "download", env)
        report["download_mb"], report["download_files"] = round(size / 1e6), files
        report["installed"] = sorted(listed)
        if args.then_setup:
            report["then_setup"] = then_setup(clone, python, env, work / "make-setup.log")
        report["end"] = _moment()
    finally:
        if args.keep:
            report["kept"] = str(work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
