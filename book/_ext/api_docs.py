"""The API reference's docstrings (book/api.md): Google-style sections through napoleon, constants as prose.

Napoleon reads the first line of a constant's docstring (a ``#:`` comment) as ``type: description``,
so "Where computations run: ..." would become a reference to a class named "Where computations run".
The library writes no types there (they are in the code), so constants and attributes skip napoleon.
"""
from sphinx.ext import napoleon


def _google_sections(app, what, name, obj, options, lines):
    if what not in ("data", "attribute"):
        napoleon._process_docstring(app, what, name, obj, options, lines)


def setup(app):
    app.setup_extension("sphinx.ext.napoleon")
    for listener in list(app.events.listeners["autodoc-process-docstring"]):
        if listener.handler is napoleon._process_docstring:
            app.disconnect(listener.id)
    app.connect("autodoc-process-docstring", _google_sections)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
