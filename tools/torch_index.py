"""PyTorch's extra package index, kept only where it answers: pip's arguments for it, or none.

    python tools/torch_index.py https://download.pytorch.org/whl/cpu   # prints: --extra-index-url https://...

``make setup`` and ``make pip-path`` install torch with PyTorch's CPU index added to pip's. Where that index
cannot be reached (no network beyond a local mirror, a firewall), pip retries it with a growing pause for
every package it resolves: over a minute spent waiting before it settles for the other indexes. One request
here, with a short timeout, decides instead: the index answers, and pip gets it; it does not, and pip resolves
from its other indexes at once (on Linux, PyPI's torch is the CUDA build), with a message saying so.
An empty URL prints nothing.
"""
from __future__ import annotations

import sys
import urllib.error
import urllib.request

TIMEOUT_S = 5.0


def reachable(url: str, timeout: float = TIMEOUT_S) -> bool:
    """Whether the index at ``url`` answers a request for torch's page within ``timeout`` seconds."""
    if not url.startswith(("http://", "https://")):
        return True  # a local index (file://) is pip's to read
    page = url.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(urllib.request.Request(page, method="HEAD"), timeout=timeout):
            return True
    except urllib.error.HTTPError as error:  # the server answered: reachable, whatever it said
        return error.code < 500
    except (OSError, ValueError):
        return False


def pip_arguments(url: str, timeout: float = TIMEOUT_S) -> list[str]:
    """``["--extra-index-url", url]`` when the index answers, ``[]`` when it does not or ``url`` is empty."""
    url = url.strip()
    if not url:
        return []
    if reachable(url, timeout):
        return ["--extra-index-url", url]
    print(f"torch_index: {url} cannot be reached (no answer within {timeout:g} s); pip takes torch from its "
          "other indexes (PyPI's build is the CUDA one on Linux; TORCH_INDEX= chooses it on purpose)",
          file=sys.stderr)
    return []


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/torch_index.py URL   (an empty URL prints nothing)")
    print(" ".join(pip_arguments(sys.argv[1])))
