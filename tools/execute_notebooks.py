"""Execute chapters in place so that their stored outputs are fresh, and keep them in the form JupyterLab saves.

    python tools/execute_notebooks.py [--unexecuted] [CHAPTER ...]
    python tools/execute_notebooks.py --normalise [CHAPTER ...]      (metadata only, no execution)

A chapter is named by its file (``notebooks/04_isotropic_icl.ipynb``) or by the start of its name
in ``notebooks/`` (``04``, ``04_isotropic``); ``make notebooks CHAPTER=04`` runs one this way. With
no chapter named, every chapter runs; ``--unexecuted`` keeps only the chapters that are not fully executed
(:func:`missing_outputs`: a code cell that should have run has no execution count, or shows an error it is not
tagged to raise: a chapter never executed, or saved after a Run All cut short or "Clear All Outputs"), says on
stdout why each is executed, and is what ``make book`` runs. A name that
matches no chapter exits with status 2 before anything runs. Widget state and
timings are not stored: the rendered book shows static plotly figures instead, and timings would
turn every re-execution into a diff.

A chapter is stored as JupyterLab writes it (:func:`normalise`): the kernelspec that ipykernel
installs (display name "Python 3 (ipykernel)"), nbformat 4.5 with cell ids, keys sorted, one-space
indent, and consecutive stream outputs of one name (two ``print`` calls with a figure between them
are two streams; without, one) merged into one as JupyterLab's output area does, carriage returns and
backspaces applied (:func:`merge_streams`). So opening a chapter and saving it changes no byte, with one exception that
:func:`pre_save_hook` removes: JupyterLab's plotly renderer adds a PNG snapshot of every figure it
draws to the figure's output (making a freshly opened chapter "modified"). The stored form also keeps the code
cells of solutions (tagged ``solution``, ``book/_ext/solutions.py``) folded, source and outputs: JupyterLab
unfolds a cell's outputs when it runs it (Run All), and without this its autosave would store the answers
unfolded for every later opening (:func:`fold_solutions`). ``make lab`` starts
JupyterLab with that hook, so that its saves and autosaves write a chapter back unchanged unless a
cell was really changed or re-run.
"""
import argparse
import os
import pathlib
import sys
import time

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
PLOTLY = "application/vnd.plotly.v1+json"
#: The tag of a solution's code cells (``book/_ext/solutions.py``'s ``TAG``), folded in the stored form.
SOLUTION = "solution"
#: The metadata key of the library's transient progress lines (``softmax_as_linear.core.progress.TRANSIENT``),
#: and the variable that turns them off in the kernels this script starts (``PROGRESS_VAR``).
TRANSIENT, PROGRESS_VAR = "softmax_as_linear_transient", "SOFTMAX_AS_LINEAR_PROGRESS"
#: A code cell tagged so is not executed (nbclient's tag), or is expected to raise (nbclient's and nbval's).
SKIP, RAISES = "skip-execution", "raises-exception"


def _as_javascript(value):
    """``value`` with every whole float written as an int, as a notebook that went through the browser
    comes back (JavaScript has one number type: plotly JSON's ``0.0`` is saved as ``0``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = _as_javascript(item)
    elif isinstance(value, list):
        value[:] = [_as_javascript(item) for item in value]
    return value


def _terminal_text(text: str, index: int = 0, current: str = "") -> tuple[str, int]:
    """``text`` written into ``current`` from the cursor ``index`` as JupyterLab's output area writes a stream
    (``processText`` of @jupyterlab/outputarea): ``\\r`` returns to the start of the line, ``\\b`` erases the
    character before the cursor, ``\\n`` ends the text with a new line. Returns the text and the cursor."""
    if not any(c in text for c in "\b\r\n"):
        return current[:index] + text + current[index + len(text):], index + len(text)
    cursor, start = index, 0
    while True:
        found = next((k for k in range(start, len(text)) if text[k] in "\n\b\r"), -1)
        piece = text[start:] if found == -1 else text[start:found]
        current = current[:cursor] + piece + current[cursor + len(piece):]
        cursor += len(piece)
        if found == -1:
            return current, cursor
        start = found + 1
        if text[found] == "\b":
            if cursor > 0 and current[cursor - 1] != "\n":
                current = current[:cursor - 1] + current[cursor + 1:]
                cursor -= 1
        elif text[found] == "\r":
            while cursor > 0 and current[cursor - 1] != "\n":
                cursor -= 1
        else:
            current += "\n"
            cursor = len(current)


def merge_streams(outputs: list) -> list:
    """The outputs of a cell as JupyterLab keeps them: a stream output that follows a stream output of the same
    name (``stdout`` or ``stderr``) is appended to it, and every stream's text goes through :func:`_terminal_text`.
    Text stored as a list of lines stays a list of lines."""
    merged, cursor, last = [], 0, None
    for output in outputs:
        if output.get("output_type") != "stream":
            merged.append(output)
            last = None
            continue
        lines = not isinstance(output["text"], str)
        text = "".join(output["text"]) if lines else output["text"]
        if last is not None and last[0]["name"] == output["name"]:
            target, was_lines = last
            current = "".join(target["text"]) if was_lines else target["text"]
            current, cursor = _terminal_text(text, cursor, current)
        else:
            target, was_lines = output, lines
            current, cursor = _terminal_text(text)
            merged.append(output)
            last = (output, lines)
        target["text"] = current.splitlines(keepends=True) if was_lines else current
    return merged


def fold_solutions(notebook) -> None:
    """Fold, source and outputs (``jupyter.source_hidden`` and ``jupyter.outputs_hidden``), every code cell of
    ``notebook`` tagged ``solution``, as the chapters are written: the answer stays hidden until a reader opens it."""
    for cell in notebook.get("cells", []):
        metadata = cell.get("metadata", {})
        if cell.get("cell_type") == "code" and SOLUTION in metadata.get("tags", []):
            folded = metadata.setdefault("jupyter", {})
            folded["source_hidden"] = folded["outputs_hidden"] = True
            metadata["collapsed"] = True


def normalise(notebook) -> bool:
    """Bring a notebook (``nbformat`` node or plain dict, changed in place) to the stored form.

    Sets the kernelspec, drops widget state and the PNG snapshots that JupyterLab's plotly renderer
    adds next to plotly JSON, drops the per-cell ``execution`` timings, writes whole floats as ints
    (:func:`_as_javascript`), drops the library's transient progress lines (outputs marked :data:`TRANSIENT`: a
    training that a person ran, saved), merges consecutive streams (:func:`merge_streams`) and folds the solutions'
    code cells (:func:`fold_solutions`), marking every folded output ``collapsed`` as JupyterLab's save does; outputs
    are otherwise left alone. Returns whether anything changed.
    """
    before = repr(notebook)
    _as_javascript(notebook)
    metadata = notebook.setdefault("metadata", {})
    if metadata.get("kernelspec", {}).get("name", "python3") == "python3":
        metadata["kernelspec"] = dict(KERNELSPEC)
    metadata.pop("widgets", None)
    notebook["nbformat"], notebook["nbformat_minor"] = 4, max(5, notebook.get("nbformat_minor", 5))
    for cell in notebook.get("cells", []):
        cell.get("metadata", {}).pop("execution", None)
        if cell.get("metadata", {}).get("jupyter", {}).get("outputs_hidden"):
            cell["metadata"]["collapsed"] = True  # what JupyterLab writes beside a folded output, on every save
        if cell.get("outputs"):
            cell["outputs"] = merge_streams([o for o in cell["outputs"] if not o.get("metadata", {}).get(TRANSIENT)])
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if PLOTLY in data:
                data.pop("image/png", None)
    fold_solutions(notebook)
    return repr(notebook) != before


def pre_save_hook(model, **_):
    """Jupyter Server's ``ContentsManager.pre_save_hook``: store a notebook in the normalised form."""
    if model.get("type") == "notebook" and model.get("content") is not None:
        normalise(model["content"])


def execute(path: pathlib.Path) -> float:
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    os.environ[PROGRESS_VAR] = "0"  # the kernel inherits it: no progress line, which would be a stored output
    start = time.perf_counter()
    # Widget state must be tracked while running (live panels draw into Output widgets); it is
    # stripped before writing, since the book shows static figures instead.
    NotebookClient(notebook, timeout=900, kernel_name="python3", store_widget_state=True, record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    normalise(notebook)
    nbformat.write(notebook, path)
    return time.perf_counter() - start


def chapters(names: list[str]) -> list[pathlib.Path]:
    """The chapters ``names`` stand for (files, or starts of names in ``notebooks/``); all when empty."""
    every = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not names:
        return every
    found = []
    for name in names:
        if pathlib.Path(name).is_file():
            found.append(pathlib.Path(name))
            continue
        matches = [p for p in every if p.name.startswith(name)]
        if not matches:
            raise ValueError(f"no chapter {name!r}: name a notebook file or the start of a name in notebooks/ "
                             f"({', '.join(p.stem for p in every)})")
        found += matches
    return found


def missing_outputs(notebook) -> list[str]:
    """Why ``notebook`` (nbformat node or dict) is not fully executed: one line per code cell that should have run
    and did not, empty when none. A code cell should have run unless it is empty or tagged ``skip-execution``; it
    did when it has an execution count and shows no error (unless tagged ``raises-exception``)."""
    problems = []
    code = [cell for cell in notebook.get("cells", []) if cell.get("cell_type") == "code"]
    for number, cell in enumerate(code, 1):
        source = cell.get("source", "")
        tags = cell.get("metadata", {}).get("tags", [])
        if not "".join(source).strip() or SKIP in tags:
            continue
        if not cell.get("execution_count"):
            problems.append(f"code cell {number} of {len(code)} has no execution count")
        elif RAISES not in tags and any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            problems.append(f"code cell {number} of {len(code)} shows an error")
    return problems


def needs_execution(path: pathlib.Path) -> str | None:
    """Why the chapter at ``path`` must be executed (:func:`missing_outputs`, in one line), None if it need not."""
    problems = missing_outputs(nbformat.read(path, as_version=4))
    if not problems:
        return None
    unrun = sum("no execution count" in p for p in problems)
    errors = len(problems) - unrun
    parts = ([f"{unrun} code cell{'s' * (unrun != 1)} never run (no execution count)"] if unrun else []) \
        + ([f"{errors} showing an error"] if errors else [])
    return f"not fully executed: {' and '.join(parts)}, the first: {problems[0]}"


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module's docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapter", nargs="*", help="a notebook file or the start of a name in notebooks/ (default: all)")
    parser.add_argument("--unexecuted", action="store_true",
                        help="only the chapters not fully executed (a code cell without execution count or with an error)")
    parser.add_argument("--normalise", action="store_true", help="store in JupyterLab's form, without executing")
    args = parser.parse_args(argv)
    only_unexecuted = args.unexecuted
    try:
        paths = chapters(args.chapter)
    except ValueError as error:
        parser.error(str(error))
    if args.normalise:
        for path in paths:
            notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
            if normalise(notebook):
                nbformat.write(notebook, path)
                print(f"{path.name}: normalised", flush=True)
        return 0
    if only_unexecuted:
        reasons = {path: needs_execution(path) for path in paths}
        paths = [path for path, reason in reasons.items() if reason]
        for path in paths:
            print(f"{path.name}: {reasons[path]}", flush=True)
    for path in paths:
        print(f"{path.name}: executing ...", flush=True)
        print(f"{path.name}: {execute(path.resolve()):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
