"""Execute chapters in place so that their stored outputs are fresh.

    python tools/execute_notebooks.py [--unexecuted] [NOTEBOOK ...]

With no notebook named, every chapter runs; ``--unexecuted`` keeps only chapters that were never
executed (no code cell has an execution count), which is what ``make book`` needs. Widget state and
timings are not stored: the rendered book shows static plotly figures instead, and timings would
turn every re-execution into a diff.
"""
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]


def execute(path: pathlib.Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # Widget state must be tracked while running (live panels draw into Output widgets); it is
    # stripped before writing, since the book shows static figures instead.
    NotebookClient(notebook, timeout=900, kernel_name="python3", store_widget_state=True, record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, path)
    return time.perf_counter() - start


def _was_executed(path: pathlib.Path) -> bool:
    cells = nbformat.read(path, as_version=4).cells
    return any(cell.get("execution_count") for cell in cells if cell.cell_type == "code")


if __name__ == "__main__":
    args = sys.argv[1:]
    only_unexecuted = "--unexecuted" in args
    paths = [pathlib.Path(p) for p in args if p != "--unexecuted"] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    if only_unexecuted:
        paths = [p for p in paths if not _was_executed(p)]
    for path in paths:
        print(f"{path.name}: executing ...", flush=True)
        print(f"{path.name}: {execute(path.resolve()):.0f} s", flush=True)
