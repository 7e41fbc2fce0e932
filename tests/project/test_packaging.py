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


def _constraints() -> list[str]:
    """The requirements of constraints.txt (the book's and the tests' tools)."""
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def _make(*args: str, env: dict | None = None) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in (os.environ if env is None else env).items() if k not in ("MAKEFLAGS", "MAKELEVEL")}
    done = subprocess.run(["make", "--no-print-directory", "-n", "-B", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)  # as from a shell, also when run by `make check`
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def pins(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import pins

    return pins


def test_the_pip_path_check_needs_only_the_standard_library():
    """`make test` runs tools/check_pip_install.py with the system's Python, beside the set-up of .venv: it and
    what it imports (the rule for printed text, the index probe) load on a Python without site-packages."""
    script = ("import sys; sys.path.insert(0, 'tools'); import check_pip_install, nbval_outputs; "
              "print(nbval_outputs.compare_text('risk 0.5', 'risk 0.5', nbval_outputs.Tolerance(0.01, 0.0, 'a test')))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


def test_environment_yml_installs_what_running_the_chapters_needs_and_no_test_tool():
    """What Binder builds (and `make lab` installs): the library and JupyterLab's extra, nothing of the book's build,
    the tests or a cluster; the book's and the tests' tools are pinned in constraints.txt instead."""
    pip_section = _pip_section()
    pinned = {_name(line) for line in pip_section if not line.startswith("-")}
    extras = _project()["optional-dependencies"]
    needed = {_name(r) for r in _project()["dependencies"] + extras["lab"]}
    assert needed <= pinned, f"environment.yml lacks {sorted(needed - pinned)}"
    assert "-e ." in pip_section, "environment.yml must install the course library itself"
    tools = {_name(r) for r in extras["book"] + extras["test"] + extras["cluster"]} - needed
    assert not pinned & tools, f"environment.yml lists tools a student does not need: {sorted(pinned & tools)}"
    assert tools - {"triton"} <= {_name(line) for line in _constraints()}, "constraints.txt must pin every tool"
    assert "triton" not in {_name(line) for line in _constraints()}  # PyPI's CUDA torch requires its own Triton


def test_the_pins_are_versions_the_package_accepts_and_make_setup_installs(pins):
    from importlib.metadata import version

    extras = _project()["optional-dependencies"]
    ranges = {_name(r): Requirement(r) for r in _project()["dependencies"] + sum(extras.values(), [])}
    pinned = [line for line in _pip_section() if not line.startswith("-")] + _constraints()
    for line in pinned:
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{line} must be pinned (== version): Binder and CI install what is tested"
        allowed = ranges.get(_name(line))
        if allowed is not None:
            assert allowed.specifier.contains(spec.version), f"{line} is outside pyproject's {allowed}"
        if requirement.name != "torch":  # `make setup` installs exactly these versions (torch: TORCH=...)
            assert version(requirement.name) == spec.version, f"{requirement.name}: run `make setup`"
    constraints = [line for path in pins.FILES for line in pins.constraints(path.read_text(), path)]
    assert constraints and not any(c.startswith("torch") for c in constraints)
    assert len(constraints) == len(pinned) - 1  # all but torch


def test_pins_reads_both_files_and_lists_what_else_is_installed(pins, tmp_path):
    environment = tmp_path / "environment.yml"
    environment.write_text("dependencies:\n  - pip:\n      - --extra-index-url https://x\n      - torch==2.13.0\n"
                           "      - numpy==2.4.6\n      - -e .\n")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# the tools\npytest==9.2.0\nruff==0.17.6  # lint\n\n")
    assert pins.main([str(environment), str(constraints)]) == 0
    assert [pins.constraints(path.read_text(), path) for path in (environment, constraints)] == [
        ["numpy==2.4.6"], ["pytest==9.2.0", "ruff==0.17.6"]]
    held = pins.installed([environment, constraints])
    names = {_name(line.split("==")[0]) for line in held}
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+==\S+", line) for line in held) and "pyyaml" in names
    assert not names & {"numpy", "pytest", "ruff", "torch", "softmax-as-linear"}  # pinned, or the course itself


def test_torch_is_the_cpu_build_in_make_setup_and_in_environment_yml():
    makefile = (ROOT / "Makefile").read_text()
    torch_default = re.search(r"^TORCH\s*\?=\s*(\S+)", makefile, re.M).group(1)
    assert torch_default in _pip_section(), "environment.yml and the Makefile must pin the same torch"
    assert f"--extra-index-url {CPU_INDEX}" in _pip_section()
    env = {k: v for k, v in os.environ.items() if k != "TORCH_INDEX"}
    setup = _make("setup", env=env).splitlines()
    # the CPU index goes to pip where it answers (tools/torch_index.py prints `--extra-index-url URL`, or nothing);
    # the default index may be left out, one given on purpose may not (--required)
    assert f'python3 tools/torch_index.py "{CPU_INDEX}" > .venv/torch-index' in setup
    assert f'.venv/bin/python -m pip install --quiet "{torch_default}" $(cat .venv/torch-index)' in setup
    assert ".venv/bin/python tools/torch_index.py --installed" == setup[-1]  # `make setup` ends saying which torch
    given = _make("setup", "TORCH_INDEX=https://download.pytorch.org/whl/cu128", env=env)
    assert 'tools/torch_index.py --required "https://download.pytorch.org/whl/cu128" >' in given
    assert 'tools/torch_index.py --required "https://example.org/whl" >' in _make(
        "setup", env={**env, "TORCH_INDEX": "https://example.org/whl"})
    assert 'tools/torch_index.py --required "" >' in _make("setup", "TORCH_INDEX=", env=env)  # the GPU override
    assert "--torch-index-required" in _make("pip-path", "TORCH_INDEX=", env=env)
    assert "--torch-index-required" not in _make("pip-path", env=env)


def test_each_command_installs_only_its_extras_holding_what_is_installed(tmp_path):
    """A student's `make lab` installs the lab extra alone; `make book` the book's; `make test`, `make check` and
    `make setup` every extra in one pip call. Each time with the pins and with what is installed held at its
    version, then `pip check`."""
    def installs(*target):
        return [line.split(" || ")[0] for line in _make(*target).replace("\\\n", " ").splitlines()
                if "pip install --quiet" in line and '-e ".' in line]

    held = "-c .venv/pins.txt -c .venv/installed.txt"
    assert installs("lab") == [f'.venv/bin/python -m pip install --quiet {held} -e ".[lab]"']
    assert installs("book") == [f'.venv/bin/python -m pip install --quiet {held} -e ".[book]"']
    for target in ("setup", "check", "unit", "nbval", "lint"):
        assert installs(target) == [f'.venv/bin/python -m pip install --quiet {held} -e ".[book,test,lab,cluster]"']
    lab = [line.split(" || ")[0] for line in _make("lab").replace("\\\n", " ").splitlines()]
    assert "make clean, then the same command" in _make("lab")  # where pip cannot add an extra, what to do
    assert lab.index(".venv/bin/python tools/pins.py --installed environment.yml constraints.txt > "
                     ".venv/installed.txt") < lab.index(installs("lab")[0]) < lab.index(".venv/bin/python -m pip check")
    assert ".venv/bin/python tools/pins.py environment.yml constraints.txt > .venv/pins.txt" in lab
    # the stamps: once the tests' extras are in, the lab's and the book's are too
    assert "touch .venv/.ready-test .venv/.ready-lab .venv/.ready-book" in _make("setup")


@pytest.mark.parametrize("target", ["lab", "setup", "test", "pip-path"])
def test_an_old_python_is_named_in_one_sentence_before_anything_is_installed(tmp_path, target):
    """A Python older than 3.11 (a stand-in that reports 3.10.12): the command stops at once with one sentence,
    before a virtual environment is made or pip is asked for anything."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    python = tmp_path / "python3.10"
    python.write_text(f"#!{sys.executable}\nimport sys\nsys.version_info = (3, 10, 12, 'final', 0)\n"
                      "if sys.argv[1:2] != ['-c']:\n    sys.exit('this stand-in runs only -c')\nexec(sys.argv[2])\n")
    python.chmod(0o755)
    done = subprocess.run(["make", "--no-print-directory", target, f"PYTHON={python}", f"VENV={tmp_path / 'venv'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == ("Python 3.11 or newer is needed (found 3.10.12); name one with PYTHON=, "
                                           f"e.g. make {target} PYTHON=python3.12")
    assert not (tmp_path / "venv").exists()


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
    assert artifacts.load_from_search_path("fig2_paper.json") == {"complete": True}
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
