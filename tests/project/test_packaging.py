"""The Binder environment and the package metadata agree, and the book configuration is sound.

Also: what the package ships (the results files), its licences and citation, and what `make setup`
and `make lab` run (the GitHub workflows: test_workflows.py). The installed package itself is tried by
`make pip-path` (tools/check_pip_install.py).
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

from softmax_as_linear import registry

ROOT = pathlib.Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pip_section() -> list[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    return next(item["pip"] for item in env["dependencies"] if isinstance(item, dict))


def _make(*args: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", "-B", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_pip_path_check_needs_only_the_standard_library():
    """`make test` runs tools/check_pip_install.py with the system's Python, beside the set-up of .venv: it and
    what it imports (the rule for printed text, the index probe) load on a Python without site-packages."""
    script = ("import sys; sys.path.insert(0, 'tools'); import check_pip_install, nbval_outputs; "
              "print(nbval_outputs.compare_text('risk 0.5', 'risk 0.5', nbval_outputs.Tolerance(0.01, 0.0, 'a test')))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


def test_environment_yml_installs_what_the_package_needs():
    pip_section = _pip_section()
    pinned = {_name(line) for line in pip_section if not line.startswith("-")}
    extras = _project()["optional-dependencies"]
    needed = {_name(r) for r in _project()["dependencies"] + extras["lab"] + extras["cluster"]}
    assert needed <= pinned, f"environment.yml lacks {sorted(needed - pinned)}"
    assert "-e ." in pip_section, "environment.yml must install the course library itself"


def test_environment_yml_pins_versions_the_package_accepts_and_make_setup_installs(monkeypatch):
    from importlib.metadata import version

    monkeypatch.syspath_prepend(str(ROOT / "tools"))  # taken off sys.path after the test
    import pins

    extras = _project()["optional-dependencies"]
    ranges = {_name(r): Requirement(r) for r in _project()["dependencies"] + extras["lab"] + extras["cluster"]}
    for line in (line for line in _pip_section() if not line.startswith("-")):
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"environment.yml must pin {line} (== version): Binder builds what CI tests"
        allowed = ranges.get(_name(line))
        if allowed is not None:
            assert allowed.specifier.contains(spec.version), f"{line} is outside pyproject's {allowed}"
        if requirement.name != "torch":  # `make setup` installs exactly these versions (torch: TORCH=...)
            assert version(requirement.name) == spec.version, f"{requirement.name}: run `make setup`"
    constraints = pins.constraints((ROOT / "environment.yml").read_text())
    assert constraints and not any(c.startswith("torch") for c in constraints)
    assert len(constraints) == len([line for line in _pip_section() if not line.startswith("-")]) - 1


def test_torch_is_the_cpu_build_in_make_setup_and_in_environment_yml():
    makefile = (ROOT / "Makefile").read_text()
    torch_default = re.search(r"^TORCH\s*\?=\s*(\S+)", makefile, re.M).group(1)
    assert torch_default in _pip_section(), "environment.yml and the Makefile must pin the same torch"
    assert f"--extra-index-url {CPU_INDEX}" in _pip_section()
    setup = _make("setup")
    # the CPU index goes to pip where it answers (tools/torch_index.py prints `--extra-index-url URL`, or nothing)
    assert f'"{torch_default}" $(python3 tools/torch_index.py "{CPU_INDEX}")' in setup
    assert "-c .venv/pins.txt" in setup
    assert 'tools/torch_index.py "")' in _make("setup", "TORCH_INDEX=")  # the documented GPU override: no index


def test_make_lab_listens_on_localhost_and_runs_as_root():
    command = next(line for line in _make("lab").replace("\\\n", " ").splitlines() if "jupyter lab" in line)
    assert "--ip 127.0.0.1" in command
    assert ("--allow-root" in command) == (os.getuid() == 0)


def test_chapters_import_only_what_the_package_requires():
    from importlib.metadata import packages_distributions

    requires = {_name(r) for r in _project()["dependencies"]}
    provided = {"softmax_as_linear", "IPython"} | set(sys.stdlib_module_names)  # IPython: via ipywidgets
    for module, distributions in packages_distributions().items():
        if any(_name(d) in requires for d in distributions):
            provided.add(module)
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for module in re.findall(r"^\s*(?:import|from)\s+(\w+)", "".join(cell["source"]), re.M):
                assert module in provided, f"{notebook.name} imports {module}, which pyproject does not require"


def test_results_ship_inside_the_package():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"]["softmax_as_linear.results"] == "results"
    assert "softmax_as_linear.results" in setuptools["packages"]
    assert setuptools["package-data"]["softmax_as_linear.results"] == ["*.json"]
    source = ROOT / "src" / "softmax_as_linear"
    subpackages = {p.parent.relative_to(source.parent).as_posix().replace("/", ".") for p in source.rglob("*.py")}
    assert subpackages <= set(setuptools["packages"]), "a subpackage is missing from [tool.setuptools] packages"
    chapters = "".join(path.read_text() for path in (ROOT / "notebooks").glob("*.ipynb"))
    for name in re.findall(r"(fig\d_paper)", chapters):
        assert (ROOT / "results" / f"{name}.json").is_file(), name


def test_every_shipped_result_says_where_it_came_from():
    """Every file in results/ records at least its device, torch version, commit and wall time (book/reproduce.md
    names the two older files that record no more)."""
    for path in sorted((ROOT / "results").glob("*.json")):
        provenance = json.loads(path.read_text()).get("provenance") or {}
        missing = {"device", "torch", "commit", "wall_seconds"} - set(provenance)
        assert not missing, f"{path.name}: its provenance lacks {sorted(missing)}"

def test_results_folder_rule(tmp_path, monkeypatch):
    from softmax_as_linear.core import artifacts
    from softmax_as_linear.experiments import result_files

    monkeypatch.delenv(artifacts.ENV_VAR, raising=False)
    assert artifacts.results_folder() == ROOT / "results"  # a source checkout
    assert artifacts.find_result("fig2_paper.json") == ROOT / "results" / "fig2_paper.json"
    monkeypatch.setenv(artifacts.ENV_VAR, str(tmp_path))
    assert artifacts.results_folder() == tmp_path  # a folder without the file: the course's copy is read
    assert artifacts.find_result("fig2_paper.json") == ROOT / "results" / "fig2_paper.json"
    assert artifacts.find_result("fig2_lecture.json") is None  # a file the course does not ship
    with pytest.raises(FileNotFoundError, match=r"fig2_lecture\.json.*\n.*reproduce fig2 fig3 fig4 --preset lecture"):
        result_files.load_result("fig2_lecture.json")
    artifacts.save_json(tmp_path / "fig2_paper.json", {"complete": True})
    assert artifacts.load_result("fig2_paper.json") == {"complete": True}
    monkeypatch.setattr(artifacts, "SHIPPED", ROOT / "results")  # as in an installed package
    monkeypatch.delenv(artifacts.ENV_VAR)
    monkeypatch.setattr(artifacts, "_from_checkout", lambda: False)
    monkeypatch.chdir(tmp_path)
    assert artifacts.results_folder() == pathlib.Path("results")
    assert artifacts.find_result("fig3_paper.json") == ROOT / "results" / "fig3_paper.json"


def test_licences_and_citation():
    assert _project()["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License")
    content = (ROOT / "LICENSE-CONTENT").read_text()
    assert "Attribution 4.0 International" in content and "Section 8 -- Interpretation." in content
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == _project()["license"]
    assert {"message", "title", "authors"} <= set(citation)
    assert str(citation["version"]) == registry.VERSION
    paper = citation["references"][0]
    assert {a["family-names"] for a in paper["authors"]} == {"Boyer", "Boursier"} and paper["year"] == 2025
    assert any("2512.11784" in i["value"] for i in paper["identifiers"])
    readme = (ROOT / "README.md").read_text()
    assert "LICENSE-CONTENT" in readme and "CC BY 4.0" in readme and "CITATION.cff" in readme


def test_book_configuration_links_the_issues_and_the_licences():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["html"]["use_issues_button"] is True and "CC BY 4.0" in config["html"]["extra_footer"]


def test_every_chapter_in_the_toc_exists_and_every_notebook_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    files = re.findall(r"file:\s*(\S+)", toc)
    for entry in files:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), entry
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        assert f"notebooks/{notebook.stem}" in files, f"{notebook.name} is not in _toc.yml"


def test_artifacts_round_trip_and_leave_no_temporary_file(tmp_path):
    import numpy as np
    import torch

    from softmax_as_linear.core import artifacts

    artifacts.save_json(tmp_path / "a.json", {"x": torch.arange(3), "y": np.float64(0.5), "nested": {"z": [1, 2]}})
    assert artifacts.load_json(tmp_path / "a.json") == {"x": [0, 1, 2], "y": 0.5, "nested": {"z": [1, 2]}}
    artifacts.save_npz(tmp_path / "b.npz", risk=torch.ones(2, 3))
    assert artifacts.load_npz(tmp_path / "b.npz")["risk"].shape == (2, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.npz"]
