"""The checks pass in a clone that has been used: after `make lab`, chapters opened, saved and run, the book built.

A copy of the repository (what git tracks) gets what such use leaves behind, all of it ignored by git: JupyterLab's
checkpoints, Python's and pytest's caches, a built book, the trained sweeps' cache, result files and checkpoints of a
reproduction, the egg-info of an editable install. Then everything that walks the tree runs in the copy: the tests
that read notebooks/, src/, results/ or the workflows, ruff, the tools that list the chapters, and nbval's collection.
"""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
IGNORED = (".git", ".venv", "_build", ".cache", "__pycache__", ".ipynb_checkpoints", ".pytest_cache", "*.egg-info")
# The tests that list a folder of the repository (iterdir, glob, rglob, os.walk, os.listdir over ROOT): whole files
# where each test reads such a list, else the tests that do. tests/book/test_references.py lists the chapters as
# test_book.py does (notebooks/*.ipynb) and is left out for its time (9 s).
LAYOUT = "tests/project/test_layout.py::test_"
WALKERS = ["tests/project/test_packaging.py", "tests/project/test_vendored.py", "tests/project/test_workflows.py",
           "tests/book/test_book.py", "tests/book/test_notebook_form.py", "tests/experiments/test_result_files.py", f"{LAYOUT}the_docstring_lists_every_module_of_the_tree",
           f"{LAYOUT}the_api_reference_documents_every_module_once", f"{LAYOUT}every_module_says_its_one_job_in_its_first_sentence",
           f"{LAYOUT}layers_import_only_downwards_and_have_no_cycles",
           "tests/panels/test_chapter_panels.py::test_every_chapter_panel_is_a_library_call"]


def _copy_of_the_repository(clone: pathlib.Path) -> None:
    """The files git would clone (and new ones not ignored); without git, the tree less what use leaves."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)
        return
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True, timeout=60).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file() and not (ROOT / name).is_symlink():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)


def _leave_what_use_leaves(clone: pathlib.Path) -> list[str]:
    """Writes what use leaves in the clone; returns the names written."""
    notebooks = sorted((clone / "notebooks").glob("*.ipynb"))
    checkpoints = clone / "notebooks" / ".ipynb_checkpoints"  # JupyterLab, on opening and saving a chapter
    checkpoints.mkdir()
    for notebook in notebooks:
        shutil.copy(notebook, checkpoints / f"{notebook.stem}-checkpoint.ipynb")
    leftovers = {
        "notebooks/__pycache__/panel.cpython-311.pyc": b"",
        ".pytest_cache/README.md": b"# pytest cache directory #\n",
        ".pytest_cache/v/cache/lastfailed": b"{}",
        "_build/html/index.html": b"<html></html>\n",  # `make book`
        "_build/html/notebooks/00_quick_tour.html": b"<html></html>\n",
        "_build/jupyter_execute/notebooks/00_quick_tour.ipynb": notebooks[0].read_bytes(),
        "_build/.doctrees/environment.pickle": b"",
        ".cache/sweeps/sweep_0123456789abcdef.npz": b"",  # `make nbval`'s TRAIN_CACHE
        ".cache/chromium.lock": b"",
        "results/checkpoints/sweep_isotropic_lecture.pt": b"",  # an interrupted `reproduce`
        "results/sweep_isotropic_lecture.npz": b"",
        "src/softmax_as_linear.egg-info/PKG-INFO": b"Name: softmax_as_linear\n",  # pip install -e .
        "src/softmax_as_linear/__pycache__/registry.cpython-311.pyc": b"",
        "tests/__pycache__/conftest.cpython-311-pytest-9.2.0.pyc": b"",
    }
    for name, content in leftovers.items():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_bytes(content)
    return [f"notebooks/.ipynb_checkpoints/{notebooks[0].stem}-checkpoint.ipynb", *leftovers]


@pytest.mark.slow
def test_the_checks_that_walk_the_tree_pass_in_a_used_clone(tmp_path):
    clone = tmp_path / "course"
    _copy_of_the_repository(clone)
    left = _leave_what_use_leaves(clone)
    if shutil.which("git") and (ROOT / ".git").exists():  # what use leaves is what git ignores
        ignored = subprocess.run(["git", "check-ignore", "--no-index", *left], cwd=ROOT, capture_output=True,
                                 text=True, timeout=60).stdout.split()
        assert ignored == left
    env = {**os.environ, "PYTHONPATH": str(clone / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    bin_ = pathlib.Path(sys.executable).parent
    commands = [
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", *WALKERS],
        [str(bin_ / "ruff"), "check", "src", "tests", "benchmarks", "tools", "book/_ext"],
        [sys.executable, "tools/live_references.py", "--check"],
        [sys.executable, "-c", "import pathlib, sys; sys.path.insert(0, 'tools'); import colab_check, execute_notebooks; "
         "print(*[p.name for p in execute_notebooks.chapters([]) + colab_check._chapters(pathlib.Path('.'), [])])"],
        [sys.executable, "-m", "pytest", "--nbval", "--collect-only", "-q", "-p", "no:cacheprovider", "notebooks"],
    ]
    outputs = []
    for command in commands:
        done = subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{' '.join(command)} fails in a used clone:\n{done.stdout[-3000:]}{done.stderr}"
        outputs.append(done.stdout)
    chapters = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert outputs[-2].split() == chapters * 2  # the tools that list the chapters take no checkpoint for one
    collected = {line.split("::")[0] for line in outputs[-1].splitlines() if "::" in line}
    assert collected == {f"notebooks/{name}" for name in chapters}  # nor does nbval
