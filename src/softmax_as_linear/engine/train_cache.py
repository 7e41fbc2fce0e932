"""Trained sweeps kept in a folder and reused while the configuration and the code that trains them are unchanged.

Opt-in: :func:`~softmax_as_linear.engine.train.train` looks here only when the environment variable
``SOFTMAX_AS_LINEAR_TRAIN_CACHE`` names a folder (``make nbval``, ``make live`` and ``make test`` set it to
``.cache/sweeps``), and only for a plain run: no ``init_weights``, ``checkpoint`` or ``should_stop``. A sweep is
stored under a key (:func:`key`) that is the SHA-256 of

* the whole resolved configuration (:meth:`~softmax_as_linear.engine.sweep.TrainConfig.as_dict`), the device (its
  type, and its name on CUDA), the code path asked for, whether CUDA graphs are allowed, and whether a fallback is
  an error (``SOFTMAX_AS_LINEAR_STRICT``, :mod:`~softmax_as_linear.engine.gpu.fallback`);
* the versions of torch and NumPy;
* the source of every module of the package that :mod:`~softmax_as_linear.engine.train` imports, directly or
  through other modules of the package (:func:`engine_sources`, found by reading their ``import`` statements; the
  package's top-level ``__init__.py``, which only re-exports names, is not followed), as it was when this process
  imported the engine (:func:`running_digest`).

So any change to any of these trains again. A cached sweep is the :class:`~softmax_as_linear.engine.sweep.TrainResult`
that the same call returned when it trained (its ``seconds`` are that run's), written with
:func:`~softmax_as_linear.engine.sweep.save_sweep`; a stopped (incomplete) run is never stored. On a CPU the
arithmetic is the same whatever the number of threads, up to the order of floating-point sums, which the thread
count is therefore not part of the key. A file that cannot be read is trained again and rewritten.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import pathlib

import numpy as np
import torch

from ..core.artifacts import DamagedFileError
from .gpu import fallback
from .sweep import TrainConfig, TrainResult, load_sweep, save_sweep

ENV = "SOFTMAX_AS_LINEAR_TRAIN_CACHE"
PACKAGE = pathlib.Path(__file__).resolve().parents[1]
ROOT_MODULE = "engine/train.py"


def folder() -> pathlib.Path | None:
    """The cache folder named by ``SOFTMAX_AS_LINEAR_TRAIN_CACHE`` (absolute), or None when it is unset or empty."""
    value = os.environ.get(ENV, "").strip()
    return pathlib.Path(value).expanduser().resolve() if value else None


def _module_file(package: pathlib.Path, dotted: str) -> list[pathlib.Path]:
    """Files that importing ``dotted`` (relative to the folder ``package``) runs: each package's ``__init__.py`` on
    the way and the module itself (``x.py`` or ``x/__init__.py``)."""
    files, here = [], package
    for part in [p for p in dotted.split(".") if p]:
        if (here / part).is_dir():
            here = here / part
            files.append(here / "__init__.py")
        elif (here / f"{part}.py").is_file():
            files.append(here / f"{part}.py")
            break
        else:
            break
    return [f for f in files if f.is_file()]


def _imports(path: pathlib.Path, root: pathlib.Path) -> set[pathlib.Path]:
    """The package's files that the module ``path`` imports, at its top level or inside functions."""
    package = path.parent
    found: set[pathlib.Path] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.parent
            elif node.module and node.module.split(".")[0] == root.name:
                base = root.parent
            else:
                continue
            module = node.module or ""
            found.update(_module_file(base, module))
            here = base.joinpath(*module.split(".")) if module else base
            for alias in node.names:  # `from . import x`: x may be a module
                found.update(_module_file(here, alias.name) if here.is_dir() else [])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == root.name:
                    found.update(_module_file(root.parent, alias.name))
    return {f.resolve() for f in found if f.resolve() != (root / "__init__.py").resolve()}


def engine_sources(root: pathlib.Path = PACKAGE) -> list[pathlib.Path]:
    """Every file of the package ``root`` that ``engine/train.py`` imports, directly or not, itself included;
    sorted. Each subpackage's ``__init__.py`` on the way is included; the top-level one is not followed."""
    root = pathlib.Path(root).resolve()
    start = (root / ROOT_MODULE).resolve()
    packages = {folder / "__init__.py" for folder in start.parents if root in folder.parents}  # engine/__init__.py
    seen = {start} | {p.resolve() for p in packages if p.is_file()}
    todo = list(seen)
    while todo:
        for found in _imports(todo.pop(), root) - seen:
            seen.add(found)
            todo.append(found)
    return sorted(seen)


def source_digest(root: pathlib.Path = PACKAGE) -> str:
    """SHA-256 of the relative path and bytes of each file of :func:`engine_sources` (about 0.15 s)."""
    root = pathlib.Path(root).resolve()
    digest = hashlib.sha256()
    for path in engine_sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


# The source of the engine this process runs: taken when it is imported (with the cache in use), not when a sweep is
# stored, so that a file edited after the import (in a kernel not yet restarted) cannot label what the old code trained.
_running: str | None = source_digest() if folder() is not None else None


def running_digest() -> str:
    """:func:`source_digest` of the package as this process imported it (taken at the first call when the cache was
    not in use at import)."""
    global _running
    if _running is None:
        _running = source_digest()
    return _running


def key(config: TrainConfig, device: torch.device, path: str = "auto", cuda_graph: bool = True,
        root: pathlib.Path = PACKAGE) -> str:
    """The cache key of training ``config`` (resolved: ``rng`` is not ``"auto"``) on ``device``: SHA-256 of
    everything the trained sweep depends on (see the module's docstring)."""
    device = torch.device(device)
    described = {
        "config": config.as_dict(),
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "",
        "path": path,
        "cuda_graph": bool(cuda_graph) and device.type == "cuda",
        "strict": fallback.strict(),  # under strict mode a fallback is an error, not another path's sweep
        "torch": torch.__version__,
        "numpy": np.__version__,
        "source": running_digest() if pathlib.Path(root).resolve() == PACKAGE else source_digest(root),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def file_of(cache: pathlib.Path, cache_key: str) -> pathlib.Path:
    return pathlib.Path(cache) / f"sweep_{cache_key}.npz"


def load(cache: pathlib.Path, cache_key: str, config: TrainConfig) -> TrainResult | None:
    """The sweep stored under ``cache_key``, or None when there is none, it cannot be read, or it holds another
    configuration (a collision, or a file put there by hand)."""
    file = file_of(cache, cache_key)
    if not file.is_file():
        return None
    try:
        result = load_sweep(file)
    except (DamagedFileError, OSError):
        return None
    return result if result.config.as_dict() == config.as_dict() and result.complete else None


def store(cache: pathlib.Path, cache_key: str, result: TrainResult) -> None:
    """Write ``result`` under ``cache_key`` (atomically: a reader sees the whole file or none), when complete."""
    if result.complete:
        pathlib.Path(cache).mkdir(parents=True, exist_ok=True)
        save_sweep(file_of(cache, cache_key), result)
