"""A pytest plugin for `make gpu-tests`: only the GPU tests are run, and where they skip, the list of them is printed.

    .venv/bin/python -m pytest tests -p tools.gpu_tests

A GPU test is one marked to skip where there is no CUDA device: a ``skipif`` whose reason says ``no CUDA`` or
``needs CUDA`` (the wording every such mark in tests/ uses; tests/project/test_gpu_tests.py checks that each
``skipif`` on ``torch.cuda.is_available()`` says so). Every other test is deselected. On a machine with a CUDA
device and the CUDA build of torch they run as usual; on one without, they all skip, and the summary lists each
one that did not run, with why, and the exit code stays 0: a GPU test that cannot run here is not a failure,
but it is said, not hidden among the skips of an ordinary run.
"""
from __future__ import annotations

import re

import pytest

NEEDS_CUDA = re.compile(r"\b(no|needs) CUDA\b")


def needs_cuda(item: pytest.Item) -> bool:
    """Whether ``item`` is marked to skip where there is no CUDA device (whether or not it skips here)."""
    return any(NEEDS_CUDA.search(str(mark.kwargs.get("reason", ""))) for mark in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept = [item for item in items if needs_cuda(item)]
    config.hook.pytest_deselected(items=[item for item in items if not needs_cuda(item)])
    items[:] = kept


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    skipped = [report for report in terminalreporter.stats.get("skipped", []) if report.when in ("setup", "call")]
    ran = sum(len(terminalreporter.stats.get(key, [])) for key in ("passed", "failed", "error"))
    import torch

    where = (f"torch {torch.__version__}, CUDA {torch.version.cuda}" if torch.version.cuda
             else f"torch {torch.__version__}, a build without CUDA: `make clean && make gpu-tests TORCH_INDEX=` on a "
                  "machine with a GPU installs PyPI's CUDA build")
    terminalreporter.section("GPU tests")
    terminalreporter.write_line(f"{ran} GPU test{'s' if ran != 1 else ''} ran, {len(skipped)} did not "
                                f"(device: {'CUDA' if torch.cuda.is_available() else 'no CUDA device'}; {where}).")
    if skipped:
        terminalreporter.write_line("The GPU tests that did not run here:")
        for report in skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            terminalreporter.write_line(f"  {report.nodeid}  ({reason.removeprefix('Skipped: ')})")
