"""The files vendored so that the book and its tests need no network are the ones their READMEs name."""
import hashlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
READMES = [ROOT / "book" / "_static" / "vendor" / "README.md", ROOT / "tests" / "vendor" / "README.md"]
ROW = re.compile(r"^\| `(?P<file>[^`]+)` \| npm `(?P<package>[^@`]+)@(?P<version>[^`]+)` \| (?P<licence>[^ ]+) .*"
                 r"\| `(?P<sha256>[0-9a-f]{64})` \|$", re.M)


def _rows():
    return [(readme, match) for readme in READMES for match in ROW.finditer(readme.read_text())]


def test_every_vendored_file_is_listed():
    listed = {readme.parent / match["file"] for readme, match in _rows()}
    scripts = {p for readme in READMES for p in readme.parent.rglob("*.js")}
    assert scripts and scripts == listed


@pytest.mark.parametrize("readme, row", [pytest.param(*r, id=r[1]["file"]) for r in _rows()])
def test_vendored_file_is_the_named_release_with_its_licence(readme, row):
    path = readme.parent / row["file"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == row["sha256"], f"{path}: update {readme}"
    assert f"v{row['version']}" in path.read_text(encoding="utf-8")[:300], f"{path} is not version {row['version']}"
    licence = (path.parent / "LICENSE").read_text()
    assert {"MIT": "MIT License", "MPL-2.0": "Mozilla Public License, version 2.0"}[row["licence"]] in licence


def test_the_partial_plotly_bundle_is_the_version_plotly_writes_for():
    from plotly.offline import get_plotlyjs_version

    (row,) = [match for readme, match in _rows() if match["package"] == "plotly.js-cartesian-dist-min"]
    assert row["version"] == get_plotlyjs_version(), "refresh book/_static/vendor (its README says how)"
