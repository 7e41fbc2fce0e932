"""Chromium for the browser and live tests: found, or installed once (Debian's with apt-get, else Playwright's).

    python tools/install_chromium.py          # install it when missing, then print its path
    python tools/install_chromium.py --find   # print its path, or exit 1 when there is none

Looked for in this order: $CHROMIUM (a path given by hand, used as it is and never installed over), `chromium` on
the PATH (Debian's /usr/bin/chromium), then the Chromium that this environment's Playwright installed. When there
is none: `apt-get install chromium` where apt-get exists, as root, or through `sudo -n` where sudo needs no password
(it never prompts: a password prompt would wait unseen, its question in a log, with no one to answer); else, or when
that fails (Ubuntu packages Chromium as a snap), Playwright's own `python -m playwright install --no-shell chromium`
(macOS, Linux without apt-get); where neither works, one message says what to install, and the exit code is 1. Each
way is announced as it is tried, and the line that ends the install says which one worked. The install
holds a lock (.cache/chromium.lock): when two stages ask at once, the second waits for the first, then finds its
Chromium. `make test` runs this once, as its stage `chromium`, before the browser and live stages start side by side.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOCK = ROOT / ".cache" / "chromium.lock"
DEBIAN_PACKAGES = ["chromium", "fonts-liberation", "fonts-dejavu-core"]
NOT_FOUND = "no Chromium: `make chromium` installs it, or set CHROMIUM=/path/to/chromium (tools/install_chromium.py)"
WHAT_TO_INSTALL = """\
Chromium is missing and could not be installed here ({tried}).
Only the browser and live tests need it; every other check runs without it. Any one of these provides it:
  Debian:           sudo apt-get install chromium
  macOS, others:    .venv/bin/python -m playwright install --no-shell chromium
  one you have:     make test CHROMIUM=/path/to/chromium-or-chrome"""


def playwright_chromium() -> str | None:
    """The Chromium that Playwright installed for this environment's `playwright` package, if it is there."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as playwright:
        path = playwright.chromium.executable_path
    return path if os.path.isfile(path) else None


def find() -> str | None:
    """The Chromium to drive: $CHROMIUM when set (None if it does not exist), else `chromium` on the PATH, else
    Playwright's."""
    given = os.environ.get("CHROMIUM")
    if given:
        return given if os.path.isfile(given) else None
    return shutil.which("chromium") or playwright_chromium()


def _apt_get() -> tuple[list[str] | None, str]:
    """The apt-get command and how it runs as root (as root, or through sudo where sudo needs no password); or None
    and why apt-get cannot be used. sudo is always run with -n: it fails rather than ask for a password."""
    if shutil.which("apt-get") is None:
        return None, "no apt-get"
    if os.geteuid() == 0:
        return ["apt-get"], "as root"
    if shutil.which("sudo") is None:
        return None, "apt-get needs root, and there is no sudo"
    try:
        probe = subprocess.run(["sudo", "-n", "true"], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        probe = None
    if probe is None or probe.returncode != 0:
        return None, "apt-get needs root, and sudo would ask for a password (sudo -n true failed)"
    return ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"], "through sudo -n"


def _run(command: list[str]) -> int:
    print("+ " + " ".join(command), flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(command, stdin=subprocess.DEVNULL, env=env).returncode


def install() -> tuple[str | None, list[str]]:
    """Install Chromium (the caller holds the lock): (its path or None, what was tried and how it ended)."""
    tried = []
    apt, how = _apt_get()
    if apt is None:
        tried.append(how)
    else:
        print(f"Chromium: installing Debian's package with apt-get, {how}", file=sys.stderr, flush=True)
        wait = ["-o", "DPkg::Lock::Timeout=300"]  # another apt-get (unattended upgrades) finishes first
        code = _run([*apt, *wait, "update"]) or _run(
            [*apt, *wait, "install", "-y", "--no-install-recommends", *DEBIAN_PACKAGES])
        tried.append(f"apt-get install chromium, {how}: exit {code}")
        path = find() if code == 0 else None
        if path:
            return path, tried
    try:
        import playwright  # noqa: F401
    except ImportError:
        tried.append("Playwright is not installed in this environment")
    else:
        print(f"Chromium: {'; '.join(tried)}; installing Playwright's build", file=sys.stderr, flush=True)
        code = _run([sys.executable, "-m", "playwright", "install", "--no-shell", "chromium"])
        tried.append(f"playwright install chromium: exit {code}")
        path = playwright_chromium() if code == 0 else None
        if path:
            return path, tried
    return None, tried


@contextlib.contextmanager
def _locked():
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, or the process ends
        yield


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--find", action="store_true", help="only look for it: exit 1 when there is none")
    args = parser.parse_args(argv)
    given = os.environ.get("CHROMIUM")
    if args.find or given:
        path = find()
        if path is None:
            print(f"CHROMIUM={given} does not exist" if given else NOT_FOUND, file=sys.stderr)
            return 1
        print(path)
        return 0
    with _locked():  # a second caller waits here, then finds what the first installed
        path = find()
        if path is None:
            began = time.monotonic()
            path, tried = install()
            if path is None:
                print(WHAT_TO_INSTALL.format(tried="; ".join(tried)), file=sys.stderr)
                return 1
            print(f"Chromium installed in {time.monotonic() - began:.0f} s, by {tried[-1].rsplit(':', 1)[0]} "
                  f"({'; '.join(tried)})", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
