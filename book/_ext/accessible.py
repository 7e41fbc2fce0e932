"""Make the built pages accessible: figures with a text alternative and keyboard sliders, theme fixes.

- Every plotly figure is wrapped in a ``<figure>`` named by its title and captioned with what it
  shows (the library's :func:`softmax_as_linear.figures.style.describe`, the same text
  ``style.show`` stores with a figure); a figure already wrapped by ``style.show`` is left alone.
- ``figures.js`` (in ``_static``) makes each precomputed slider reachable with Tab and movable with
  the arrow keys, on the pages that hold figures.
- A few attributes of the theme's markup that fail WCAG checks (axe-core) are corrected in the
  written pages: the search button and the summaries of folded cells are named by their visible
  text, the colour-mode icons carry no title (the button is named "Color mode"), the entries of
  the bibliography are list items, and the book's title in the sidebar sits in a navigation
  landmark ("Home"). A fix that no longer finds its markup is reported as a warning (so the strict
  build fails): the theme changed and the fix must be looked at again.
"""
from __future__ import annotations

import json
import os
import re

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

_NEWPLOT = re.compile(r'Plotly\.newPlot\(\s*"(?P<id>[^"]+)",\s*')
_COMMA = re.compile(r"\s*,\s*")


def figure_specs(html: str) -> list[tuple[str, dict]]:
    """(div id, ``{"data", "layout"}``) of every ``Plotly.newPlot`` call in ``html`` (plotly's own HTML)."""
    decoder, found = json.JSONDecoder(), []
    for match in _NEWPLOT.finditer(html):
        data, end = decoder.raw_decode(html, match.end())
        comma = _COMMA.match(html, end)
        if comma is None:
            raise ValueError(f"no layout after the data of figure {match['id']}")
        layout, _ = decoder.raw_decode(html, comma.end())
        found.append((match["id"], {"data": data, "layout": layout}))
    return found


def _wrap_figures(app, doctree, docname):
    from softmax_as_linear.figures import style

    for node in list(doctree.findall(nodes.raw)):
        text = node.astext()
        if "html" not in node.get("format", "") or "plotly-graph-div" not in text or "sal-figure" in text:
            continue
        try:
            specs = figure_specs(text)
        except ValueError as error:  # JSON that does not decode, or a call without its layout
            logger.warning(f"a plotly figure whose JSON cannot be read has no text alternative: {error}",
                           location=node)
            continue
        if len(specs) != 1:
            logger.warning(f"expected one plotly figure in an output, found {len(specs)}", location=node)
            continue
        div_id, spec = specs[0]
        html = style.accessible_figure(text, spec, div_id)
        node.parent.replace(node, nodes.raw("", html, format="html"))


# (what it fixes, markup written by the theme or docutils, the same markup fixed)
THEME_FIXES = [
    ("search button named by its visible text (label-content-name-mismatch)",
     re.compile(r'(<button class="btn search-button-field search-button__button[^"]*" title="Search") aria-label="Search"'),
     r"\1"),
    ("colour-mode icons without a title of their own (label-content-name-mismatch)",
     re.compile(r'(<i class="theme-switch fa-solid [^"]*" data-mode="\w+")\s+title="[^"]*"'),
     r"\1"),
    ("folded cells named by their visible text (label-content-name-mismatch)",
     re.compile(r'<summary aria-label="Toggle hidden content">'),
     "<summary>"),
    ("bibliography entries are list items (aria-required-children)",
     re.compile(r'(<div class="citation" id="[^"]+") role="doc-biblioentry"'),
     r'\1 role="listitem"'),
    ("the book's title in the sidebar inside a landmark, as all content is (region)",
     re.compile(r'(?<!<nav aria-label="Home">)(<a class="navbar-brand logo" href="[^"]*">.*?</a>)', re.DOTALL),
     r'<nav aria-label="Home">\1</nav>'),
]
# What every page of the theme must show once fixed: (fix, the element is there, the element is still wrong).
EVERY_PAGE = [
    (THEME_FIXES[0][0], 'class="btn search-button-field', re.compile(r'<button class="btn search-button-field[^>]*aria-label=')),
    (THEME_FIXES[1][0], 'class="theme-switch fa-solid', re.compile(r'<i class="theme-switch[^>]*title=')),
    (THEME_FIXES[4][0], 'class="navbar-brand logo"', re.compile(r'(?<!<nav aria-label="Home">)<a class="navbar-brand logo"')),
]


def _fix_pages(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    missing = {fix: [] for fix, _, _ in EVERY_PAGE}
    for folder, folders, files in os.walk(app.outdir):
        folders[:] = [f for f in folders if not f.startswith("_")]  # _static, _sources, _images
        for name in (name for name in files if name.endswith(".html")):
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            fixed = text
            for _, pattern, replacement in THEME_FIXES:
                fixed = pattern.sub(replacement, fixed)
            if fixed != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(fixed)
            if 'class="bd-main"' in text:  # a page of the theme (not a redirect); fixed now or by an earlier build
                for fix, present, wrong in EVERY_PAGE:
                    if present not in fixed or wrong.search(fixed):
                        missing[fix].append(os.path.relpath(path, app.outdir))
    for fix, pages in missing.items():
        if pages:
            logger.warning(f"accessibility fix not applied, the theme's markup changed: {fix} "
                           f"(pages: {', '.join(sorted(pages)[:3])}); update book/_ext/accessible.py")


def setup(app):
    app.connect("doctree-resolved", _wrap_figures)
    app.connect("build-finished", _fix_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
