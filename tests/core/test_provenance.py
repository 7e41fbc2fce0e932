"""Provenance of results: the commit named by the environment first, then git."""
from softmax_as_linear.core import provenance


def test_provenance_reads_the_commit_from_the_environment_first(monkeypatch):
    monkeypatch.setattr(provenance, "_git", lambda *args: "stale")
    monkeypatch.setenv("SOFTMAX_AS_LINEAR_COMMIT", "0123abc")
    where = provenance.provenance("cpu", 1.0)
    assert where["commit"] == "0123abc" and where["uncommitted_changes"] is None
    monkeypatch.delenv("SOFTMAX_AS_LINEAR_COMMIT")
    assert provenance.provenance("cpu", 1.0)["commit"] == "stale"
    monkeypatch.setattr(provenance, "_git", lambda *args: None)
    assert provenance.provenance("cpu", 1.0)["commit"] is None


def test_uncommitted_changes_are_those_of_the_library(monkeypatch):
    asked = []

    def git(*args):
        asked.append(args)
        return "M src/softmax_as_linear/cli.py\n M src/softmax_as_linear/theory/models.py"
    monkeypatch.delenv("SOFTMAX_AS_LINEAR_COMMIT", raising=False)
    monkeypatch.setattr(provenance, "_git", git)
    assert provenance.library_changes() == ["src/softmax_as_linear/cli.py", "src/softmax_as_linear/theory/models.py"]
    assert asked[-1][-1] == str(provenance._PACKAGE) and provenance._PACKAGE.name == "softmax_as_linear"
    assert provenance.provenance("cpu", 1.0)["uncommitted_changes"] is True
    monkeypatch.setattr(provenance, "_git", lambda *args: "")
    assert provenance.library_changes() == [] and provenance.provenance("cpu", 1.0)["uncommitted_changes"] is False
    monkeypatch.setenv("SOFTMAX_AS_LINEAR_COMMIT", "0123abc")
    assert provenance.library_changes() is None


def test_an_untracked_module_of_the_library_is_an_uncommitted_change(monkeypatch):
    """A new file in the library that was never committed changes what a result computes: it counts."""
    monkeypatch.delenv("SOFTMAX_AS_LINEAR_COMMIT", raising=False)
    if provenance.library_changes() is None:
        import pytest

        pytest.skip("not a git checkout")
    new = provenance._PACKAGE / "_untracked_probe.py"
    new.write_text("")
    try:
        assert any(path.endswith("_untracked_probe.py") for path in provenance.library_changes())
    finally:
        new.unlink()


def _git_in(folder, *args):
    import subprocess

    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", *args],
                   cwd=folder, check=True, capture_output=True)


import pytest  # noqa: E402


@pytest.mark.parametrize("ignored", [True, False])
def test_a_library_installed_inside_another_git_project_names_no_commit(tmp_path, monkeypatch, ignored):
    """Installed with pip into a virtual environment inside a user's own git project, the library is not that
    project's: its result files name no commit (not the project's HEAD) and say its changes are unknown (not "no
    uncommitted changes"), whether the environment is ignored by that project or not."""
    project = tmp_path / "project"
    package = project / ".venv" / "lib" / "softmax_as_linear"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (project / "notes.txt").write_text("the user's own work\n")
    if ignored:
        (project / ".gitignore").write_text(".venv/\n")
    _git_in(project, "init", "-q")
    _git_in(project, "add", "notes.txt", *([".gitignore"] if ignored else []))
    _git_in(project, "commit", "-qm", "the user's project")
    monkeypatch.delenv("SOFTMAX_AS_LINEAR_COMMIT", raising=False)
    monkeypatch.setattr(provenance, "_PACKAGE", package)
    assert provenance.library_changes() is None
    where = provenance.provenance("cpu", 1.0)
    assert where["commit"] is None and where["uncommitted_changes"] is None
