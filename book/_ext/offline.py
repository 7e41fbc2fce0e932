"""Keep the rendered book self-contained, so that it reads the same with no network.

- plotly.js: the copy shipped inside the installed ``plotly`` package is written to ``_static`` and
  loaded in the head of the pages that hold figures, before the figures' inline scripts run.
- MathJax is served locally by ``sphinx-mathjax-offline`` (see ``_config.yml``).
- Thebe (live code cells inside the page) is not used: the book has no kernel, and the chapters
  launch in Binder or Colab instead. Its loader, which names a CDN, is dropped from every page.
"""
import os

import plotly
from docutils import nodes
from sphinx.util.fileutil import copy_asset_file

PLOTLY_JS = "plotly.min.js"


def _copy_plotly(app, exception):
    if exception is None and app.builder.format == "html":
        source = os.path.join(os.path.dirname(plotly.__file__), "package_data", PLOTLY_JS)
        copy_asset_file(source, os.path.join(app.outdir, "_static", PLOTLY_JS))


def _is_thebe(asset) -> bool:
    return "sphinx-thebe" in os.fspath(asset.filename or "") or "THEBE_JS_URL" in asset.attributes.get("body", "")


def _page_assets(app, pagename, templatename, context, doctree):
    for kind in ("script_files", "css_files"):
        if kind in context:
            context[kind][:] = [asset for asset in context[kind] if not _is_thebe(asset)]
    if "plotly-graph-div" in context.get("body", ""):
        app.add_js_file(PLOTLY_JS, priority=100)  # on this page only


def _drop_thebe_config(app, doctree, docname):
    for node in list(doctree.findall(nodes.raw)):
        if "text/x-thebe-config" in node.astext():
            node.parent.remove(node)


def setup(app):
    app.connect("build-finished", _copy_plotly)
    app.connect("html-page-context", _page_assets)
    app.connect("doctree-resolved", _drop_thebe_config, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
