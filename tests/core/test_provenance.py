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
