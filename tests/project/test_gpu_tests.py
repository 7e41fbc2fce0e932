"""`make gpu-tests`: the GPU tests alone, and on a machine without a GPU the list of those that did not run.

tools/gpu_tests.py finds them by the reason of their skip mark ("no CUDA ...", "needs CUDA ..."): here, that every
skip mark on CUDA's presence in tests/ is worded so, and that the plugin keeps exactly those tests and lists them.
"""
import ast
import pathlib
import re
import subprocess

import pytest
import torch

# Imported here rather than first inside a session of _gpu_tests, which unloads at its end the modules it loaded:
# Triton's compiled extension (which the engine's GPU modules import) would report leaks when Python exits.
from softmax_as_linear.engine.gpu import fused_softmax  # noqa: F401

pytest_plugins = ["pytester"]  # _gpu_tests runs pytest sessions of its own
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


def _gpu_tests(pytester, monkeypatch, *args):
    """What `make gpu-tests` runs, on ``args``: a pytest session of its own with the plugin loaded by name, run in this
    process (a new one would spend seconds importing torch, which the plugin's summary reads); its exit code is
    ``.ret``."""
    monkeypatch.syspath_prepend(str(ROOT))  # as PYTHONPATH=. for `-p tools.gpu_tests`
    return pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:nbval",
                                        "-p", "tools.gpu_tests", "-rfE", *args)


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


def test_only_the_gpu_tests_run_and_those_that_did_not_are_listed(pytester, monkeypatch):
    pytester.makepyfile(test_gpu_plugin_sample=TESTS)  # a name no module of tests/ has
    done = _gpu_tests(pytester, monkeypatch, str(pytester.path))
    out = done.stdout.str()
    assert done.ret == 0, out + done.stderr.str()  # not run here is not a failure
    assert "2 skipped, 3 deselected" in out
    listed = out[out.index("The GPU tests that did not run here:"):].splitlines()[1:3]
    assert [line.split()[0].rsplit("::", 1)[1] for line in listed] == ["test_on_the_gpu", "test_on_each_device[cuda]"]
    assert "(needs CUDA and Triton)" in listed[1]
    assert "0 GPU tests ran, 2 did not" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the GPU tests run")
def test_the_engines_gpu_tests_are_listed_on_a_machine_without_one(pytester, monkeypatch):
    """The five interrupt cases and the six CUDA paths of the engine, among others."""
    done = _gpu_tests(pytester, monkeypatch, str(ROOT / "tests" / "engine" / "test_interrupts.py"),
                      str(ROOT / "tests" / "engine" / "test_paths.py"))
    out = done.stdout.str()
    assert done.ret == 0, out + done.stderr.str()
    listed = out[out.index("The GPU tests that did not run here:"):]
    assert listed.count("test_interrupts.py::") == 5 and listed.count("test_paths.py::") == 6
    assert "make clean && make gpu-tests TORCH_INDEX=" in out or torch.version.cuda


def test_make_gpu_tests_runs_the_plugin_over_the_unit_tests():
    command = subprocess.run(["make", "-n", "gpu-tests", "VENV=/nonexistent"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60).stdout.replace("\\\n", " ")
    line = next(line for line in command.splitlines() if "-p tools.gpu_tests" in line)
    assert "pytest tests " in line and "-p no:xdist" in line and "-p no:nbval" in line
