"""The package: its docstring lists every module, its folders are layers that import only downwards,
public names load on first use, and importing it loads neither torch's users nor the plotting libraries."""
import ast
import functools
import pathlib
import re
import subprocess
import sys

import softmax_as_linear as sal

PACKAGE = pathlib.Path(sal.__file__).parent
# Lowest first: a module may import from its own layer and the layers before it.
LAYERS = ("registry", "core", "theory", "engine", "experiments", "figures", "panels", "exercises", "cli")


@functools.cache
def _modules() -> dict[str, pathlib.Path]:
    return {".".join(p.relative_to(PACKAGE).with_suffix("").parts): p for p in PACKAGE.rglob("*.py")
            if p.stem not in ("__init__", "__main__")}


@functools.cache
def _tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text())


def _layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def _imports(module: str, path: pathlib.Path) -> set[str]:
    """The modules of the package that ``module`` imports (relative or absolute imports)."""
    package = module.split(".")[:-1]
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("softmax_as_linear"):
                target = node.module.removeprefix("softmax_as_linear").lstrip(".")
            else:
                continue
            names = [a.name for a in node.names]
            for candidate in [f"{target}.{n}" if target else n for n in names] + [target]:
                if candidate in _modules():
                    found.add(candidate)
                    break
    return found


def test_the_docstring_lists_every_module_of_the_tree():
    listed = set(re.findall(r":mod:`~softmax_as_linear\.([\w.]+)`", sal.__doc__))
    modules = set(_modules())
    assert listed == modules, f"listed but absent: {sorted(listed - modules)}; absent from the list: {sorted(modules - listed)}"


def test_the_api_reference_documents_every_module_once():
    # book/api.md and book/api/*.md: one automodule per module and package; the book's strict build
    # (-W -n) then checks every docstring's markup and cross-references.
    root = PACKAGE.parents[1]
    pages = [root / "book" / "api.md", *sorted((root / "book" / "api").glob("*.md"))]
    documented = [m for page in pages for m in re.findall(r"^\.\. automodule:: softmax_as_linear\.?([\w.]*)$",
                                                          page.read_text(), re.M)]
    packages = {".".join(p.relative_to(PACKAGE).parent.parts) for p in PACKAGE.rglob("__init__.py")}
    expected = set(_modules()) | packages
    assert len(documented) == len(set(documented)), f"documented twice: {sorted({m for m in documented if documented.count(m) > 1})}"
    assert set(documented) == expected, (f"documented but absent: {sorted(set(documented) - expected)}; "
                                         f"missing from the API reference: {sorted(expected - set(documented))}")
    toc = (root / "_toc.yml").read_text()
    assert all(f"file: {page.relative_to(root).with_suffix('')}" in toc for page in pages), "an API page is not in _toc.yml"


def test_every_module_says_its_one_job_in_its_first_sentence():
    # The docstring opens with one sentence, alone in its paragraph and short enough to read at a glance,
    # that ends in a full stop (or a colon before a list): one job, stated once.
    abbreviations = re.compile(r"\b(e\.g|i\.e|cf|etc|vs)\.")
    for module, path in _modules().items():
        doc = ast.get_docstring(_tree(path))
        assert doc and doc.strip(), f"{module} has no docstring"
        first = " ".join(doc.split("\n\n")[0].split())
        assert first.endswith((".", ":")), f"{module}: the docstring's first paragraph is not a sentence: {first!r}"
        assert not re.search(r"[.!?]\s+[A-Z(`]", abbreviations.sub("", first[:-1])), \
            f"{module}: the docstring's first paragraph holds more than one sentence: {first!r}"
        assert len(first) <= 300, f"{module}: the docstring's first sentence is {len(first)} characters long"


def test_layers_import_only_downwards_and_have_no_cycles():
    graph = {m: _imports(m, p) for m, p in _modules().items()}
    for module, targets in graph.items():
        for target in targets:
            assert _layer(target) <= _layer(module), f"{module} (layer {LAYERS[_layer(module)]}) imports {target}"
    # no cycles between modules (depth-first search)
    state = {}

    def visit(m, trail):
        if state.get(m) == "open":
            raise AssertionError(f"import cycle: {' -> '.join(trail + [m])}")
        if state.get(m) == "done":
            return
        state[m] = "open"
        for t in graph[m]:
            visit(t, trail + [m])
        state[m] = "done"

    for m in graph:
        visit(m, [])


def test_public_names_resolve_lazily():
    assert sal.TrainConfig.__module__ == "softmax_as_linear.engine.sweep"
    assert sal.RegressionTask.__module__ == "softmax_as_linear.theory.regression"
    for name in sal.__all__:
        assert getattr(sal, name) is not None, name
    assert sal.figures.__name__ == "softmax_as_linear.figures"
    assert {"TrainConfig", "theory", "engine"} <= set(dir(sal))


def test_the_public_names_are_those_the_package_docstring_lists():
    """``dir(sal)`` and the attributes a session finds (tab completion, the API page) are the names the docstring's
    paragraph "Public names" lists, whatever was loaded before: no helper of ``__init__`` such as ``importlib``."""
    import softmax_as_linear.experiments.reproduce  # noqa: F401  (loads submodules, which become attributes)

    paragraph = sal.__doc__.partition("Public names")[2].split("\n\n")[0]
    listed = set(re.findall(r"``(\w+)``", paragraph)) - {"__version__"}
    public = {name for name in dir(sal) if not name.startswith("_")}
    assert public == listed and set(sal.__all__) <= listed
    assert {name for name in vars(sal) if not name.startswith("_")} <= listed
    assert "importlib" not in public and "VERSION" not in public


def test_import_is_light():
    # One fresh interpreter, read twice: what importing the package and its command line loads, then what a command
    # loads on top (the engine and the experiments, not the figures nor scipy.stats; importing more first can only
    # add to sys.modules, so the second reading is no laxer than in an interpreter of its own).
    code = ("import sys, softmax_as_linear as sal; import softmax_as_linear.__main__; "
            "print(sorted(m for m in ('torch', 'plotly', 'ipywidgets', 'IPython') if m in sys.modules)); "
            "sal.TrainConfig; import softmax_as_linear.experiments.reproduce; "
            "print([m for m in ('plotly', 'ipywidgets', 'scipy.stats') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    package, command = out.strip().splitlines()
    assert package == "[]"
    assert command == "[]"


def test_the_version_has_one_source():
    from softmax_as_linear import registry

    assert sal.__version__ == registry.VERSION
    text = (PACKAGE.parents[1] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and 'attr = "softmax_as_linear.registry.VERSION"' in text
    assert f"version: {registry.VERSION}" in (PACKAGE.parents[1] / "CITATION.cff").read_text()
