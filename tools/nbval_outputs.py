"""What nbval compares in a chapter's stored outputs: text exactly, a number within the tolerance its cell declares.

Loaded as a pytest plugin beside nbval (``make nbval``: ``python -m pytest --nbval -p tools.nbval_outputs``);
``python tools/nbval_outputs.py`` lists the cells that declare a tolerance, and why.
The rule, in full in CONTRIBUTING.md ("What nbval compares"):

- A cell that declares nothing is compared exactly, by nbval itself: text, names, counts, booleans, closed forms
  printed far above rounding, and zeros up to rounding printed as a bound (``< 1e-12``), never as their noise.
- A cell that prints numbers another machine's floating-point order can move (training, long sums, Monte Carlo,
  eigen-solvers on ill-conditioned input, figure data) declares how far, in its metadata::

      "nbval-tolerance": {"rtol": 0.05, "atol": 1e-6, "why": "trained on the CPU: ..."}

  Its outputs are then compared piece by piece (:func:`compare_outputs`): the text between the numbers exactly,
  a plain integer (a count, a seed, a length) exactly, and every other number ``n`` stored as ``s`` (printed
  with a decimal point, an exponent or thousands separators) within ``atol + rtol |s|``, plus half a unit of the
  last digit printed for each of the two (two values that differ by ``d`` can print ``d`` plus a unit apart). Figure data (plotly JSON, and the HTML that renders
  it) is decoded, base64 typed arrays included, and compared element by element within ``atol + rtol |s|``
  plus half a unit of the last place of the array's type; the HTML's element id, a hash of the figure, is not.

A tolerance is for the printed digits only: claim cells assert on the machine that runs them.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import math
import pathlib
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where figure data is decoded: tools/check_pip_install.py
    import numpy as np  # compares printed text with the system's Python, which may have no numpy


KEY = "nbval-tolerance"
PLOTLY = "application/vnd.plotly.v1+json"
# nbval's own list of what it never compares (nbval.plugin.IPyNbFile.skip_compare), less the keys handled here
SKIPPED = ("metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
           "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg")

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_GROUPED = r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d*)?"                       # 100,000 and 2,760.5 as printed with {:,}
_TEXT_TOKENS = re.compile(rf"(?<![\w.])(?P<number>{_GROUPED}|{_NUMBER})(?!\w|\.\d)")
_ARRAY = r'\{\s*"(?:dtype|bdata|shape)"\s*:\s*"[^"]*"(?:\s*,\s*"(?:dtype|bdata|shape)"\s*:\s*"[^"]*")+\s*\}'
_FIGURE_ID = r"fig-[0-9a-f]{12}"                                     # figures.style.show: a hash of the figure
_FIGURE_TOKENS = re.compile(rf"(?P<array>{_ARRAY})|(?P<id>{_FIGURE_ID})|(?<![\w.#\\])(?P<number>{_NUMBER})(?!\w|\.\d)")


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How far another machine may move a cell's printed numbers: ``|now - stored| <= atol + rtol |stored|``."""

    rtol: float
    atol: float
    why: str

    def allowed(self, stored: float) -> float:
        return self.atol + self.rtol * abs(stored)

    def __str__(self):
        return f"rtol {self.rtol:g}, atol {self.atol:g}"


def tolerance_of(cell: dict) -> Tolerance | None:
    """The tolerance a cell declares in ``metadata["nbval-tolerance"]``, or None. Raises ValueError naming the cell
    for a malformed declaration, or one on a cell whose output nbval does not compare at all."""
    metadata = cell.get("metadata", {})
    declared = metadata.get(KEY)
    if declared is None:
        return None
    name = f"cell {cell.get('id', '?')}: metadata {KEY!r}"
    if not isinstance(declared, dict) or set(declared) - {"rtol", "atol", "why"}:
        raise ValueError(f"{name} must be an object with keys rtol, atol and why, not {declared!r}")
    rtol, atol, why = declared.get("rtol", 0), declared.get("atol", 0), declared.get("why")
    for key, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ValueError(f"{name}: {key} must be a finite number >= 0, not {value!r}")
    if rtol == 0 and atol == 0:
        raise ValueError(f"{name}: rtol and atol are both 0; a cell compared exactly declares nothing")
    if not isinstance(why, str) or not why.strip():
        raise ValueError(f"{name}: 'why' must say what moves these numbers on another machine")
    if "nbval-ignore-output" in metadata.get("tags", []):
        raise ValueError(f"{name}: the cell is also tagged nbval-ignore-output; keep one")
    return Tolerance(float(rtol), float(atol), why)


def _last_unit(text: str) -> float:
    """A unit of the last digit of a printed number: ``0.01`` for ``1.25``, ``1e-05`` for ``1.2e-04``, ``1`` for
    ``2,760``; 0 for a plain integer (a count, or a number printed whole)."""
    mantissa, _, exponent = text.lower().partition("e")
    if "." not in mantissa and not exponent:
        return 1.0 if "," in mantissa else 0.0
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _plain_integer(text: str) -> bool:
    return re.fullmatch(r"[-+]?\d+", text) is not None


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _tokens(text: str, figure: bool) -> list[tuple[str, str]]:
    """``text`` cut into ("text", ...), ("number", ...), and in a figure's HTML ("array", ...) and ("id", ...)."""
    pattern = _FIGURE_TOKENS if figure else _TEXT_TOKENS
    tokens, start = [], 0
    for match in pattern.finditer(text):
        tokens.append(("text", text[start:match.start()]))
        tokens.append((match.lastgroup, match.group()))
        start = match.end()
    tokens.append(("text", text[start:]))
    return tokens


def _array(value: dict) -> np.ndarray:
    """A plotly typed array (``{"dtype": "f4", "bdata": base64, "shape": "2, 3"}``) decoded."""
    import numpy as np
    array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
    if value.get("shape"):
        array = array.reshape([int(n) for n in str(value["shape"]).split(",")])
    return array


def _compare_arrays(stored: np.ndarray, now: np.ndarray, tolerance: Tolerance, where: str) -> str | None:
    import numpy as np
    if stored.shape != now.shape or stored.dtype.kind != now.dtype.kind:
        return f"{where}: figure data of shape {now.shape} ({now.dtype}), stored {stored.shape} ({stored.dtype})"
    s, n = stored.astype(np.float64), now.astype(np.float64)
    unit = (np.spacing(np.abs(stored)).astype(np.float64) + np.spacing(np.abs(now)).astype(np.float64)) / 2 \
        if stored.dtype.kind == "f" else 0.0
    allowed = tolerance.atol + tolerance.rtol * np.abs(s) + unit
    same = (s == n) | (np.isnan(s) & np.isnan(n))
    beyond = ~same & ~(np.abs(n - s) <= allowed)
    if not beyond.any():
        return None
    k = np.unravel_index(np.argmax(np.where(beyond, np.abs(n - s) - allowed, -np.inf)), s.shape)
    return (f"{where}[{', '.join(map(str, k))}]: figure data {n[k]:.9g}, stored {s[k]:.9g}: beyond the cell's"
            f" tolerance ({tolerance}: within {allowed[k] if np.ndim(allowed) else allowed:.3g} of it);"
            f" {int(beyond.sum())} of {s.size} values beyond")


def _compare_numbers(stored: str, now: str, tolerance: Tolerance, where: str, printed: bool) -> str | None:
    s, n = _number(stored), _number(now)
    if s == n or (math.isnan(s) and math.isnan(n)):
        return None
    if printed and _plain_integer(stored) and _plain_integer(now):
        return f"{where}: {now} printed, {stored} stored: a count (a plain integer) is compared exactly"
    allowed = tolerance.allowed(s) + ((_last_unit(stored) + _last_unit(now)) / 2 if printed else 0.0)
    if abs(n - s) <= allowed:
        return None
    return (f"{where}: {now} printed, {stored} stored: beyond the cell's tolerance ({tolerance}:"
            f" within {allowed:.3g} of {stored})")


def _context(tokens: list, k: int) -> str:
    return "".join(t for _, t in tokens[max(0, k - 4):k + 5]).strip()


def compare_text(stored: str, now: str, tolerance: Tolerance, where: str = "output", figure: bool = False) -> str | None:
    """None when ``now`` is ``stored`` up to numbers within ``tolerance``; otherwise what differs, with the
    number and the tolerance. ``figure``: the HTML of a plotly figure (full-precision numbers, typed arrays)."""
    old, new = _tokens(stored, figure), _tokens(now, figure)
    for k, ((kind, s), (kind_now, n)) in enumerate(zip(old, new)):
        if kind != kind_now or (kind == "text" and s != n):
            return f"{where}: the text differs: {_context(new, k)!r} printed, {_context(old, k)!r} stored"
        if kind == "number":
            message = _compare_numbers(s, n, tolerance, f"{where}, number {_context(new, k)!r}", not figure)
        elif kind == "array":
            message = _compare_arrays(_array(json.loads(s)), _array(json.loads(n)), tolerance, f"{where}, array")
        else:
            message = None
        if message:
            return message
    if len(old) != len(new):
        return f"{where}: {len(new) // 2} numbers printed, {len(old) // 2} stored"
    return None


def compare_json(stored, now, tolerance: Tolerance, where: str = PLOTLY) -> str | None:
    """None when the plotly JSON ``now`` is ``stored`` up to its numbers (typed arrays decoded) within ``tolerance``."""
    if isinstance(stored, dict) and isinstance(now, dict):
        if "bdata" in stored and "bdata" in now:
            return _compare_arrays(_array(stored), _array(now), tolerance, where)
        if stored.keys() != now.keys():
            return f"{where}: keys {sorted(now)}, stored {sorted(stored)}"
        return next((m for key in stored if (m := compare_json(stored[key], now[key], tolerance, f"{where}.{key}"))),
                    None)
    if isinstance(stored, list) and isinstance(now, list):
        if len(stored) != len(now):
            return f"{where}: {len(now)} entries, stored {len(stored)}"
        return next((m for k, (s, n) in enumerate(zip(stored, now))
                     if (m := compare_json(s, n, tolerance, f"{where}[{k}]"))), None)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (stored, now))
    if numbers:
        return _compare_numbers(repr(stored), repr(now), tolerance, where, printed=False)
    return None if stored == now else f"{where}: {now!r}, stored {stored!r}"


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def _flatten(outputs: list) -> dict[str, list]:
    """nbval's view of a cell's outputs: each stream by its name, each MIME type of each display, in order.
    Each entry is (value, figure) where figure says the value is part of a plotly figure's bundle."""
    flat: dict[str, list] = {}
    for output in outputs:
        if output.get("output_type") == "stream":
            flat.setdefault(output["name"], []).append((_text(output["text"]), False))
            continue
        data = output.get("data", {})
        for key, value in output.items():
            if key == "data":
                for mime, item in data.items():
                    if mime not in SKIPPED:
                        flat.setdefault(mime, []).append((item, PLOTLY in data))
            elif key not in SKIPPED:
                flat.setdefault(key, []).append((value, False))
    return flat


def compare_outputs(stored: list, now: list, tolerance: Tolerance) -> str | None:
    """None when the outputs ``now`` of a cell match its ``stored`` outputs under ``tolerance`` (streams merged, as
    nbval merges them); otherwise what differs."""
    old, new = _flatten(stored), _flatten(now)
    if old.keys() != new.keys():
        return f"outputs {sorted(new)} printed, {sorted(old)} stored"
    for key in old:
        if len(old[key]) != len(new[key]):
            return f"{key}: {len(new[key])} outputs, {len(old[key])} stored"
        for (s, figure), (n, _) in zip(old[key], new[key]):
            if key == PLOTLY:
                message = compare_json(s, n, tolerance)
            elif isinstance(s, (str, list)) and isinstance(n, (str, list)):
                message = compare_text(_text(s), _text(n), tolerance, key, figure=figure and key == "text/html")
            else:
                message = compare_json(s, n, tolerance, key)
            if message:
                return message
    return None


def pytest_collection_modifyitems(session, config, items):
    """Each nbval cell that declares a tolerance compares its outputs by :func:`compare_outputs`."""
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:
        return
    for item in items:
        if isinstance(item, IPyNbCell):
            tolerance = tolerance_of(item.cell)
            if tolerance is not None:
                item.compare_outputs = _comparison(item, tolerance)


def _comparison(item, tolerance: Tolerance):
    def compare(test, ref, skip_compare=None):
        message = compare_outputs(ref, test, tolerance)
        item.comparison_traceback = [] if message is None else [
            f"Cell {item.cell_num} (id {item.cell.get('id', '?')}), outputs compared within the tolerance it declares"
            f" ({tolerance}: {tolerance.why}):\n  {message}"]
        return message is None
    return compare


def declarations(paths) -> list[tuple[str, str, Tolerance]]:
    """(chapter, cell id, tolerance) of every cell of the chapters ``paths`` that declares one."""
    found = []
    for path in paths:
        for cell in json.loads(pathlib.Path(path).read_text(encoding="utf-8"))["cells"]:
            tolerance = tolerance_of(cell)
            if tolerance is not None:
                found.append((pathlib.Path(path).name, cell.get("id", "?"), tolerance))
    return found


if __name__ == "__main__":
    # python tools/nbval_outputs.py [CHAPTER.ipynb ...]: the cells that declare a tolerance, and why
    chapters = sys.argv[1:] or sorted((pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
    for chapter, cell_id, tolerance in declarations(chapters):
        print(f"{chapter} {cell_id}: {tolerance}; {tolerance.why}")
