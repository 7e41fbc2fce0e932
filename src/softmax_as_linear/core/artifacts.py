"""Result files: where they live, and how they are written (atomically) and read.

The *results folder* is where ``python -m softmax_as_linear reproduce`` writes by default and where
the chapters look first. It is, in this order:

1. the folder named by the environment variable ``SOFTMAX_AS_LINEAR_RESULTS``, when it is set;
2. ``results/`` of the source checkout, when the library runs from one (``pip install -e .``);
3. ``./results`` in the working directory otherwise (the library installed with ``pip install``).

The paper-scale files the chapters read (``results/*.json`` of the repository) also ship inside the
package, so a chapter that finds nothing in the results folder falls back on that copy. A file is
written to a temporary name in the same folder and renamed over the target, which is atomic on
POSIX file systems, so an interrupted run never leaves half a file. A file that is there but cannot be
read (truncated by a full disk or a copy cut short, say) raises :class:`DamagedFileError`, which names it.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import pickle
import signal
import tempfile
import threading
import zipfile
import zlib

import numpy as np

ENV_VAR = "SOFTMAX_AS_LINEAR_RESULTS"
_PACKAGE = pathlib.Path(__file__).resolve().parents[1]  # softmax_as_linear/
_CHECKOUT = _PACKAGE.parents[1]
SHIPPED = _PACKAGE / "results"  # the copy of the repository's results/*.json inside an installed package


#: How much of a reader's error a :class:`DamagedFileError` message quotes.
REASON_CHARS = 160


class DamagedFileError(Exception):
    """A file that exists but cannot be read (truncated, or not what its name says): the message names the
    file, what went wrong (the first line of ``reason``, at most :data:`REASON_CHARS` characters: a reader's
    internal text can run over pages; ``reason`` keeps it whole) and, when given, what to do (``advice``)."""

    def __init__(self, path, reason, advice: str = ""):
        self.path, self.reason, self.advice = pathlib.Path(path), str(reason), advice
        short = (self.reason.strip().splitlines() or [""])[0]
        short = short if len(short) <= REASON_CHARS else short[:REASON_CHARS - 3].rstrip() + "..."
        super().__init__(f"{self.path} is damaged and cannot be read ({short})" + (f": {advice}" if advice else ""))

    def advise(self, advice: str) -> "DamagedFileError":
        """The same error with ``advice`` (what to do about this file)."""
        return DamagedFileError(self.path, self.reason, advice)


class SettingsMismatchError(ValueError):
    """A file that is whole but was written for other settings than those asked for (a checkpoint of a sweep
    with other seeds, say): the message names the file (``path``) and what differs."""

    def __init__(self, path, message: str):
        self.path = pathlib.Path(path)
        super().__init__(message)


#: What ``numpy.load`` raises on a damaged ``.npz``: a truncated or foreign zip, a truncated array (``ValueError``, as
#: for an array that would need pickle). Only the read is guarded, so a bug after it is not read as damage.
NPZ_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, ValueError)
#: What ``torch.load`` raises on a damaged ``.pt``: a truncated zip (``RuntimeError`` of PyTorch's zip reader), a
#: foreign or truncated pickle.
CHECKPOINT_READ_ERRORS = (zipfile.BadZipFile, EOFError, pickle.UnpicklingError, RuntimeError)


def _from_checkout() -> bool:
    return (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "src" / _PACKAGE.name).is_dir()


def results_folder() -> pathlib.Path:
    """The results folder: ``$SOFTMAX_AS_LINEAR_RESULTS``, else the checkout's ``results/``, else ``./results``."""
    if os.environ.get(ENV_VAR):
        return pathlib.Path(os.environ[ENV_VAR]).expanduser()
    if _from_checkout():
        return _CHECKOUT / "results"
    return pathlib.Path("results")


# The results folder when the library was imported; read it through `results_folder()` to follow
# later changes of the environment variable or of the working directory.
RESULTS = results_folder()


def search_path(folder=None) -> list[pathlib.Path]:
    """The folders a result file is looked for in: ``folder`` alone when given, else the results folder, then the
    course's own copy: the checkout's ``results/`` (a clone) and the copy shipped with the package."""
    if folder is not None:
        return [pathlib.Path(folder)]
    checkout = [_CHECKOUT / "results"] if _from_checkout() else []  # a clone: the course's copy is there
    shipped = [SHIPPED] if SHIPPED.is_dir() else []
    return list(dict.fromkeys([results_folder(), *checkout, *shipped]))


def find_result(name: str, folder=None) -> pathlib.Path | None:
    """The first file called ``name`` along :func:`search_path`, or ``None``."""
    for place in search_path(folder):
        if (place / name).is_file():
            return place / name
    return None


def load_from_search_path(name: str, folder=None, command: str | None = None) -> dict:
    """The JSON result file ``name`` found along :func:`search_path`.

    Raises ``FileNotFoundError`` naming the file, the folders searched (absolute paths) and ``command``, the command
    that writes it (the caller knows it: :func:`softmax_as_linear.experiments.file_names.read_file` passes it).
    """
    path = find_result(name, folder)
    rebuild = command or "the reproduction command (python -m softmax_as_linear reproduce --help)"
    if path is None:
        searched = ", ".join(str(p.absolute()) for p in search_path(folder))
        raise FileNotFoundError(
            f"result file {name!r} not found (looked in {searched}). Write it into the results folder with\n"
            f"    {rebuild}\n"
            f"or set {ENV_VAR} to the absolute path of the folder that holds it.")
    try:
        return load_json(path)
    except DamagedFileError as error:
        raise error.advise(f"delete it and write it again with\n    {rebuild}") from None


def atomic_write(path, write) -> pathlib.Path:
    """Write ``path`` through ``write(stream)`` (a binary stream) so that it appears whole or not at all.

    The bytes go to a temporary file beside ``path``, are flushed to disk and then renamed over
    ``path``; an interrupted write leaves the old file (or none) and no temporary file. The new
    file gets the usual permissions (``0o666`` less the umask). Returns ``path``.

    Ctrl-C and SIGTERM arriving during the write are held until it ends (on POSIX, in the main
    thread): a checkpoint being written when a run is stopped is finished, then the run stops.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _signals_held():
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


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM for the duration and deliver them, to the handlers in place before, when it
    ends (main thread only, where Python runs signal handlers): an interrupt inside a library's writer can
    leave it raising its own error instead of ``KeyboardInterrupt``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught, previous = [], {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, lambda number, frame: caught.append((number, frame)))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for number, frame in caught[:1]:
            handler = previous[number]
            if callable(handler):
                handler(number, frame)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), number)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def jsonable(value):
    """``value`` with its arrays, tensors and NumPy scalars as lists and numbers, dict keys as strings: what
    ``json.dumps`` takes (NaN stays NaN)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def save_json(path, data: dict) -> pathlib.Path:
    """Write ``data`` (tensors and arrays become lists) as indented JSON, atomically."""
    text = json.dumps(jsonable(data), indent=1, allow_nan=True)
    return atomic_write(pathlib.Path(path), lambda stream: stream.write(text.encode()))


def load_json(path) -> dict:
    """The JSON file at ``path``; :class:`DamagedFileError` if it cannot be parsed."""
    path = pathlib.Path(path)
    try:
        return json.loads(path.read_text())
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise DamagedFileError(path, error) from None


def save_npz(path, **arrays) -> pathlib.Path:
    """Write arrays (tensors accepted) to a compressed ``.npz``, atomically."""
    arrays = {k: np.asarray(jsonable(v)) for k, v in arrays.items()}
    return atomic_write(pathlib.Path(path), lambda stream: np.savez_compressed(stream, **arrays))


def load_npz(path) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file at ``path``; :class:`DamagedFileError` if it cannot be read."""
    path = pathlib.Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except NPZ_READ_ERRORS as error:
        raise DamagedFileError(path, f"{type(error).__name__}: {error}" if str(error)
                               else type(error).__name__) from None
