"""tools/torch_index.py: PyTorch's index goes to pip where it answers, decided by a few quick requests; an index given
on purpose that does not answer stops the set-up; and which torch build is installed is said.

Local servers stand in for the index: one that answers (404 for every page: an index without the page still
answers), one that accepts connections and never answers (a blocked host, a handshake that never ends), one that
is failing (503) once and then answers.
"""
from __future__ import annotations

import http.server
import pathlib
import socket
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def torch_index(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import torch_index

    return torch_index


class _Index(http.server.BaseHTTPRequestHandler):
    """Answers HEAD with 404; with 503 for the first ``failures`` requests of its server."""

    def do_HEAD(self):
        self.server.requests += 1
        self.send_response(503 if self.server.requests <= self.server.failures else 404)
        self.end_headers()

    def log_message(self, *args):  # quiet, for this handler only
        pass


def _serve(failures: int = 0):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    httpd.requests, httpd.failures = 0, failures
    # shutdown() waits for the loop's next look at its flag: every 0.05 s, not the default 0.5 s
    threading.Thread(target=httpd.serve_forever, kwargs=dict(poll_interval=0.05), daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/whl/cpu"


@pytest.fixture
def server():
    httpd, url = _serve()
    yield url
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def silent():
    """An index that accepts every connection and never answers; yields its URL and the connections it accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted, stop = [], threading.Event()

    def accept():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])  # held open, never read nor answered
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/whl/cpu", accepted
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


def test_an_index_that_answers_is_passed_to_pip(torch_index, server):
    assert torch_index.pip_arguments(server) == ["--extra-index-url", server]
    assert torch_index.pip_arguments(server, required=True) == ["--extra-index-url", server]


def test_an_index_failing_once_is_asked_again(torch_index):
    httpd, url = _serve(failures=1)
    try:
        assert torch_index.pip_arguments(url, pause=0.05) == ["--extra-index-url", url]
        assert httpd.requests == 2
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_index_that_never_answers_is_tried_a_few_times_then_left_out_with_a_message(torch_index, silent, capsys):
    url, accepted = silent
    start = time.monotonic()
    assert torch_index.pip_arguments(url, timeout=0.3, attempts=3, pause=0.1) == []
    elapsed = time.monotonic() - start
    assert 3 * 0.3 + 0.1 + 0.2 <= elapsed < 5  # three requests, each given its timeout, with the pauses between
    assert len(accepted) == 3
    message = capsys.readouterr().err
    assert url in message and "3 requests, each allowed 0.3 s" in message and "CUDA" in message


def test_an_index_given_on_purpose_that_never_answers_stops_the_set_up(torch_index, silent):
    url, accepted = silent
    start = time.monotonic()
    with pytest.raises(SystemExit, match=rf"TORCH_INDEX={url} cannot be reached .*given on purpose"):
        torch_index.pip_arguments(url, timeout=0.3, attempts=2, pause=0.1, required=True)
    assert time.monotonic() - start < 4 and len(accepted) == 2


def test_an_index_that_cannot_be_reached_is_left_out_at_once_with_a_message(torch_index, server, capsys):
    closed = server.rsplit(":", 1)[0] + ":9/whl/cpu"  # the discard port: nothing listens there
    start = time.monotonic()
    assert torch_index.pip_arguments(closed, timeout=2.0, pause=0.1) == []
    assert time.monotonic() - start < 2.0  # refused at once, three times
    assert closed in capsys.readouterr().err


def test_empty_and_local_indexes(torch_index, capsys):
    assert torch_index.pip_arguments("") == [] == torch_index.pip_arguments("  ")
    assert torch_index.pip_arguments("", required=True) == []  # TORCH_INDEX= : PyPI's build, on purpose
    assert torch_index.pip_arguments("file:///opt/index") == ["--extra-index-url", "file:///opt/index"]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("fields, build", [
    ("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip: Optional[str] = None", "2.13.0+cpu: the CPU build"),
    ("__version__ = '2.13.0'\ncuda: Optional[str] = '12.8'\nhip: Optional[str] = None",
     "2.13.0: built for CUDA 12.8"),
    ("__version__ = '2.13.0+rocm6.4'\ncuda: Optional[str] = None\nhip: Optional[str] = '6.4.4'",
     "2.13.0+rocm6.4: built for ROCm 6.4.4"),
])
def test_the_installed_build_is_read_from_torchs_version_file(torch_index, tmp_path, monkeypatch, fields, build):
    monkeypatch.setattr(torch_index.sys, "platform", "linux")
    version_file = tmp_path / "site-packages" / "torch" / "version.py"
    version_file.parent.mkdir(parents=True)
    version_file.write_text(f"from typing import Optional\n{fields}\ngit_version = 'abc'\n")
    assert torch_index.installed_build(version_file).startswith(f"torch {build}")


def test_the_installed_build_here_is_the_one_torch_reports(torch_index):
    import torch

    said = torch_index.installed_build()
    assert said.startswith(f"torch {torch.__version__}: ")
    assert ("CUDA" in said) == (torch.version.cuda is not None)
