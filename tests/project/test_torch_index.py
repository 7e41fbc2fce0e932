"""tools/torch_index.py: PyTorch's index is handed to pip only where it answers, decided by one quick request."""
from __future__ import annotations

import http.server
import pathlib
import sys
import threading
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import torch_index  # noqa: E402


@pytest.fixture
def server():
    """A local index that answers every request with 404 (an index without the page still answers)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    httpd.RequestHandlerClass.log_message = lambda *args: None
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/whl/cpu"
    httpd.shutdown()


def test_an_index_that_answers_is_passed_to_pip(server):
    assert torch_index.pip_arguments(server) == ["--extra-index-url", server]


def test_an_index_that_cannot_be_reached_is_left_out_at_once_with_a_message(server, capsys):
    closed = server.rsplit(":", 1)[0] + ":9/whl/cpu"  # the discard port: nothing listens there
    start = time.monotonic()
    assert torch_index.pip_arguments(closed, timeout=2.0) == []
    assert time.monotonic() - start < 2.5
    assert closed in capsys.readouterr().err


def test_empty_and_local_indexes(capsys):
    assert torch_index.pip_arguments("") == [] == torch_index.pip_arguments("  ")
    assert torch_index.pip_arguments("file:///opt/index") == ["--extra-index-url", "file:///opt/index"]
    assert capsys.readouterr().err == ""
