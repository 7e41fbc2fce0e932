"""Serve plotly.js from the built site itself, so figures draw with no network.

Copies the ``plotly.min.js`` shipped inside the installed ``plotly`` package into ``_static`` and
loads it in the head of every page, before the figures' inline scripts run.
"""
import os

import plotly
from sphinx.util.fileutil import copy_asset_file

FILENAME = "plotly.min.js"


def _source() -> str:
    return os.path.join(os.path.dirname(plotly.__file__), "package_data", FILENAME)


def _copy(app, exception):
    if exception is None and app.builder.format == "html":
        copy_asset_file(_source(), os.path.join(app.outdir, "_static", FILENAME))


def setup(app):
    app.add_js_file(FILENAME, priority=100)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
