"""Where a result was computed: device and its name, machine, torch and Python versions, commit, wall time.

Every result file the course writes carries :func:`provenance` (the reproduction command adds the
settings of what it ran); :func:`device_name` names the GPU or the CPU model.
"""
from __future__ import annotations

import datetime
import os
import pathlib
import platform
import subprocess

_PACKAGE = pathlib.Path(__file__).resolve().parents[1]  # softmax_as_linear/: the library


def _git(*args: str) -> str | None:
    """The output of ``git args`` run in the package's folder, or None outside a checkout."""
    try:
        out = subprocess.run(["git", *args], cwd=_PACKAGE, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _library_git(*args: str) -> str | None:
    """:func:`_git`'s output when the git repository around the package is the library's own (it tracks the
    package's ``__init__.py``), else None: a library installed into a virtual environment inside a user's own git
    project is not that project's, and its commit is not the library's."""
    if _git("ls-files", "--error-unmatch", "--", str(_PACKAGE / "__init__.py")) is None:
        return None
    return _git(*args)


def library_changes() -> list[str] | None:
    """The library's files (this package's folder) with uncommitted changes, untracked files included (a module
    never committed changes what a result computes as much as an edit does), their paths as ``git status
    --porcelain`` lists them (an empty list for a clean tree), or None when unknown: outside a checkout of the
    library (installed, even inside another git project), or when ``SOFTMAX_AS_LINEAR_COMMIT`` names the commit (a
    copy of the source tree may carry a stale ``.git``)."""
    if os.environ.get("SOFTMAX_AS_LINEAR_COMMIT"):
        return None
    status = _library_git("status", "--porcelain", "--untracked-files=all", "--", str(_PACKAGE))
    return None if status is None else [line.split(maxsplit=1)[-1] for line in status.splitlines()]


def provenance(device, seconds: float) -> dict:
    """Where and how a result was computed: device, machine, torch version, commit (and whether the library's
    source had uncommitted changes, :func:`library_changes`), wall time and the load average at the end (the
    machine may be shared).

    The environment variable ``SOFTMAX_AS_LINEAR_COMMIT``, when set, names the commit instead of git (a copy
    of the source tree on another machine may carry a stale ``.git``); ``uncommitted_changes`` is then
    unknown (None)."""
    import torch

    device = str(device)
    commit = os.environ.get("SOFTMAX_AS_LINEAR_COMMIT") or _library_git("rev-parse", "HEAD") or None
    changed = library_changes()
    changes = None if changed is None else bool(changed)
    where = {"device": device, "torch": torch.__version__, "python": platform.python_version(),
             "commit": commit, "uncommitted_changes": changes, "wall_seconds": round(float(seconds), 1),
             "machine": platform.machine(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if device.startswith("cuda") and torch.cuda.is_available():
        where["gpu"] = torch.cuda.get_device_name()
    if hasattr(os, "getloadavg"):
        where["load_average_at_end"] = round(os.getloadavg()[0], 2)
    return where


def device_name(device) -> str:
    """The GPU's name for a CUDA device, else the CPU's model name (``/proc/cpuinfo``), else the machine type."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def utc_now() -> str:
    """The date and time now, UTC, as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
