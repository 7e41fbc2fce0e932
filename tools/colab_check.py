"""Execute the chapters as Colab does, inside Colab's runtime image: ``.github/workflows/colab.yml``.

    python3 tools/colab_check.py [--out DIR] [--course /content/course] [CHAPTER ...]

Run with the image's own Python, with the repository at ``/content/course`` (where the chapters'
Colab cell expects its clone). What it does and checks:

1. ``google.colab`` imports in this interpreter (else exit 2: this is not Colab's runtime). In
   Colab the kernel imports it at start; a kernel started here gets the same from an IPython
   startup file, so that ``"google.colab" in sys.modules`` holds in every chapter as in Colab.
2. Each chapter (all of ``notebooks/`` unless named, by file or number prefix) is executed top to
   bottom in a fresh kernel, starting in ``/content``, its outputs written to ``--out``. Its first
   cell takes the Colab path: the course is already at ``/content/course`` (so no clone), it is
   installed with ``%pip install -e``, with Colab's torch, numpy, plotly and ipywidgets left as
   they are, and the kernel changes to its ``notebooks/``. Every later cell runs, claim cells
   assert their claims, and figures are shown with the Colab renderer.
3. A last cell, added to the executed copy only, checks that the kernel saw ``google.colab`` and
   imported the library from ``/content/course``.

Not checked: the ``git clone`` of the first cell (the checkout is already there), Colab's
front end (widgets are executed, not clicked), a GPU. Prints a Markdown report (versions, one line
per chapter); exit status 0 when every chapter ran, 1 when one failed, 2 when this is not Colab's
image.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import pathlib
import platform
import sys
import time

STARTUP = "00-google-colab.py"
PACKAGES = ("torch", "numpy", "scipy", "plotly", "ipywidgets", "sympy", "tqdm", "ipykernel", "nbclient")
CHECK_CELL = """# Added by tools/colab_check.py: did this chapter run the Colab way?
import sys, softmax_as_linear
assert "google.colab" in sys.modules, "google.colab was not imported: the chapter did not take Colab's path"
assert softmax_as_linear.__file__.startswith("{course}/"), softmax_as_linear.__file__
print("Colab path taken; library from", softmax_as_linear.__file__)
"""


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _chapters(course: pathlib.Path, names: list[str]) -> list[pathlib.Path]:
    every = sorted((course / "notebooks").glob("*.ipynb"))
    if not names:
        return every
    chosen = []
    for name in names:
        found = [p for p in every if p.name == pathlib.Path(name).name or p.name.startswith(name)]
        if not found:
            raise SystemExit(f"no chapter {name!r} in {course / 'notebooks'}")
        chosen += found
    return chosen


def _startup_file() -> pathlib.Path:
    """An IPython startup file that imports google.colab in every kernel, as Colab's kernel does."""
    from IPython.paths import get_ipython_dir

    path = pathlib.Path(get_ipython_dir()) / "profile_default" / "startup" / STARTUP
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("import google.colab  # written by tools/colab_check.py: Colab's kernel imports it\n")
    return path


def run(chapter: pathlib.Path, course: pathlib.Path, out: pathlib.Path, timeout: int) -> tuple[bool, float, str]:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(chapter, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(CHECK_CELL.format(course=course)))
    start = time.perf_counter()
    try:
        NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": "/content"}}).execute()
        ok, note = True, ""
    except Exception as error:  # a cell raised: its traceback is in the executed copy
        ok, note = False, str(error).strip().splitlines()[-1][:300] if str(error).strip() else type(error).__name__
    finally:
        out.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, out / chapter.name)
    return ok, time.perf_counter() - start, note


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter files or number prefixes (default: all)")
    parser.add_argument("--course", type=pathlib.Path, default=pathlib.Path("/content/course"),
                        help="the repository, where the chapters' Colab cell expects it (default: %(default)s)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("colab-run"),
                        help="folder for the executed chapters (default: %(default)s)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        import google.colab  # noqa: F401
    except ImportError as error:
        print(f"google.colab does not import ({error}): run this inside Colab's runtime image", file=sys.stderr)
        return 2
    chapters = _chapters(args.course, args.chapters)
    startup = _startup_file()
    print("### Chapters in Colab's runtime\n")
    print(f"Python {platform.python_version()}; " + ", ".join(f"{p} {_version(p)}" for p in PACKAGES) + ".\n")
    print("| chapter | result | seconds | what failed |\n| --- | --- | --- | --- |", flush=True)
    failed = 0
    try:
        for chapter in chapters:
            ok, seconds, note = run(chapter, args.course, args.out, args.timeout)
            failed += not ok
            print(f"| {chapter.name} | {'ran' if ok else 'FAILED'} | {seconds:.0f} | {note.replace('|', '/')} |",
                  flush=True)
    finally:
        startup.unlink(missing_ok=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
