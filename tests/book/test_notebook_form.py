"""Chapters are stored in the form JupyterLab saves, so that opening and saving one changes no byte
(tools/execute_notebooks.py writes that form; JupyterLab's own round trip is checked in test_lab.py)."""
import copy
import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "tools" / "execute_notebooks.py")
execute_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(execute_notebooks)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_chapter_is_in_the_form_jupyterlab_saves(path):
    text = path.read_text(encoding="utf-8")
    notebook = json.loads(text)
    assert not execute_notebooks.normalise(copy.deepcopy(notebook)), \
        f"{path.name}: run `python tools/execute_notebooks.py --normalise {path}` (or re-execute it)"
    assert text == json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    assert all("id" in cell for cell in notebook["cells"]) and notebook["nbformat_minor"] >= 5


def test_normalise_matches_what_comes_back_from_the_browser():
    notebook = {"metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                             "widgets": {"state": {}}},
                "nbformat": 4, "nbformat_minor": 4,
                "cells": [{"cell_type": "code", "metadata": {"execution": {"iopub.status.busy": "now"}},
                           "outputs": [{"output_type": "display_data", "metadata": {},
                                        "data": {"application/vnd.plotly.v1+json": {"data": [{"x": [0.0, 0.5, 2.0]}]},
                                                 "image/png": "iVBOR...", "text/plain": "1.0"}}]}]}
    assert execute_notebooks.normalise(notebook)
    assert notebook["metadata"] == {"kernelspec": execute_notebooks.KERNELSPEC}
    output = notebook["cells"][0]["outputs"][0]["data"]
    assert "image/png" not in output and output["text/plain"] == "1.0"
    x = output["application/vnd.plotly.v1+json"]["data"][0]["x"]
    assert x == [0, 0.5, 2] and [type(v) for v in x] == [int, float, int]
    assert notebook["cells"][0]["metadata"] == {} and notebook["nbformat_minor"] == 5
    assert not execute_notebooks.normalise(notebook)


def test_pre_save_hook_normalises_notebooks_only():
    model = {"type": "notebook", "content": {"metadata": {}, "cells": [], "nbformat": 4, "nbformat_minor": 5}}
    execute_notebooks.pre_save_hook(model=model, path="x.ipynb", contents_manager=None)
    assert model["content"]["metadata"]["kernelspec"] == execute_notebooks.KERNELSPEC
    text = {"type": "file", "content": "0.0"}
    execute_notebooks.pre_save_hook(model=text, path="x.txt", contents_manager=None)
    assert text["content"] == "0.0"


def _stream(name, text):
    return {"output_type": "stream", "name": name, "text": text}


def test_consecutive_streams_of_one_name_are_merged_as_jupyterlab_keeps_them():
    # JupyterLab's output area appends a stream to the stream before it when both are stdout (or both stderr),
    # and saves the merged one: two prints with nothing between them are one output, as the kernel sent them.
    figure = {"output_type": "display_data", "metadata": {}, "data": {"text/plain": "figure"}}
    outputs = [_stream("stdout", ["a\n"]), _stream("stdout", ["b\n", "c\n"]), _stream("stderr", ["warning\n"]),
               _stream("stdout", ["d\n"]), figure, _stream("stdout", ["e\n"])]
    merged = execute_notebooks.merge_streams(outputs)
    assert merged == [_stream("stdout", ["a\n", "b\n", "c\n"]), _stream("stderr", ["warning\n"]),
                      _stream("stdout", ["d\n"]), figure, _stream("stdout", ["e\n"])]
    assert execute_notebooks.merge_streams(merged) == merged


def test_streams_keep_what_a_terminal_shows_after_carriage_returns_and_backspaces():
    progress = [_stream("stderr", "10%\r"), _stream("stderr", "60%\r"), _stream("stderr", "100%\n"),
                _stream("stdout", "abc\rd\n"), _stream("stdout", "xy\bz")]
    assert execute_notebooks.merge_streams(progress) == [_stream("stderr", "100%\n"), _stream("stdout", "dbc\nxz")]


def test_normalise_merges_the_streams_of_a_stored_chapter():
    cell = {"cell_type": "code", "metadata": {}, "outputs": [_stream("stdout", ["1\n"]), _stream("stdout", ["2\n"])]}
    notebook = {"metadata": {}, "nbformat": 4, "nbformat_minor": 5, "cells": [cell]}
    assert execute_notebooks.normalise(notebook)
    assert notebook["cells"][0]["outputs"] == [_stream("stdout", ["1\n", "2\n"])]
    assert not execute_notebooks.normalise(notebook)
