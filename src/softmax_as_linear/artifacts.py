"""Small result files (JSON, NPZ) written atomically, so an interrupted run never leaves half a file.

``results/`` holds the artifacts of the reproduction command; chapters load them with
:func:`load_json` / :func:`load_npz`. A file is written to a temporary name in the same folder and
renamed over the target, which is atomic on POSIX file systems.
"""
from __future__ import annotations

import json
import os
import pathlib
import tempfile

import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "results"


def _atomic_write(path: pathlib.Path, write) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes owner-only files; results are for everyone
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def save_json(path, data: dict) -> pathlib.Path:
    """Write ``data`` (tensors and arrays become lists) as indented JSON, atomically."""
    text = json.dumps(_jsonable(data), indent=1, allow_nan=True)
    return _atomic_write(pathlib.Path(path), lambda stream: stream.write(text.encode()))


def load_json(path) -> dict:
    return json.loads(pathlib.Path(path).read_text())


def save_npz(path, **arrays) -> pathlib.Path:
    """Write arrays (tensors accepted) to a compressed ``.npz``, atomically."""
    arrays = {k: np.asarray(_jsonable(v)) for k, v in arrays.items()}
    return _atomic_write(pathlib.Path(path), lambda stream: np.savez_compressed(stream, **arrays))


def load_npz(path) -> dict[str, np.ndarray]:
    with np.load(pathlib.Path(path), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}
