"""The rule for what nbval compares (tools/nbval_outputs.py): text exactly, numbers within the tolerance a cell
declares, figure data decoded; and the chapters' declarations and hidden outputs."""
import base64
import json
import os
import pathlib
import re
import subprocess
import sys

import nbformat
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tools import nbval_outputs  # noqa: E402
from tools.nbval_outputs import Tolerance, compare_json, compare_outputs, compare_text, tolerance_of  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb"))
# Cells whose outputs nbval does not compare at all (figures checked in the browser, widgets): their number may
# fall, never grow. A number that another machine moves declares a tolerance instead (CONTRIBUTING.md). 61 in
# Chapters 0-7, and Chapter 8's five figures and two panels.
IGNORED_OUTPUTS_TODAY = 68
TRAINED = Tolerance(rtol=0.05, atol=0.0, why="trained")


def _f4(values) -> dict:
    return {"dtype": "f4", "bdata": base64.b64encode(np.asarray(values, np.float32).tobytes()).decode()}


def test_a_changed_last_digit_within_the_tolerance_passes():
    assert compare_text("R 1.1e-04 ... 5.0e-04, [-1.82, -0.68]\n", "R 1.2e-04 ... 5.1e-04, [-1.82, -0.67]\n",
                        TRAINED) is None
    assert compare_text("L = 2,760 (2,278 to 3,759); rate 0.95.", "L = 2,790 (2,278 to 3,759); rate 0.96.",
                        TRAINED) is None


def test_a_changed_claim_or_word_fails():
    assert "text differs" in compare_text("within 4 s.e.: True\n", "within 4 s.e.: False\n", TRAINED)
    assert "text differs" in compare_text("softmax 0.51\n", "linear 0.51\n", TRAINED)
    assert "text differs" in compare_text("seeds 1, 2\n", "seeds 1, 2, 3\n", TRAINED)
    assert compare_text("< 1e-12\n", "1e-17\n", TRAINED) is not None


def test_a_number_beyond_its_tolerance_fails_naming_the_number_and_the_tolerance():
    message = compare_text("exponent -1.25 [-1.82, -0.67]\n", "exponent -1.25 [-1.82, -0.58]\n", TRAINED)
    assert "-0.58 printed, -0.67 stored" in message and "rtol 0.05, atol 0" in message


def test_the_rounding_slack_is_half_a_printed_unit_each():
    tight = Tolerance(rtol=1e-9, atol=0.0, why="x")
    assert compare_text("0.124", "0.125", tight) is None                    # 0.1245 printed both ways
    assert compare_text("0.124", "0.126", tight) is not None
    assert compare_text("1.2e-04", "1.3e-04", tight) is None
    assert compare_text("L = 2,760", "L = 2,761", tight) is None             # rounded to a unit


def test_a_plain_integer_is_a_count_compared_exactly():
    assert "compared exactly" in compare_text("in 19 of 20 seeds", "in 20 of 20 seeds", TRAINED)
    assert "compared exactly" in compare_text("seed 327: 0.51", "seed 328: 0.51", TRAINED)
    assert compare_text("settled at t = 22.08", "settled at t = 22", TRAINED) is None


def test_figure_data_is_decoded_and_compared_numerically():
    stored = {"data": [{"x": [1, 2, 3], "y": _f4([1.0, 2.0, 3.0]), "name": "softmax"}], "layout": {"height": 430}}
    moved = {"data": [{"x": [1, 2, 3], "y": _f4([1.01, 2.0, 3.05]), "name": "softmax"}], "layout": {"height": 430}}
    assert compare_json(stored, moved, TRAINED) is None
    far = json.loads(json.dumps(moved))
    far["data"][0]["y"] = _f4([1.0, 2.0, 3.5])
    assert "y[2]: figure data 3.5, stored 3" in compare_json(stored, far, TRAINED)
    renamed = json.loads(json.dumps(moved))
    renamed["data"][0]["name"] = "linear"
    assert "'linear', stored 'softmax'" in compare_json(stored, renamed, TRAINED)
    # the figure's HTML: its arrays decoded, its id (a hash of the figure) not compared
    html = '<div id="fig-{}">{}</div>'
    assert compare_text(html.format("0123456789ab", json.dumps(stored)), html.format("ba9876543210", json.dumps(moved)),
                        TRAINED, figure=True) is None
    assert "array" in compare_text(html.format("0123456789ab", json.dumps(stored)),
                                   html.format("0123456789ab", json.dumps(far)), TRAINED, figure=True)


def test_outputs_are_compared_by_kind_and_number():
    stream = {"output_type": "stream", "name": "stdout", "text": "risk 0.124\n"}
    assert compare_outputs([stream], [dict(stream, text="risk 0.125\n")], TRAINED) is None
    assert "stderr" in compare_outputs([stream], [dict(stream, name="stderr")], TRAINED)
    assert "2 outputs" in compare_outputs([{"output_type": "display_data", "data": {"text/plain": "a"}}],
                                          [{"output_type": "display_data", "data": {"text/plain": "a"}}] * 2, TRAINED)


@pytest.mark.parametrize("declared, error", [
    ({"rtol": 0.05}, "'why'"),
    ({"rtol": 0, "atol": 0, "why": "x"}, "both 0"),
    ({"rtol": -1, "why": "x"}, "rtol must be"),
    ({"rtol": "5%", "why": "x"}, "rtol must be"),
    ({"rtol": 0.05, "why": "x", "digits": 2}, "keys rtol, atol and why"),
])
def test_a_malformed_declaration_is_refused_naming_the_cell(declared, error):
    with pytest.raises(ValueError, match=error) as refused:
        tolerance_of({"id": "cell-7", "metadata": {nbval_outputs.KEY: declared}})
    assert "cell-7" in str(refused.value)


def test_a_tolerance_and_a_hidden_output_do_not_go_together():
    cell = {"id": "c", "metadata": {nbval_outputs.KEY: {"rtol": 0.1, "why": "x"}, "tags": ["nbval-ignore-output"]}}
    with pytest.raises(ValueError, match="nbval-ignore-output"):
        tolerance_of(cell)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_declared_tolerance_in_the_chapters_is_well_formed(path):
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        tolerance_of(cell)


def test_no_more_cells_hide_their_outputs_from_nbval():
    hidden = [(path.name, cell["id"]) for path in NOTEBOOKS
              for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]
              if "nbval-ignore-output" in cell.get("metadata", {}).get("tags", [])]
    assert len(hidden) <= IGNORED_OUTPUTS_TODAY, (
        f"{len(hidden)} cells tagged nbval-ignore-output (at most {IGNORED_OUTPUTS_TODAY}): a number another machine"
        " moves declares a tolerance instead (CONTRIBUTING.md, 'What nbval compares')")


def _cell(source: str, stored: str, tolerance: dict | None = None, cell_id: str = "c"):
    cell = nbformat.v4.new_code_cell(source, id=cell_id, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored)]
    if tolerance:
        cell.metadata[nbval_outputs.KEY] = tolerance
    return cell


@pytest.mark.slow
def test_nbval_applies_the_rule(tmp_path):
    """nbval with the plugin, as `make nbval` runs it, on a chapter stored on "another machine"."""
    trained = {"rtol": 0.05, "why": "stands for a trained number"}
    notebook = nbformat.v4.new_notebook(cells=[
        _cell('print(f"risk {0.12345:.3f}: True")', "risk 0.124: True\n", trained, "last-digit"),
        _cell('print(f"risk {0.12345:.3f}: True")', "risk 0.150: True\n", trained, "beyond"),
        _cell('print(f"risk {0.12345:.3f}: True")', "risk 0.123: False\n", trained, "claim"),
        _cell('print(f"risk {0.12345:.3f}")', "risk 0.124\n", None, "exact"),
    ], metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    path = tmp_path / "chapter.ipynb"
    nbformat.write(notebook, path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-p", "tools.nbval_outputs", "-p", "no:xdist",
                          "-p", "no:cacheprovider", "-rA", "--rootdir", str(tmp_path), str(path)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout
    assert re.search(r"PASSED \S*chapter.ipynb::Cell 0\n", out) and "3 failed, 1 passed" in out, out
    assert "Cell 1 (id beyond)" in out and "0.123 printed, 0.150 stored" in out and "rtol 0.05, atol 0" in out, out
    assert "Cell 2 (id claim)" in out and "text differs" in out and "mismatch 'stdout'" in out, out  # Cell 3: exact


# A float64 sum of order-1 terms is exact to about 1e-16: a printed value below 1e-12, or a zero in exponent
# notation (`0.0e+00`), is what one CPU's rounding left; another prints other noise.
NOISE = re.compile(r"(?<![\w.<])(?<!< )[-+]?(?:\d+\.?\d*)[eE](?:-(?:1[3-9]|[2-9]\d|\d{3})|[-+]0+(?!\d))(?![\w.])")


def _noise(text: str) -> list[str]:
    return [m.group() for m in NOISE.finditer(text) if abs(float(m.group())) < 1e-12]


def test_noise_is_recognised():
    assert _noise("R 0.0e+00, <= 1e-14, = 3.6e-15, 0e+00") == ["0.0e+00", "1e-14", "3.6e-15", "0e+00"]
    assert _noise("R < 1e-12, 3.2e-04, 1e-12, 1.0e+00, 2e-07") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_compared_output_prints_rounding_noise(path):
    """A zero up to rounding is printed as a bound (core.printing.bound), never as its noise."""
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or "nbval-ignore-output" in cell.metadata.get("tags", []):
            continue
        printed = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in cell.outputs)
        assert not _noise(printed), f"{path.name}, cell {cell.id} prints rounding noise {_noise(printed)}: print a bound"
