"""Keep the rendered book self-contained, so that it reads the same with no network.

- plotly.js: the pages that hold figures load, in their head and before the figures' inline scripts
  run, the vendored partial bundle ``_static/vendor/plotly.js-cartesian-dist-min`` (1.5 MB instead of
  4.8 MB) when it is the plotly.js version the installed ``plotly`` writes figures for and it has
  every trace type of the page; otherwise the full copy shipped inside ``plotly`` (then written to
  ``_static``). A version mismatch is a warning: refresh the vendored bundle (its README says how).
- ``figures.js`` (keyboard access to the figures' sliders, and to figures and formulas that scroll sideways) is
  loaded on the same pages and on pages with mathematics.
- MathJax is served locally by ``sphinx-mathjax-offline`` (see ``_config.yml``).
- Thebe (live code cells inside the page) is not used: the book has no kernel, and the chapters
  launch in Binder or Colab instead. Its loader, which names a CDN, is dropped from every page.
"""
import os
import re

import plotly
from accessible import figure_specs
from docutils import nodes
from plotly.offline import get_plotlyjs_version
from sphinx.util import logging
from sphinx.util.fileutil import copy_asset_file

logger = logging.getLogger(__name__)

PLOTLY_JS = "plotly.min.js"
PARTIAL = "vendor/plotly.js-cartesian-dist-min/plotly-cartesian.min.js"
# The trace modules of the partial bundle (its README).
PARTIAL_TRACES = {"bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour", "image",
                  "pie", "scatter", "scatterternary", "violin"}
_HERE = os.path.dirname(os.path.abspath(__file__))
# Set as the build goes: whether the vendored bundle is the version plotly writes for, whether a page needs the full one.
_STATE = {"partial": False, "full": False}


def _partial_version() -> str | None:
    path = os.path.join(_HERE, "..", "_static", PARTIAL)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        match = re.search(r"plotly\.js \(cartesian - minified\) v(\S+)", f.read(400))
    return match and match[1]


def _copy_plotly(app, exception):
    if exception is None and app.builder.format == "html" and _STATE["full"]:
        source = os.path.join(os.path.dirname(plotly.__file__), "package_data", PLOTLY_JS)
        copy_asset_file(source, os.path.join(app.outdir, "_static", PLOTLY_JS))


def _check_partial(app):
    _STATE["partial"] = _partial_version() == get_plotlyjs_version()
    if not _STATE["partial"]:
        logger.warning(f"the vendored {PARTIAL} is plotly.js v{_partial_version()}, but plotly "
                       f"{plotly.__version__} writes figures for v{get_plotlyjs_version()}: the pages load the "
                       "full bundle; refresh the vendored one (book/_static/vendor/README.md)")


def _trace_types(body: str) -> set[str]:
    return {trace.get("type", "scatter") for _, spec in figure_specs(body) for trace in spec["data"]}


def _is_thebe(asset) -> bool:
    return "sphinx-thebe" in os.fspath(asset.filename or "") or "THEBE_JS_URL" in asset.attributes.get("body", "")


def _page_assets(app, pagename, templatename, context, doctree):
    for kind in ("script_files", "css_files"):
        if kind in context:
            context[kind][:] = [asset for asset in context[kind] if not _is_thebe(asset)]
    body = context.get("body", "")
    if "plotly-graph-div" in body:  # on this page only
        outside = _trace_types(body) - PARTIAL_TRACES
        if outside:
            logger.info(f"{pagename}: trace types {sorted(outside)} are not in the partial plotly.js bundle")
        partial = _STATE["partial"] and not outside
        _STATE["full"] |= not partial
        app.add_js_file(PARTIAL if partial else PLOTLY_JS, priority=100)
    if "plotly-graph-div" in body or 'class="math' in body:
        app.add_js_file("figures.js", priority=110)


def _drop_thebe_config(app, doctree, docname):
    for node in list(doctree.findall(nodes.raw)):
        if "text/x-thebe-config" in node.astext():
            node.parent.remove(node)


def setup(app):
    app.connect("builder-inited", _check_partial)
    app.connect("build-finished", _copy_plotly)
    app.connect("html-page-context", _page_assets)
    app.connect("doctree-resolved", _drop_thebe_config, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
