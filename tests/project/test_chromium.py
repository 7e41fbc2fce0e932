"""`make test` on a machine without Chromium: it is installed once, before the stages that drive it run side by side.

The Makefile and the tools run for real, in a temporary copy of the repository, with stand-ins for what they call:
an `apt-get` that records each call and, asked to install, puts a `chromium` on the PATH; a .venv whose python
(also standing in for the system's Python) runs the tools but records, instead of running, what the stages run
(pytest, the pip check), and whose
jupyter-book, ruff and other checkers record their calls. The PATH holds the stand-ins and the few commands the
Makefile uses, so that no real Chromium is found; Playwright looks for its browser in an empty folder. Then, in this
process, the order in which tools/install_chromium.py tries apt-get, sudo and Playwright's install.
"""
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMANDS = ("sh", "env", "rm", "mkdir", "touch", "id")  # what the Makefile's recipes call
VENV_TOOLS = ("jupyter-book", "jupyter", "ruff", "check-jsonschema", "shellcheck", "actionlint")

APT_GET = f"""#!{sys.executable}
import os, pathlib, sys, time
with open(os.environ["INSTALLS"], "a") as log:
    log.write("apt-get " + " ".join(sys.argv[1:]) + "\\n")
if "install" in sys.argv:
    time.sleep(1)  # long enough for a second stage to ask meanwhile
    chromium = pathlib.Path(__file__).with_name("chromium")
    chromium.write_text("#!/bin/sh\\n")
    chromium.chmod(0o755)
"""
# The .venv's python: the tools run for real; pytest and the pip check are recorded, and the browser and live
# tests, as the real ones do, fail when install_chromium.find() finds no Chromium.
PYTHON = f"""#!{sys.executable}
import os, sys
args = sys.argv[1:]
if args[0] in ("tools/install_chromium.py", "tools/run_stages.py"):
    os.execv(sys.executable, [sys.executable, *args])
with open(os.environ["RAN"], "a") as log:
    log.write("python " + " ".join(args) + "\\n")
if {{"tests/book/test_browser.py", "tests/book/test_lab.py"}} & set(args):
    sys.path.insert(0, "tools")
    import install_chromium
    sys.exit(0 if install_chromium.find() else install_chromium.NOT_FOUND)
"""
RECORDER = f"""#!{sys.executable}
import os, sys
with open(os.environ["RAN"], "a") as log:
    log.write(os.path.basename(sys.argv[0]) + " " + " ".join(sys.argv[1:]) + "\\n")
"""


def _script(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def machine(tmp_path):
    """Runs a command in a copy of the repository's Makefile and tools with a stand-in .venv, on a PATH without
    Chromium (with a stand-in apt-get unless apt=False): (what it did, the calls of apt-get)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    repo, bin_, venv = tmp_path / "repo", tmp_path / "bin", tmp_path / "repo" / ".venv" / "bin"
    shutil.copytree(ROOT / "tools", repo / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Makefile", "pyproject.toml", "environment.yml", "constraints.txt"):
        shutil.copy(ROOT / name, repo)
    _script(venv / "python", PYTHON)
    for tool in VENV_TOOLS:
        _script(venv / tool, RECORDER)
    for stamp in (".ready", ".ready-lab", ".ready-book", ".ready-test"):  # newer than what they are built from: set up
        (venv.parent / stamp).touch()
    bin_.mkdir()
    for command in COMMANDS:
        (bin_ / command).symlink_to(shutil.which(command))
    env = {"PATH": str(bin_), "HOME": str(tmp_path), "INSTALLS": str(tmp_path / "installs.txt"),
           "RAN": str(tmp_path / "ran.txt"), "PLAYWRIGHT_BROWSERS_PATH": str(tmp_path / "no-browsers"),
           "PLAYWRIGHT_DOWNLOAD_HOST": "http://127.0.0.1:9"}  # Playwright's own install cannot download here
    # The system's Python is the stand-in too: `make test` runs run_stages.py and the pip check with it.
    make = f"{shutil.which('make')} --no-print-directory PYTHON={venv / 'python'}"

    def run(*command, apt=True):
        if apt:
            _script(bin_ / "apt-get", APT_GET)
        command = [*make.split(), *command[1:]] if command[0] == "make" else [p.replace("{make}", make) for p in command]
        done = subprocess.run(command, cwd=repo, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
        installs = pathlib.Path(env["INSTALLS"])
        return done, installs.read_text().splitlines() if installs.exists() else []

    return run


def _results(output: str) -> dict[str, str]:
    """Each stage's result, from the table that ends the output of `make test`."""
    table = output[output.rindex("stage "):].splitlines()[2:-1]
    return {line.split()[0]: line.split()[1] for line in table}


@pytest.mark.slow
def test_make_test_installs_chromium_once_before_the_stages_that_drive_it(machine):
    done, installs = machine("make", "test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split()[3] for line in installs] == ["update", "install"]  # once, though two stages use it
    assert installs[1].endswith("install -y --no-install-recommends chromium fonts-liberation fonts-dejavu-core")
    assert set(_results(done.stdout).values()) == {"passed"} and "chromium" in _results(done.stdout)
    done, installs_after = machine("make", "browser")  # alone, `make browser` finds it: nothing installed again
    assert done.returncode == 0, done.stdout + done.stderr
    assert installs_after == installs


@pytest.mark.slow
def test_browser_and_live_started_side_by_side_install_it_once(machine):
    """Without the stage `chromium` before them, `make live` and `make browser` each ask for Chromium at once."""
    done, installs = machine(sys.executable, "tools/run_stages.py", "--make", "{make}", "live&", "browser&")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split()[3] for line in installs] == ["update", "install"]


@pytest.mark.slow
def test_where_chromium_cannot_be_installed_one_message_says_what_to_install_and_the_rest_runs(machine):
    done, installs = machine("make", "test", apt=False)  # no apt-get, and Playwright's download fails
    results = _results(done.stdout)
    assert done.returncode != 0 and installs == []
    assert {stage for stage, result in results.items() if result != "passed"} == {"chromium", "live", "browser"}
    output = done.stdout + done.stderr
    assert output.count("Chromium is missing and could not be installed here") == 1
    assert "no apt-get" in output and "playwright install chromium: exit 1" in output
    assert "sudo apt-get install chromium" in output and "playwright install --no-shell chromium" in output
    assert output.count("no Chromium: `make chromium` installs it") == 2  # the browser and live tests, briefly


def test_a_chromium_given_by_hand_is_used_as_it_is(tmp_path):
    tool = [sys.executable, ROOT / "tools" / "install_chromium.py"]
    env = {**os.environ, "CHROMIUM": str(tmp_path / "chrome")}
    missing = subprocess.run(tool, env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and f"CHROMIUM={tmp_path / 'chrome'} does not exist" in missing.stderr
    _script(tmp_path / "chrome", "#!/bin/sh\n")
    found = subprocess.run(tool, env=env, capture_output=True, text=True, timeout=60)
    assert found.returncode == 0 and found.stdout.strip() == str(tmp_path / "chrome")


@pytest.fixture
def tool(monkeypatch):
    """tools/install_chromium.py with its commands recorded instead of run (each ends with the code given)."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import install_chromium

    ran, codes, found = [], {}, {}
    monkeypatch.setattr(install_chromium, "_run", lambda command: ran.append(command) or codes.get(command[-1], 0))
    monkeypatch.setattr(install_chromium, "find", lambda: found.get("system"))
    monkeypatch.setattr(install_chromium, "playwright_chromium", lambda: found.get("playwright"))
    return install_chromium, ran, codes, found


def _programs(monkeypatch, module, *present):
    monkeypatch.setattr(module.shutil, "which", lambda name: f"/usr/bin/{name}" if name in present else None)


def test_where_apt_get_cannot_install_it_playwright_does(tool, monkeypatch):
    install_chromium, ran, codes, found = tool
    _programs(monkeypatch, install_chromium, "apt-get")
    monkeypatch.setattr(install_chromium.os, "geteuid", lambda: 0)
    codes["fonts-dejavu-core"] = 100  # Ubuntu: no such package
    found["playwright"] = "/cache/ms-playwright/chromium/chrome"
    path, tried = install_chromium.install()
    assert [command[-1] for command in ran] == ["update", "fonts-dejavu-core", "chromium"]
    assert ran[-1][1:] == ["-m", "playwright", "install", "--no-shell", "chromium"] and path == found["playwright"]
    assert tried == ["apt-get install chromium, as root: exit 100", "playwright install chromium: exit 0"]


# A sudo that needs no password (sudo -n succeeds), and one that would prompt: with -n it fails at once, as sudo does;
# without -n it would wait for a password (here: a minute, and it leaves a mark).
SUDO = """#!/bin/sh
[ "$1" = -n ] && {{ {ok} ; }}
touch "$(dirname "$0")/prompted"
sleep 60
"""


def _sudo(tmp_path, monkeypatch, ok: str) -> pathlib.Path:
    _script(tmp_path / "bin" / "sudo", SUDO.format(ok=ok))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "bin" / "prompted"


def test_without_root_apt_get_goes_through_sudo_or_is_not_tried(tool, monkeypatch, tmp_path):
    install_chromium, ran, codes, found = tool
    monkeypatch.setattr(install_chromium.os, "geteuid", lambda: 1000)
    _programs(monkeypatch, install_chromium, "apt-get", "sudo")
    _sudo(tmp_path, monkeypatch, ok="exit 0")
    found["system"] = "/usr/bin/chromium"
    assert install_chromium.install() == ("/usr/bin/chromium", ["apt-get install chromium, through sudo -n: exit 0"])
    assert ran[0][:5] == ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]
    ran.clear()
    _programs(monkeypatch, install_chromium, "apt-get")  # no sudo: only Playwright's
    install_chromium.install()
    assert [command[-1] for command in ran] == ["chromium"] and ran[0][2] == "playwright"


def test_a_sudo_that_would_ask_for_a_password_is_never_left_waiting(tool, monkeypatch, tmp_path, capsys):
    """Not root, and sudo needs a password: apt-get is not tried (sudo -n fails at once), Playwright's build is
    installed instead, and what was tried and which way worked are said."""
    install_chromium, ran, codes, found = tool
    monkeypatch.setattr(install_chromium.os, "geteuid", lambda: 1000)
    _programs(monkeypatch, install_chromium, "apt-get", "sudo")
    prompted = _sudo(tmp_path, monkeypatch, ok='echo "sudo: a password is required" >&2; exit 1')
    found["playwright"] = "/cache/ms-playwright/chromium/chrome"
    began = time.monotonic()
    path, tried = install_chromium.install()
    assert time.monotonic() - began < 20 and not prompted.exists()
    assert [command[0] for command in ran] == [sys.executable]  # no apt-get, with or without sudo
    assert ran[0][1:] == ["-m", "playwright", "install", "--no-shell", "chromium"] and path == found["playwright"]
    assert tried == ["apt-get needs root, and sudo would ask for a password (sudo -n true failed)",
                     "playwright install chromium: exit 0"]
    assert "sudo would ask for a password (sudo -n true failed); installing Playwright's build" in capsys.readouterr().err
