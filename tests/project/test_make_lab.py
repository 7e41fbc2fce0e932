"""``make lab`` as a student meets it: no news pop-up on the first start, and no setuptools notice while the library
is installed. Run with a stand-in environment (a fake ``jupyter`` and a ``python`` that records pip's calls)."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _stand_in(venv: pathlib.Path, log: pathlib.Path) -> None:
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(
        f"#!/bin/sh\ncase \"$*\" in *'pip install'*|*'pip check'*|*pins.py*)\n"
        f"  echo \"$* PYTHONWARNINGS=$PYTHONWARNINGS\" >> {log}; exit 0;;\nesac\nexec {sys.executable} \"$@\"\n")
    (venv / "bin" / "jupyter").write_text(f"#!/bin/sh\necho \"jupyter $*\" >> {log}\n")
    for name in ("python", "jupyter"):
        (venv / "bin" / name).chmod(0o755)


def _make(venv: pathlib.Path, *targets: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "MAKEFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "-C", str(ROOT), f"VENV={venv}", *targets], capture_output=True, text=True,
                          env=env, timeout=60)


def test_make_lab_turns_the_news_off_and_keeps_other_settings(tmp_path):
    venv, log = tmp_path / "venv", tmp_path / "log"
    _stand_in(venv, log)
    (venv / ".ready").touch()
    (venv / ".ready-lab").touch()
    overrides = venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    overrides.parent.mkdir(parents=True)
    overrides.write_text(json.dumps({"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}))
    done = _make(venv, "lab")
    assert done.returncode == 0, done.stdout + done.stderr
    settings = json.loads(overrides.read_text())
    assert settings["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false", "checkForUpdates": False}
    assert settings["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    assert "jupyter lab notebooks" in log.read_text()
    assert _make(venv, "lab").returncode == 0 and json.loads(overrides.read_text()) == settings, "idempotent"


def test_the_library_is_installed_without_setuptools_notice(tmp_path):
    venv, log = tmp_path / "venv", tmp_path / "log"
    _stand_in(venv, log)
    (venv / ".ready").touch()
    done = _make(venv, str(venv / ".ready-lab"))
    assert done.returncode == 0, done.stdout + done.stderr
    installs = [line for line in log.read_text().splitlines() if "pip install" in line]
    assert installs and all(line.endswith("PYTHONWARNINGS=ignore:Editable installation:UserWarning")
                            for line in installs), installs


def test_the_filter_hides_the_notice_and_only_it():
    script = ("import warnings; warnings.warn('Editable installation.\\n!!\\n  folders ...', UserWarning); "
              "warnings.warn('Something else', UserWarning)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore:Editable installation:UserWarning"})
    assert "Editable installation" not in done.stderr and "Something else" in done.stderr
