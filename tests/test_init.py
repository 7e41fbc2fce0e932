"""The package: its docstring lists every module, public names load on first use, and importing it
loads neither the plotting nor the widget libraries."""
import pathlib
import re
import subprocess
import sys

import softmax_as_linear as sal

PACKAGE = pathlib.Path(sal.__file__).parent


def test_the_docstring_lists_every_module_of_the_tree():
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    listed = set(re.findall(r":mod:`~softmax_as_linear\.(\w+)`", sal.__doc__)) | set(re.findall(r"``(_\w+)``", sal.__doc__))
    assert listed == modules, f"listed but absent: {sorted(listed - modules)}; absent from the list: {sorted(modules - listed)}"


def test_public_names_resolve_lazily():
    assert sal.TrainConfig.__module__ == "softmax_as_linear.sweep"
    assert sal.RegressionTask.__module__ == "softmax_as_linear.icl"
    assert sal.style.__name__ == "softmax_as_linear.style"
    for name in sal.__all__:
        assert getattr(sal, name) is not None, name
    assert {"TrainConfig", "style", "seeding"} <= set(dir(sal))


def test_import_is_light():
    code = ("import sys, softmax_as_linear as sal; sal.TrainConfig; import softmax_as_linear.__main__; "
            "print(sorted(m for m in ('plotly', 'ipywidgets', 'IPython') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_module_is_a_lazy_attribute():
    modules = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(sal._SUBMODULES)
