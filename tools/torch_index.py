"""PyTorch's extra package index, kept only where it answers: pip's arguments for it, or none; and which torch is in.

    python tools/torch_index.py https://download.pytorch.org/whl/cpu              # prints: --extra-index-url https://...
    python tools/torch_index.py --required https://download.pytorch.org/whl/cu128  # exit 1 where it cannot be reached
    .venv/bin/python tools/torch_index.py --installed                              # torch 2.13.0+cpu: the CPU build

``make setup`` and ``make pip-path`` install torch with PyTorch's CPU index added to pip's. Where that index
cannot be reached (no network beyond a local mirror, a firewall), pip retries it with a growing pause for
every package it resolves: over a minute spent waiting before it settles for the other indexes. A few requests
here, with a short timeout and a pause between them (a slow handshake or a lost packet is not taken for a
blocked host), decide instead: the index answers, and pip gets it; it does not, and pip resolves from its other
indexes at once (on Linux, PyPI's torch is the CUDA build), with a message saying so. An index given on purpose
(``--required``: the Makefile passes it when TORCH_INDEX is set on the command line or in the environment) that
cannot be reached is an error instead: the build asked for is not silently replaced by another. An empty URL
prints nothing. ``--installed`` says which build of torch the running Python has (version, and CUDA, ROCm or
CPU), read from torch's own version file without importing it; ``make setup`` ends with it.
"""
from __future__ import annotations

import argparse
import importlib.util
import pathlib
import re
import sys
import time
import urllib.error
import urllib.request

TIMEOUT_S = 5.0  # for each request
ATTEMPTS = 3
PAUSE_S = 1.0  # before the second request; doubled before each one after


def _ask(page: str, timeout: float) -> str | None:
    """None when the index answered (whatever it said, unless it is failing: 5xx); else why not."""
    try:
        with urllib.request.urlopen(urllib.request.Request(page, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError as error:  # the server answered: reachable, whatever it said, unless it is failing
        return None if error.code < 500 else f"HTTP {error.code}"
    except (OSError, ValueError) as error:
        return str(getattr(error, "reason", None) or error) or type(error).__name__


def why_not(url: str, timeout: float = TIMEOUT_S, attempts: int = ATTEMPTS, pause: float = PAUSE_S) -> str | None:
    """None when the index at ``url`` answers a request for torch's page, trying ``attempts`` times, each within
    ``timeout`` seconds, pausing ``pause``, then twice as long, and so on, between them; else why it did not."""
    if not url.startswith(("http://", "https://")):
        return None  # a local index (file://) is pip's to read
    page = url.rstrip("/") + "/torch/"
    for attempt in range(attempts):
        if attempt:
            time.sleep(pause * 2 ** (attempt - 1))
        failure = _ask(page, timeout)
        if failure is None:
            return None
    return (f"{attempts} request{'s' if attempts > 1 else ''}, each allowed {timeout:g} s, over "
            f"{pause * (2 ** (attempts - 1) - 1):g} s of pauses; the last: {failure}")


def reachable(url: str, timeout: float = TIMEOUT_S, attempts: int = ATTEMPTS, pause: float = PAUSE_S) -> bool:
    """Whether the index at ``url`` answers (``why_not``)."""
    return why_not(url, timeout, attempts, pause) is None


def pip_arguments(url: str, timeout: float = TIMEOUT_S, required: bool = False, attempts: int = ATTEMPTS,
                  pause: float = PAUSE_S) -> list[str]:
    """``["--extra-index-url", url]`` when the index answers, ``[]`` when ``url`` is empty or, unless ``required``,
    when the index does not answer (with a message). A required index that does not answer raises SystemExit."""
    url = url.strip()
    if not url:
        return []
    tried = why_not(url, timeout, attempts, pause)
    if tried is None:
        return ["--extra-index-url", url]
    if required:
        raise SystemExit(f"torch_index: TORCH_INDEX={url} cannot be reached ({tried}). It was given on purpose, so "
                         "nothing is installed from elsewhere: check the address or the network, or leave TORCH_INDEX "
                         "unset for the default (PyTorch's CPU index, where it answers).")
    print(f"torch_index: {url} cannot be reached ({tried}); pip takes torch from its other indexes (PyPI's build is "
          "the CUDA one on Linux; TORCH_INDEX= chooses it on purpose). `make setup` ends by saying which it installed.",
          file=sys.stderr)
    return []


def installed_build(version_file: pathlib.Path | None = None) -> str:
    """Which torch the running Python has (or the one whose ``torch/version.py`` is given): its version and whether it
    is built for CUDA, ROCm or the CPU alone."""
    if version_file is None:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return "torch is not installed in this environment"
        version_file = pathlib.Path(spec.submodule_search_locations[0]) / "version.py"
    text = version_file.read_text()
    field = {name: re.search(rf"^{name}\s*(?::[^=]*)?=\s*'([^']*)'", text, re.M) for name in ("__version__", "cuda",
                                                                                                 "hip")}
    version = field["__version__"][1] if field["__version__"] else "of unknown version"
    if field["cuda"]:
        build = f"built for CUDA {field['cuda'][1]} (on the GPU where there is one, else the CPU)"
    elif field["hip"]:
        build = f"built for ROCm {field['hip'][1]} (on the GPU where there is one, else the CPU)"
    elif sys.platform == "darwin":
        build = "the macOS build (CPU; Apple's GPU through MPS)"
    else:
        build = "the CPU build"
    return f"torch {version}: {build}, in {version_file.parents[1]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", help="the index (an empty URL prints nothing)")
    parser.add_argument("--required", action="store_true",
                        help="exit 1 where the index cannot be reached (it was given on purpose)")
    parser.add_argument("--installed", action="store_true", help="say which torch build this Python has, and stop")
    args = parser.parse_args(argv)
    if args.installed:
        print(installed_build())
        return 0
    if args.url is None:
        parser.error("give the index's URL (an empty one for none), or --installed")
    print(" ".join(pip_arguments(args.url, required=args.required)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
