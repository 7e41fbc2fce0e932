"""Progress lines for long computations: transient in a notebook that a person runs, none where a tool executes it.

A chapter cell that trains for more than a moment (:func:`~softmax_as_linear.engine.train.train`, by default) shows a
line with a bar, the step, the time taken and the time left, emptied when the computation ends, where a person runs
the notebook (JupyterLab, Jupyter Notebook, Colab: :func:`interactive`), and nothing where a tool executes it
(``tools/execute_notebooks.py``, nbval): the chapters' stored outputs never hold it, and the stored form of a chapter
drops one that a saved session holds (its output is marked :data:`TRANSIENT`).
"""
from __future__ import annotations

import html
import math
import os
import sys
import time

#: ``1`` shows the transient progress lines wherever a kernel runs, ``0`` never; unset, :func:`interactive` decides.
PROGRESS_VAR = "SOFTMAX_AS_LINEAR_PROGRESS"
#: The metadata key that marks a transient progress output, which the stored form of a chapter drops.
TRANSIENT = "softmax_as_linear_transient"


def interactive() -> bool:
    """Whether a person watches this kernel's outputs: an IPython kernel started by a Jupyter server for a notebook
    (it sets ``JPY_SESSION_NAME``) or Colab's; not plain Python, nor a kernel that nbclient or nbval starts.
    :data:`PROGRESS_VAR` overrides it."""
    forced = os.environ.get(PROGRESS_VAR, "")
    if forced in ("0", "1"):
        return forced == "1"
    from IPython.core.getipython import get_ipython

    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return False
    return bool(os.environ.get("JPY_SESSION_NAME")) or "google.colab" in sys.modules


class TransientProgress:
    """A progress line in the running cell's output: a ``<progress>`` bar, the step, the time taken and the time
    left, refreshed at most every ``every`` seconds, and emptied by ``close()`` (its output is marked
    :data:`TRANSIENT`, so that a saved chapter drops it). The calls of a tqdm bar: ``update()``,
    ``set_postfix()``, ``close()``."""

    def __init__(self, total: int, desc: str, initial: int = 0, every: float = 0.5):
        from IPython.display import display

        self.total, self.desc, self.count, self.every = int(total), desc, int(initial), every
        self.start, self.shown, self.postfix = time.monotonic(), -math.inf, ""
        self.handle = display(self._bundle(), raw=True, metadata={TRANSIENT: True}, display_id=True)

    def _bundle(self) -> dict:
        elapsed = time.monotonic() - self.start
        done = self.count / self.total if self.total else 1.0
        left = f", about {_duration(elapsed * (1 - done) / done)} left" if 0 < done < 1 and elapsed > 2 else ""
        text = (f"{self.desc}: step {self.count:,} of {self.total:,} ({100 * done:.0f} %), "
                f"{_duration(elapsed)}{left}{self.postfix}")
        return {"text/plain": text, "text/html": f'<div role="status"><progress value="{self.count}" '
                f'max="{max(self.total, 1)}"></progress> {html.escape(text)}</div>'}

    def update(self, n: int = 1) -> None:
        self.count += n
        if time.monotonic() - self.shown >= self.every or self.count >= self.total:
            self.shown = time.monotonic()
            self.handle.update(self._bundle(), raw=True, metadata={TRANSIENT: True})

    def set_postfix(self, **values) -> None:
        self.postfix = "".join(f", {key} {value}" for key, value in values.items())

    def close(self) -> None:
        self.handle.update({"text/plain": ""}, raw=True, metadata={TRANSIENT: True})


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def transient_progress(total: int, desc: str, initial: int = 0) -> TransientProgress | None:
    """A :class:`TransientProgress` where a person watches the kernel (:func:`interactive`), else None."""
    return TransientProgress(total, desc, initial) if interactive() else None
