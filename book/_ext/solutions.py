"""Fold a solution's code cell into the solution in the book, as JupyterLab folds it under the solution.

A solution that runs code is written in a chapter for JupyterLab (jupyterlab-myst renders one cell at a time): a
``solution`` box that ends its Markdown cell, then its code cells, tagged ``solution`` and folded by their
``jupyter.source_hidden`` and ``jupyter.outputs_hidden`` metadata (:data:`NOTE`, the box's last line, says so).
At ``source-read`` the book turns that into sphinx-exercise's gated form, which folds the text, the code and what
it prints into one box: the box opens with ``solution-start`` instead of ``solution``, loses its closing fence and
its note, and a ``solution-end`` cell follows its last code cell. :func:`gated` does it on a notebook.
"""
from __future__ import annotations

import json
import re

#: The last line of a solution box followed by its code: what JupyterLab shows of the folded cells below it.
NOTE = ("*The code of this solution, and what it prints, follow in the cells folded below this box: click a cell's"
        " bar to show it.*")

TAG = "solution"
_BOX = re.compile(r"^(?P<fence>:{3,})\{solution\}(?P<rest>[^\n]*)\n(?P<body>.*?)\n(?P=fence)[ \t]*\n?\Z", re.S | re.M)


def _is_solution_code(cell: dict) -> bool:
    return cell["cell_type"] == "code" and TAG in cell.get("metadata", {}).get("tags", [])


def solution_box(source: str) -> re.Match | None:
    """The ``solution`` box that ends ``source`` (a Markdown cell's text), if one does: the last fence of the cell
    opens it and nothing but its closing fence follows its body."""
    starts = [m.start() for m in re.finditer(r"^:{3,}\{solution\}", source, re.M)]
    if not starts:
        return None
    match = _BOX.match(source, starts[-1])
    if match is None or re.search(rf"^{match['fence']}[ \t]*$", match["body"], re.M):
        return None
    return match


def gated(notebook: dict) -> list[str]:
    """Rewrite ``notebook`` (nbformat JSON) in place: every solution box followed by code cells tagged ``solution``
    becomes ``solution-start`` ... ``solution-end`` around those cells. Returns the problems found (a tagged cell
    with no box before it, a box followed by its note but no tagged cell), each naming the cell."""
    cells, out, problems = notebook["cells"], [], []
    i = 0
    while i < len(cells):
        cell = cells[i]
        out.append(cell)
        i += 1
        if cell["cell_type"] != "markdown":
            if _is_solution_code(cell):
                problems.append(f"cell {cell.get('id', i - 1)}: a code cell tagged {TAG!r} with no solution box"
                                " ending the Markdown cell before it")
            continue
        source = "".join(cell["source"])
        box = solution_box(source)
        code = []
        while i < len(cells) and _is_solution_code(cells[i]):
            code.append(cells[i])
            i += 1
        if box is None:
            if code:
                problems.append(f"cell {code[0].get('id', i - len(code))}: a code cell tagged {TAG!r} with no"
                                " solution box ending the Markdown cell before it")
            out.extend(code)
            continue
        body = box["body"]
        if not code:
            if NOTE in body:
                problems.append(f"cell {cell.get('id', '?')}: a solution box says its code follows, and no code"
                                f" cell tagged {TAG!r} does")
            out.extend(code)
            continue
        options = re.match(r"(?:[ \t]*:[\w-]+:[^\n]*\n)*", body + "\n")[0]        # :class: dropdown, ...
        text = body[len(options):].replace(NOTE, "").strip()
        cell["source"] = (source[:box.start()] + f"{box['fence']}{{solution-start}}{box['rest']}\n{options}"
                          f"{box['fence']}\n\n{text}\n")
        out.extend(code)
        out.append({"cell_type": "markdown", "id": f"{code[-1].get('id', 'solution')}-end", "metadata": {},
                    "source": f"{box['fence']}{{solution-end}}\n{box['fence']}\n"})
    notebook["cells"] = out
    return problems


def _source_read(app, docname: str, source: list[str]):
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    notebook = json.loads(source[0])
    for problem in gated(notebook):
        from sphinx.util import logging

        logging.getLogger(__name__).warning(problem, location=docname)
    source[0] = json.dumps(notebook)


def setup(app):
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
