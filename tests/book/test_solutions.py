"""A solution that runs code (book/_ext/solutions.py): in a chapter, a solution box whose code cells follow it folded
(what JupyterLab shows); in the book, one folded box around the text, the code and its output (sphinx-exercise's
gated form)."""
import copy
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import solutions  # noqa: E402

CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _markdown(source: str, id_: str = "m") -> dict:
    return {"cell_type": "markdown", "id": id_, "metadata": {}, "source": source}


def _code(tags=("solution",), id_: str = "c") -> dict:
    return {"cell_type": "code", "id": id_, "metadata": {"tags": list(tags)}, "source": "print(1)", "outputs": [],
            "execution_count": 1}


BOX = (":::{exercise} Ridge\n:label: ex-ridge\n\nShow it.\n:::\n\n:::{solution} ex-ridge\n:class: dropdown\n\n"
       f"With $a$ it follows.\n\nComputed below.\n\n{solutions.NOTE}\n:::\n")


def test_a_box_and_its_code_become_one_gated_solution():
    notebook = {"cells": [_markdown(BOX), _code(id_="c1"), _code(id_="c2"), _markdown("## Next", "n")]}
    assert solutions.gated(notebook) == []
    sources = ["".join(c["source"]) for c in notebook["cells"]]
    assert sources[0] == (":::{exercise} Ridge\n:label: ex-ridge\n\nShow it.\n:::\n\n"
                          ":::{solution-start} ex-ridge\n:class: dropdown\n:::\n\nWith $a$ it follows.\n\nComputed below.\n")
    assert sources[1:] == ["print(1)", "print(1)", ":::{solution-end}\n:::\n", "## Next"]
    assert notebook["cells"][3]["id"] == "c2-end" and solutions.NOTE not in sources[0]


def test_boxes_without_code_and_the_gated_form_are_left_as_they_are():
    plain = ":::{solution} ex\n:class: dropdown\n\nNo code.\n:::\n"
    gated = ":::{solution-start} ex\n:class: dropdown\n:::\n\nText.\n"
    notebook = {"cells": [_markdown(plain), _code(tags=()), _markdown(gated, "g"), _code(tags=(), id_="d"),
                          _markdown(":::{solution-end}\n:::\n", "e")]}
    before = copy.deepcopy(notebook)
    assert solutions.gated(notebook) == [] and notebook == before


def test_a_tagged_cell_without_its_box_and_a_note_without_code_are_reported():
    notebook = {"cells": [_markdown("Some text.\n"), _code(id_="lost")]}
    assert "cell lost" in solutions.gated(notebook)[0]
    notebook = {"cells": [_markdown(BOX, "box"), _code(tags=())]}
    assert "cell box" in solutions.gated(notebook)[0]
    # a box that does not end its cell is not the box the code belongs to
    notebook = {"cells": [_markdown(BOX + "\nMore text.\n", "late"), _code(id_="x")]}
    assert "cell x" in solutions.gated(notebook)[0]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_solution_code_cell_is_folded_in_jupyterlab_and_inside_its_solution_in_the_book(chapter):
    notebook = json.loads(chapter.read_text())
    tagged = [c for c in notebook["cells"] if solutions.TAG in c["metadata"].get("tags", [])]
    for cell in tagged:  # folded in JupyterLab, code and output, and the box above says so
        assert cell["metadata"].get("jupyter") == {"source_hidden": True, "outputs_hidden": True}, cell["id"]
    notes = sum("".join(c["source"]).count(solutions.NOTE) for c in notebook["cells"] if c["cell_type"] == "markdown")
    assert solutions.gated(notebook) == []
    ends = [c for c in notebook["cells"] if "".join(c["source"]).startswith(":::{solution-end}")]
    assert notes <= len(ends)
    # in the book, every code cell between a solution-start and its solution-end is a solution's
    inside = False
    for cell in notebook["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            inside = (inside or ":::{solution-start}" in text) and not text.startswith(":::{solution-end}")
        elif inside and tagged:
            assert solutions.TAG in cell["metadata"].get("tags", []), f"{chapter.stem}: cell {cell['id']}"
