"""The Binder environment and the package metadata agree, and the book configuration is sound."""
import pathlib
import re
import tomllib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_installs_what_the_package_needs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(item["pip"] for item in env["dependencies"] if isinstance(item, dict))
    pinned = {_name(line) for line in pip_section if not line.startswith("-")}
    runtime = {_name(r) for r in project["dependencies"]}
    assert runtime <= pinned, f"environment.yml lacks {sorted(runtime - pinned)}"
    assert "-e ." in pip_section, "environment.yml must install the course library itself"


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

    from softmax_as_linear import artifacts

    artifacts.save_json(tmp_path / "a.json", {"x": torch.arange(3), "y": np.float64(0.5), "nested": {"z": [1, 2]}})
    assert artifacts.load_json(tmp_path / "a.json") == {"x": [0, 1, 2], "y": 0.5, "nested": {"z": [1, 2]}}
    artifacts.save_npz(tmp_path / "b.npz", risk=torch.ones(2, 3))
    assert artifacts.load_npz(tmp_path / "b.npz")["risk"].shape == (2, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.npz"]
