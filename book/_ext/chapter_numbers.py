"""Number the book's exercises, boxes and equations as JupyterLab numbers the chapters: ``Exercise 2.3``.

Sphinx counts exercises, theorem-like boxes and labelled equations across the whole book (Chapter 2's
first exercise would be "Exercise 6"), while JupyterLab's MyST renderer counts per notebook and
numbers every display equation. The book follows the notebooks' rule (``live_links.scan``):

- every display equation of a page's text is numbered, labelled or not;
- numbers restart on every page, each kind on its own, and on a chapter's page
  (``notebooks/NN_*``) they carry the chapter's number: ``Exercise 4.1``, ``Theorem 4.2``, ``(4.3)``.
  The chapters ask JupyterLab for the same prefix in their front matter (``tools/live_references.py``);
- a ``{prf:proof}`` box may say ``:nonumber:`` (JupyterLab would number it; the book never does).

The strict build checks that every labelled target gets the number the rule gives it.
"""
from __future__ import annotations

import pathlib

import live_links
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx_proof.directive import ProofDirective

logger = logging.getLogger(__name__)


class UnnumberedProof(ProofDirective):
    """``{prf:proof}``, which also accepts JupyterLab's ``:nonumber:`` (the book never numbers proofs)."""

    option_spec = {**ProofDirective.option_spec, "nonumber": directives.flag}


def _in_output(node: nodes.Node) -> bool:
    while node is not None:
        if isinstance(node, nodes.container) and "cell_output" in node.get("classes", []):
            return True
        node = node.parent
    return False


def _number_every_equation(app, doctree):
    """Give each unlabelled display equation of the text an id and a number, so that Sphinx counts it."""
    unlabelled = 0
    for node in doctree.findall(nodes.math_block):
        if node.get("nowrap") or node["ids"] or _in_output(node):
            continue
        unlabelled += 1
        node["ids"] = [f"equation-unlabelled-{unlabelled}"]
        node["number"] = unlabelled
        node["docname"] = app.env.docname


def _renumber(app, env):
    """Per page and per kind from 1, with the chapter's number in front on a chapter's page."""
    changed = set()
    for docname, kinds in env.toc_fignumbers.items():
        chapter = live_links.chapter_of(docname)
        prefix = (chapter,) if chapter is not None else ()
        for figtype, numbers in kinds.items():
            ordered = sorted(numbers, key=numbers.__getitem__)
            renumbered = {key: prefix + (position + 1,) for position, key in enumerate(ordered)}
            if renumbered != numbers:
                kinds[figtype] = renumbered
                changed.add(docname)
    return sorted(changed)


def _check(app, env):
    """Every labelled target of the chapters has, in the book, the number JupyterLab gives it."""
    for target in live_links.all_targets(pathlib.Path(app.confdir)).values():
        kinds = env.toc_fignumbers.get(target.doc, {})
        figtype = "displaymath" if target.kind == "equation" else target.kind
        number = kinds.get(figtype, {}).get(target.anchor)
        shown = ".".join(map(str, number)) if number else None
        if shown != target.number:
            logger.warning(f"{target.label}: the book numbers it {shown}, JupyterLab {target.number} "
                           "(see book/_ext/live_links.py, scan)", location=target.doc)


def setup(app):
    app.setup_extension("sphinx_proof")
    app.add_directive_to_domain("prf", "proof", UnnumberedProof, override=True)
    app.connect("doctree-read", _number_every_equation)
    app.connect("env-get-updated", _renumber, priority=900)
    app.connect("env-check-consistency", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
