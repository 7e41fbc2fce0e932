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


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_a_write_is_held_until_the_file_is_whole(tmp_path):
    def write(stream):
        os.kill(os.getpid(), signal.SIGINT)  # arrives in the middle of the write
        stream.write(b"whole")

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "c.pt", write)
    assert (tmp_path / "c.pt").read_bytes() == b"whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]
