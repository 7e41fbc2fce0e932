"""The pip path: the package installed with pip (not editable, CPU torch) runs a chapter outside the repository.

    python tools/check_pip_install.py [--torch torch==2.13.0] [--torch-index URL [--torch-index-required]] [--keep]

Needs only the standard library (``make test`` runs it with the system's Python, beside the set-up of
``.venv``). In a fresh virtual environment under the temporary folder (/tmp), installs torch (from PyTorch's CPU
index unless ``--torch-index ''``, or where it cannot be reached: tools/torch_index.py; an index given with
``--torch-index-required`` that cannot be reached stops the check), then the package from a copy of the files its
build reads, with the versions environment.yml pins, and ipykernel and nbclient to run a notebook. Then, from an empty folder
outside the repository, it checks that

- the command line answers (``--version``) and the paper-scale files come from the installed package;
- Chapter 4's paper-scale reading (its set-up cell and every cell that reads a saved figure) runs and
  prints what the stored chapter prints;
- then, in the same kernel, a result file that does not exist gives a ``FileNotFoundError`` naming it
  and the command that writes it.

Exits 0 when all hold; prints the time of each stage. ``make pip-path`` runs it (part of ``make test``).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import nbval_outputs  # the rule for what a re-executed cell is compared on (tools/, beside this script)
import torch_index  # PyTorch's index, where it answers (tools/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "04_isotropic_icl.ipynb"
READS_SAVED = ("saved_figure(", "show_saved(", "load_result(")
BUILD_FILES = ("pyproject.toml", "README.md", "LICENSE", "LICENSE-CONTENT")

RUN_NOTEBOOK = """
import sys, nbclient, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "."}}).execute()
nbformat.write(nb, sys.argv[2])
"""

# Run after the chapter's cells, in the same kernel: a figure never generated (the lecture preset).
MISSING_FILE = """\
from softmax_as_linear.experiments import paper_figures
try:
    paper_figures.saved_figure("fig2", "lecture", required=True)
except FileNotFoundError as error:
    print(error)
"""
MISSING_NEEDS = ("fig2_lecture.json", "python -m softmax_as_linear reproduce fig2 fig3 fig4 --preset lecture")

WHERE_FROM = """
import softmax_as_linear, sysconfig
from softmax_as_linear.core import artifacts
site = sysconfig.get_paths()["purelib"]
found = artifacts.find_result("fig2_paper.json")
assert softmax_as_linear.__file__.startswith(site), softmax_as_linear.__file__
assert found is not None and str(found).startswith(site), found
print(f"package: {softmax_as_linear.__file__}; fig2_paper.json: {found}")
"""


def _run(command, cwd, env, what: str) -> subprocess.CompletedProcess:
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    print(f"[{time.monotonic() - start:5.1f} s] {what}", flush=True)
    if done.returncode != 0:
        sys.exit(f"FAILED: {what} (exit {done.returncode})\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done


def _copy_sources(target: pathlib.Path) -> None:
    for name in BUILD_FILES:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, target / name)
    shutil.copytree(ROOT / "src" / "softmax_as_linear", target / "src" / "softmax_as_linear",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (target / "results").mkdir()
    for path in (ROOT / "results").glob("*.json"):
        shutil.copy2(path, target / "results" / path.name)


def _reading_cells(chapter: dict) -> list[dict]:
    code = [c for c in chapter["cells"] if c["cell_type"] == "code"]
    setup = next(c for c in code if "import softmax_as_linear" in "".join(c["source"]))
    reading = [c for c in code if any(call in "".join(c["source"]) for call in READS_SAVED)]
    if not reading:
        sys.exit(f"FAILED: no cell of {CHAPTER.name} reads a saved figure ({', '.join(READS_SAVED)})")
    return [setup, *reading]


def _text(cell: dict) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", default="torch==2.13.0", help="torch requirement (default: %(default)s)")
    parser.add_argument("--torch-index", default="https://download.pytorch.org/whl/cpu",
                        help="extra index for torch; empty for none (default: %(default)s)")
    parser.add_argument("--torch-index-required", action="store_true",
                        help="fail where the torch index cannot be reached (it was given on purpose)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)

    base = pathlib.Path(tempfile.mkdtemp(prefix="softmax-as-linear-pip-"))
    source, work, venv = base / "source", base / "work", base / "venv"
    source.mkdir(), work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SOFTMAX_AS_LINEAR_RESULTS", "VIRTUAL_ENV")}
    python = str(venv / "bin" / "python")
    start = time.monotonic()
    try:
        _copy_sources(source)
        pins = base / "pins.txt"
        pins.write_text(_run([sys.executable, str(ROOT / "tools" / "pins.py"), str(ROOT / "environment.yml"),
                              str(ROOT / "constraints.txt")], ROOT, env, "pins from environment.yml and constraints.txt").stdout)
        # The environment's own pip (the one `venv` bundles): the Python running this script may have none, as
        # a system Python often has not. --no-compile: byte-compiling all of torch, sympy and plotly doubles the time.
        _run([sys.executable, "-m", "venv", str(venv)], base, env, f"fresh virtual environment {venv}")
        index = torch_index.pip_arguments(args.torch_index, required=args.torch_index_required)
        install = [python, "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check"]
        _run([*install, args.torch, *index], base, env, f"pip install {args.torch}")
        _run([*install, "-c", str(pins), str(source), "ipykernel", "nbclient"],
             base, env, "pip install the package (not editable), ipykernel, nbclient")

        version = _run([python, "-m", "softmax_as_linear", "--version"], work, env, "command line --version")
        print("   ", version.stdout.strip())
        print("   ", _run([python, "-c", WHERE_FROM], work, env, "paper-scale files from the package").stdout.strip())

        chapter = json.loads(CHAPTER.read_text())
        cells = _reading_cells(chapter)
        missing = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": MISSING_FILE}
        notebook = dict(chapter, cells=[*cells, missing])
        (work / "reading.ipynb").write_text(json.dumps(notebook))
        _run([python, "-c", RUN_NOTEBOOK, "reading.ipynb", "executed.ipynb"], work, env,
             f"{CHAPTER.name}: {len(cells)} cells (set-up and paper-scale reading), then a missing file, from {work}")
        *executed, missing = json.loads((work / "executed.ipynb").read_text())["cells"]
        for needed in MISSING_NEEDS:
            if needed not in _text(missing):
                sys.exit(f"FAILED: a missing result file gave no message naming {needed!r}:\n{_text(missing)}")
        for stored, ran in zip(cells, executed):
            if "nbval-ignore-output" in stored.get("metadata", {}).get("tags", []) or not stored.get("outputs"):
                continue  # output not compared, or the stored chapter not executed yet
            tolerance = nbval_outputs.tolerance_of(stored)
            differs = (_text(stored) != _text(ran) if tolerance is None
                       else nbval_outputs.compare_text(_text(stored), _text(ran), tolerance))
            if differs:
                sys.exit(f"FAILED: a cell printed other text than the stored chapter:\n{''.join(ran['source'])}\n"
                         f"--- stored\n{_text(stored)}--- here\n{_text(ran)}")
        leftovers = sorted(p.name for p in work.iterdir())
        if leftovers != ["executed.ipynb", "reading.ipynb"]:
            sys.exit(f"FAILED: the chapter wrote into the working folder: {leftovers}")
        print(f"pip path: passed in {time.monotonic() - start:.0f} s (then the temporary folder is removed)", flush=True)
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
