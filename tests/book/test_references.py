"""Citations, cross-chapter references and numbers of the chapters, outside the book and in it.

The chapters store citations, references to another chapter and ``{doc}`` links as Markdown links into
the published book (``tools/live_references.py`` writes them), which JupyterLab, Binder and Colab show as
"Boyer & Boursier (2025)" and "(4.1)"; the book's build turns them back into roles
(``book/_ext/live_links.py``). Checked here: the chapters are up to date with the script, the links read
back as the roles they were written from, and the numbering rule the book and JupyterLab share.
"""
from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT / "tools"))

import live_links  # noqa: E402
import live_references  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def rewriter():
    """One ``Rewriter`` for the module: building it reads the bibliography and scans every chapter (about a second), and
    nothing the tests call changes it afterwards."""
    return live_references.Rewriter()


@pytest.fixture(scope="module")
def targets(rewriter):
    """Every labelled target of the chapters (``live_links.all_targets``), as the module's ``Rewriter`` scanned them."""
    return rewriter.targets


def test_the_chapters_are_up_to_date_with_the_script(rewriter, monkeypatch, capsys):
    monkeypatch.setattr(live_references, "Rewriter", lambda: rewriter)  # main() builds one per call: the same
    code = live_references.main(["--check"])
    assert code == 0, capsys.readouterr().out


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_no_role_that_jupyterlab_cannot_resolve_is_left(notebook, targets):
    doc = f"notebooks/{notebook.stem}"
    left = []
    for source in live_links.markdown_cells(notebook):
        for role, content in live_links.ROLE.findall(source):
            label = re.sub(r"^.*<([^>]+)>$", r"\1", content)
            found = targets.get(label, None)
            if role in ("cite:t", "cite:p", "doc") or found is None or found.doc != doc \
                    or not live_references.resolved_within(role, found):
                left.append(f"{{{role}}}`{content}`")
    assert not left, f"{notebook.name}: run tools/live_references.py; left: {left}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_every_chapter_tells_jupyterlab_its_numbering(notebook):
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "markdown"]
    chapter = live_links.chapter_of(f"notebooks/{notebook.stem}")
    assert "".join(cells[0]["source"]).startswith(live_links.front_matter(chapter))
    assert not any(live_links.FRONT_MATTER.match("".join(c["source"])) for c in cells[1:])


def test_links_read_back_as_the_roles_they_were_written_from(rewriter):
    base = rewriter.base
    doc = "notebooks/05_anisotropic_icl"
    roles = ("As {cite:t}`boyer2025softmax` show ({cite:p}`vuckovic2020mathematical,sander2022sinkformers`), "
             "the model {eq}`ch4-eq-task` of {prf:ref}`ch4-theorem-tracking`, the balance of {ref}`ch4-ex-balance`, "
             "{eq}`ch5-eq-limit` here, and the {doc}`notation page <../book/notation>`.")
    links = rewriter.markdown(roles, doc)
    assert "[Boyer & Boursier (2025)][boyer2025softmax]" in links
    assert "([Vuckovic et al., 2020][vuckovic2020mathematical]; [Sander et al., 2022][sander2022sinkformers])" in links
    assert "[(4.1)][ch4-eq-task]" in links and "[Exercise 4.1][ch4-ex-balance]" in links
    assert "{eq}`ch5-eq-limit`" in links, "a reference within the chapter stays a role"
    assert f"[ch4-eq-task]: {base}notebooks/04_isotropic_icl.html#equation-ch4-eq-task" in links
    assert f"[book/notation]: {base}book/notation.html" in links
    assert rewriter.markdown(links, doc) == links, "the script is not idempotent"
    back = live_links.links_to_roles(links, base, rewriter.targets, doc)
    assert back == roles.replace("{doc}`notation page <../book/notation>`", "{doc}`notation page <../book/notation>`")


def test_link_texts_follow_the_numbers(rewriter):
    stale = f"the model [(9.9)][ch4-eq-task].\n\n[ch4-eq-task]: {rewriter.base}notebooks/04_isotropic_icl.html#equation-ch4-eq-task"
    assert "[(4.1)][ch4-eq-task]" in rewriter.markdown(stale, "notebooks/05_anisotropic_icl")


def test_numbering_rule():
    cells = ["---\n<!--:\nnumbering:\n  enumerator: 3.%s\nend: -->\n---\n# Title\n\n$$ a $$ (first)\n\n$$\nb\n$$\n",
             ":::{prf:theorem} T\n:label: th\n$$ c $$ (inner)\n:::\n\n:::{prf:proof}\n:nonumber:\nx\n:::\n",
             ":::{exercise} E\n:label: ex\n:::\n\n:::{prf:remark} R\n:nonumber:\n:::\n\n```{prf:lemma} L\n:label: lem\n```\n"]
    found = {(t.kind, t.number, t.label) for t in live_links.scan("notebooks/03_x", cells)}
    assert found == {("equation", "3.1", "first"), ("equation", "3.2", ""), ("equation", "3.3", "inner"),
                     ("theorem", "3.1", "th"), ("exercise", "3.1", "ex"), ("lemma", "3.1", "lem")}
    assert {t.number for t in live_links.scan("book/notation", cells[:1])} == {"1", "2"}


def test_a_reference_link_without_its_definition_is_repaired_or_reported(rewriter):
    doc = "notebooks/08_nonlinear_icl"
    repaired = rewriter.markdown("As [Boyer & Boursier (2025)][boyer2025softmax] prove.", doc)
    assert f"[boyer2025softmax]: {rewriter.base}book/bibliography.html#cite-boyer2025softmax" in repaired
    assert live_references.unresolved_links(repaired) == []
    assert live_references.unresolved_links("See [the text][nowhere].") == [("the text", "nowhere")]
    assert live_references.unresolved_links("See [the text][Nowhere].\n\n[nowhere]: https://example.org") == []
    assert live_references.unresolved_links("Code `data[0][1]` and math $[a][b]$ are not links.") == []


def _chapter(tmp_path, cell: str) -> pathlib.Path:
    path = tmp_path / "08_nonlinear_icl.ipynb"
    cells = [{"cell_type": "markdown", "id": f"c{i}", "metadata": {}, "source": source}
             for i, source in enumerate([live_links.front_matter(8) + "# 8. A chapter\n", cell])]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1,
                               ensure_ascii=False) + "\n")
    return path


def test_check_fails_on_an_unresolved_reference_link(tmp_path, capsys, monkeypatch, rewriter):
    monkeypatch.setattr(live_references, "Rewriter", lambda: rewriter)  # main() builds one per call: the same
    broken = _chapter(tmp_path, "As [a paper][no-such-label] shows.")
    assert live_references.main(["--check", str(broken)]) == 1
    assert live_references.main([str(broken)]) == 1, "a label the script cannot resolve is reported, not dropped"
    assert "[a paper][no-such-label]" in capsys.readouterr().out
    citation = _chapter(tmp_path, "As [Boyer & Boursier (2025)][boyer2025softmax] prove.")
    assert live_references.main(["--check", str(citation)]) == 1
    assert live_references.main([str(citation)]) == 0, "a citation key is repaired by adding its definition"
    assert live_references.main(["--check", str(citation)]) == 0


def test_a_reference_to_an_exercise_of_the_chapter_becomes_a_link_into_the_book(rewriter):
    """jupyterlab-myst resolves an equation or a proof box of the notebook, not an exercise (it shows the raw label
    with a warning sign): those become links, and the book reads them back as the roles they were."""
    doc = "notebooks/04_isotropic_icl"
    roles = "the balance ({ref}`ch4-ex-balance`), the gap of {ref}`ch4-ex-linear-gap`, the model {eq}`ch4-eq-task`."
    links = rewriter.markdown(roles, doc)
    assert "([Exercise 4.1][ch4-ex-balance])" in links and "of [Exercise 4.2][ch4-ex-linear-gap]," in links
    assert "{eq}`ch4-eq-task`" in links, "an equation of the chapter stays a role: JupyterLab resolves it"
    assert f"[ch4-ex-balance]: {rewriter.base}notebooks/04_isotropic_icl.html#ch4-ex-balance" in links
    assert "{ref}" not in links
    assert rewriter.markdown(links, doc) == links, "the script is not idempotent"
    assert live_links.links_to_roles(links, rewriter.base, rewriter.targets, doc) == roles
    assert not live_references.unresolved_links(links)
