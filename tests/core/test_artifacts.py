"""Atomic writes: whole or absent, and an interrupt during a write is delivered once the file is whole."""
import os
import signal
import sys

import pytest

from softmax_as_linear.core.artifacts import atomic_write


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = atomic_write(tmp_path / "f.bin", lambda stream: stream.write(b"old"))

    def fail(stream):
        stream.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, fail)
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]


@pytest.fixture
def sigint_handler():
    """Install a SIGINT handler for one test and restore the one before: the tests must not depend on how
    pytest was launched (under `nohup`, in a background job or on some CI runners SIGINT is ignored)."""
    previous = signal.getsignal(signal.SIGINT)

    def install(handler):
        signal.signal(signal.SIGINT, handler)

    yield install
    signal.signal(signal.SIGINT, previous)


def _write_interrupted(stream):
    os.kill(os.getpid(), signal.SIGINT)  # arrives in the middle of the write
    stream.write(b"whole")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_a_write_is_held_until_the_file_is_whole(tmp_path, sigint_handler):
    sigint_handler(signal.default_int_handler)  # Python's own: Ctrl-C raises KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "c.pt", _write_interrupted)
    assert (tmp_path / "c.pt").read_bytes() == b"whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_an_ignored_ctrl_c_stays_ignored_after_a_write(tmp_path, sigint_handler):
    sigint_handler(signal.SIG_IGN)  # as under `nohup` or in a background job
    atomic_write(tmp_path / "c.pt", _write_interrupted)
    assert (tmp_path / "c.pt").read_bytes() == b"whole"
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_a_write_reaches_the_handler_in_place_once(tmp_path, sigint_handler):
    received = []
    sigint_handler(lambda number, frame: received.append(number))
    atomic_write(tmp_path / "c.pt", _write_interrupted)
    assert received == [signal.SIGINT] and (tmp_path / "c.pt").read_bytes() == b"whole"


def test_a_bug_is_not_read_as_a_damaged_file(tmp_path, monkeypatch):
    """Only what a damaged file raises becomes DamagedFileError: a KeyError, or a ValueError of the checkpoint reader,
    is a bug and is raised as it is."""
    import numpy as np
    import torch

    from softmax_as_linear.core import artifacts
    from softmax_as_linear.engine.sweep import TrainConfig, load_checkpoint, save_checkpoint

    path = artifacts.save_npz(tmp_path / "a.npz", x=np.arange(3))
    monkeypatch.setattr(np, "load", lambda *a, **k: (_ for _ in ()).throw(KeyError("x")))
    with pytest.raises(KeyError):
        artifacts.load_npz(path)
    monkeypatch.undo()
    cfg = TrainConfig(steps=1)
    checkpoint = save_checkpoint(tmp_path / "c.pt", {"config": cfg.as_dict()})
    monkeypatch.setattr(torch, "load", lambda *a, **k: (_ for _ in ()).throw(ValueError("a bug")))
    with pytest.raises(ValueError, match="a bug"):
        load_checkpoint(checkpoint, cfg, "cpu")


def test_a_results_folder_without_the_file_falls_back_to_the_course_copy(tmp_path, monkeypatch):
    """With ``SOFTMAX_AS_LINEAR_RESULTS`` naming a folder that lacks a file (a reproduction's --out folder, say), a
    chapter reads the course's own copy: in a clone, the checkout's results/ (where the package's copy is not)."""
    from softmax_as_linear.core import artifacts

    monkeypatch.setenv(artifacts.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(artifacts, "SHIPPED", tmp_path / "no-shipped-copy")  # a clone: nothing inside the package
    if not artifacts._from_checkout():
        import pytest

        pytest.skip("not a source checkout")
    found = artifacts.find_result("nonlinear_depth_lecture.json")
    assert found == artifacts._CHECKOUT / "results" / "nonlinear_depth_lecture.json"
    (tmp_path / "nonlinear_depth_lecture.json").write_text("{}")
    assert artifacts.find_result("nonlinear_depth_lecture.json") == tmp_path / "nonlinear_depth_lecture.json"
