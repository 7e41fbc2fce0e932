"""`make gpu-tests`: the GPU tests alone, and on a machine without a GPU the list of those that did not run.

tools/gpu_tests.py finds them by the reason of their skip mark ("no CUDA ...", "needs CUDA ..."): here, that every
skip mark on CUDA's presence in tests/ is worded so, and that the plugin keeps exactly those tests and lists them.
"""
import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
NEEDS_CUDA = re.compile(r"\b(no|needs) CUDA\b")  # as tools/gpu_tests.py


def _skip_marks(source: str):
    """(condition, reason) of every pytest.mark.skipif(...) call in a test module's source."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "skipif":
            reason = next((k.value for k in node.keywords if k.arg == "reason"), None)
            yield (ast.unparse(node.args[0]) if node.args else "",
                   reason.value if isinstance(reason, ast.Constant) else "")


def test_every_skip_on_cudas_presence_says_it_needs_cuda():
    """A skip mark whose condition is CUDA's absence must say "no CUDA" or "needs CUDA": that is how `make gpu-tests`
    finds the GPU tests. (A skip where CUDA is present, or of a build of torch with CUDA, is not one.)"""
    found = 0
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for condition, reason in _skip_marks(path.read_text()):
            if re.search(r"\bnot (torch\.cuda\.is_available\(\)|CUDA\b)", condition):  # skipped without CUDA
                found += 1
                assert NEEDS_CUDA.search(reason), f"{path.name}: skipif({condition}) says {reason!r}"
    assert found >= 5  # the engine's tests use several


def _gpu_tests(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:nbval", "-p", "tools.gpu_tests", "-rfE", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


TESTS = '''
import pytest

@pytest.mark.skipif(True, reason="no CUDA device")
def test_on_the_gpu():
    pass

@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(True, reason="needs CUDA and Triton"))])
def test_on_each_device(device):
    pass

def test_on_the_cpu():
    pass

@pytest.mark.skipif(True, reason="Triton is not installed")
def test_without_triton():
    pass
'''


def test_only_the_gpu_tests_run_and_those_that_did_not_are_listed(tmp_path):
    (tmp_path / "test_devices.py").write_text(TESTS)
    done = _gpu_tests(str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr  # not run here is not a failure
    assert "2 skipped, 3 deselected" in done.stdout
    listed = done.stdout[done.stdout.index("The GPU tests that did not run here:"):].splitlines()[1:3]
    assert [line.split()[0].rsplit("::", 1)[1] for line in listed] == ["test_on_the_gpu", "test_on_each_device[cuda]"]
    assert "(needs CUDA and Triton)" in listed[1]
    assert "0 GPU tests ran, 2 did not" in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the GPU tests run")
def test_the_engines_gpu_tests_are_listed_on_a_machine_without_one():
    """The five interrupt cases and the six CUDA paths of the engine, among others."""
    done = _gpu_tests("tests/engine/test_interrupts.py", "tests/engine/test_paths.py")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = done.stdout[done.stdout.index("The GPU tests that did not run here:"):]
    assert listed.count("test_interrupts.py::") == 5 and listed.count("test_paths.py::") == 6
    assert "make clean && make gpu-tests TORCH_INDEX=" in done.stdout or torch.version.cuda


def test_make_gpu_tests_runs_the_plugin_over_the_unit_tests():
    command = subprocess.run(["make", "-n", "gpu-tests", "VENV=/nonexistent"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60).stdout.replace("\\\n", " ")
    line = next(line for line in command.splitlines() if "-p tools.gpu_tests" in line)
    assert "pytest tests " in line and "-p no:xdist" in line and "-p no:nbval" in line
