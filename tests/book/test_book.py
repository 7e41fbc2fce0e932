"""The sources of the book: every chapter starts with the Colab install cell, and Binder can run it.

The first code cell of every notebook in ``notebooks/`` is the install cell of the quick tour,
tagged ``remove-cell`` and folded (JupyterLab shows its input collapsed, Colab as a form): in Colab it
fetches the repository that ``_config.yml`` names, at the branch it names, installs the library and
says where the book renders the chapter; anywhere else it does nothing. The cell is run here
through IPython's own input transformation, with a stand-in shell that records the shell commands
and magics instead of running them.
"""
from __future__ import annotations

import functools
import importlib.metadata
import pathlib
import re
import sys
import types

import nbformat
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@functools.cache  # the notebooks are only read: each is parsed and validated once
def _code_cells(path: pathlib.Path):
    return tuple(cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")


class _Shell:
    """Stands in for ``get_ipython()``: records ``!command`` and ``%magic`` calls."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []

    def system(self, command):
        self.calls.append(("!", command))

    def run_line_magic(self, name, line, _stack_depth=1):
        self.calls.append((name, line))


def _run_install_cell(source: str, monkeypatch, in_colab: bool) -> tuple[list, list]:
    """Run the cell as IPython would; returns the recorded calls and the entries added to sys.path."""
    from IPython.core.inputtransformer2 import TransformerManager

    if in_colab:
        monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    before = list(sys.path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    shell = _Shell()
    exec(compile(TransformerManager().transform_cell(source), "<install cell>", "exec"),
         {"get_ipython": lambda: shell})
    return shell.calls, [p for p in sys.path if p not in before]


def _book_url() -> str:
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import live_links

    return live_links.book_url(ROOT)


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no chapter"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_is_the_hidden_colab_install_cell(notebook, monkeypatch, capsys):
    cells = _code_cells(notebook)
    assert cells, f"{notebook.name} has no code cell"
    cell = cells[0]
    assert "remove-cell" in cell.metadata.get("tags", []), (
        f"{notebook.name}: the first code cell must be the Colab install cell, tagged remove-cell "
        "(copy the first code cell of notebooks/00_quick_tour.ipynb)")

    calls, added = _run_install_cell(cell.source, monkeypatch, in_colab=False)
    assert calls == [] and added == [], f"{notebook.name}: the install cell must do nothing outside Colab"

    # folded away: JupyterLab shows its input collapsed, Colab as a form with its title
    assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, f"{notebook.name}: fold the install cell"
    assert cell.metadata.get("cellView") == "form" and cell.source.startswith("#@title "), notebook.name

    capsys.readouterr()
    calls, added = _run_install_cell(cell.source, monkeypatch, in_colab=True)
    assert _book_url() in capsys.readouterr().out, f"{notebook.name}: in Colab, say where the chapter is rendered"
    repository, branch = CONFIG["repository"]["url"], CONFIG["repository"]["branch"]
    shell = " ".join(command for kind, command in calls if kind == "!")
    clone = re.search(r"git clone\b(.*)", shell)
    assert clone, f"{notebook.name}: in Colab the install cell must clone the repository"
    words = clone.group(1).split()
    urls = [w for w in words if w.startswith("https://")]
    assert urls == [repository], f"{notebook.name}: clones {urls}, but _config.yml names {repository}"
    assert words[words.index("--branch") + 1] == branch, f"{notebook.name}: clones another branch than {branch}"
    assert words.index(repository) + 1 < len(words), f"{notebook.name}: clone into a named folder"
    folder = words[words.index(repository) + 1]
    assert ("pip", f"install --quiet -e {folder}") in calls, f"{notebook.name}: does not install the clone"
    assert added == [f"{folder}/src"], f"{notebook.name}: the library must be importable without a restart"
    assert ("cd", f"{folder}/notebooks") in calls, f"{notebook.name}: must run from the clone's notebooks/"


def test_the_install_cell_is_the_same_in_every_notebook():
    sources = {_code_cells(notebook)[0].source for notebook in NOTEBOOKS if _code_cells(notebook)}
    assert len(sources) == 1, "the Colab install cells differ: copy the quick tour's"


# --- Binder ----------------------------------------------------------------------------------------

def _top_level_imports(notebook: pathlib.Path) -> set[str]:
    names = set()
    for cell in _code_cells(notebook)[1:]:
        for line in cell.source.splitlines():
            match = re.match(r"\s*(?:from|import)\s+([A-Za-z_]\w*)", line)
            if match:
                names.add(match.group(1))
    return names


def _distribution(name: str) -> str:
    return re.split(r"[<>=!~\[ ;@]", name.strip(), maxsplit=1)[0].lower().replace("_", "-")


@functools.cache
def _binder_distributions() -> frozenset[str]:
    """What environment.yml installs, with the direct dependencies of each of those packages."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    listed = {_distribution(d) for d in env["dependencies"] if isinstance(d, str)}
    for item in env["dependencies"]:
        if isinstance(item, dict):
            listed |= {_distribution(line) for line in item.get("pip", []) if not line.startswith("-")}
    closure = set(listed)
    for name in listed:
        try:
            closure |= {_distribution(r) for r in importlib.metadata.requires(name) or [] if "extra ==" not in r}
        except importlib.metadata.PackageNotFoundError:
            pass
    return frozenset(closure)


@functools.cache  # a scan of every installed distribution's files: the same for every chapter
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_binder_environment_provides_every_import_of_the_chapter(notebook):
    providers = _packages_distributions()
    available = _binder_distributions()
    missing = []
    for module in sorted(_top_level_imports(notebook)):
        if module in sys.stdlib_module_names or module == "softmax_as_linear":
            continue
        candidates = {_distribution(d) for d in providers.get(module, [module])}
        if not candidates & available:
            missing.append(f"{module} (from {', '.join(sorted(candidates))})")
    assert not missing, f"environment.yml does not install what {notebook.name} imports: {missing}"
