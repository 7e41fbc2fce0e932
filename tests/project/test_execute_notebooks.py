"""tools/execute_notebooks.py: the saved form keeps solutions folded, and ``--unexecuted`` finds a chapter whose
outputs a Run All cut short (or "Clear All Outputs") left incomplete."""
import copy
import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "tools" / "execute_notebooks.py")
execute_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(execute_notebooks)

CHAPTER_8 = ROOT / "notebooks" / "08_nonlinear_icl.ipynb"
CHAPTER_4 = ROOT / "notebooks" / "04_isotropic_icl.ipynb"


def _solutions(notebook):
    return [c for c in notebook["cells"] if c["cell_type"] == "code" and "solution" in c["metadata"].get("tags", [])]


def test_a_save_after_run_all_keeps_the_solutions_folded():
    notebook = json.loads(CHAPTER_8.read_text())
    stored = json.loads(CHAPTER_8.read_text())
    assert len(_solutions(notebook)) >= 2
    for cell in _solutions(notebook):  # what JupyterLab sends after running the cells: outputs shown
        cell["metadata"]["jupyter"] = {"outputs_hidden": False}
    model = {"type": "notebook", "content": notebook}
    execute_notebooks.pre_save_hook(model, path="08_nonlinear_icl.ipynb")
    for cell in _solutions(model["content"]):
        assert cell["metadata"]["jupyter"] == {"outputs_hidden": True, "source_hidden": True}
    assert model["content"] == stored, "the hook changes nothing else"


def test_every_stored_chapter_is_complete():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert execute_notebooks.needs_execution(path) is None, f"{path.name}: make notebooks CHAPTER={path.name[:2]}"


def _cut_short(notebook, keep: int):
    """``notebook`` as a Run All interrupted after its first ``keep`` code cells leaves it (then autosaved)."""
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    for cell in code[keep:]:
        cell["execution_count"], cell["outputs"] = None, []
    return len(code)


def test_a_chapter_cut_short_is_executed_again_and_says_why(tmp_path, monkeypatch, capsys):
    notebook = json.loads(CHAPTER_4.read_text())
    assert execute_notebooks.missing_outputs(notebook) == []
    total = _cut_short(notebook, 13)
    problems = execute_notebooks.missing_outputs(notebook)
    assert len(problems) == total - 13 and problems[0] == f"code cell 14 of {total} has no execution count"
    interrupted = copy.deepcopy(json.loads(CHAPTER_4.read_text()))
    cell = [c for c in interrupted["cells"] if c["cell_type"] == "code"][5]
    cell["outputs"].append({"output_type": "error", "ename": "KeyboardInterrupt", "evalue": "", "traceback": []})
    assert execute_notebooks.missing_outputs(interrupted) == [f"code cell 6 of {total} shows an error"]
    cell["metadata"].setdefault("tags", []).append("raises-exception")
    assert execute_notebooks.missing_outputs(interrupted) == []

    complete, cut = tmp_path / "04_complete.ipynb", tmp_path / "04_cut.ipynb"
    complete.write_text(CHAPTER_4.read_text())
    cut.write_text(json.dumps(notebook))
    executed = []
    monkeypatch.setattr(execute_notebooks, "execute", lambda path: executed.append(path.name) or 0.0)
    assert execute_notebooks.main(["--unexecuted", str(complete), str(cut)]) == 0
    assert executed == ["04_cut.ipynb"]
    out = capsys.readouterr().out
    assert f"04_cut.ipynb: not fully executed: {total - 13} code cells never run (no execution count)" in out
    assert "04_complete" not in out


def test_empty_and_skipped_cells_need_no_execution_count():
    notebook = {"cells": [{"cell_type": "code", "source": "  \n", "metadata": {}, "outputs": [], "execution_count": None},
                          {"cell_type": "code", "source": "1", "metadata": {"tags": ["skip-execution"]}, "outputs": [],
                           "execution_count": None},
                          {"cell_type": "markdown", "source": "text", "metadata": {}}]}
    assert execute_notebooks.missing_outputs(notebook) == []


def test_the_stored_form_drops_transient_progress_lines_and_the_executed_kernel_shows_none(monkeypatch, tmp_path):
    from softmax_as_linear.core import progress

    assert (execute_notebooks.TRANSIENT, execute_notebooks.PROGRESS_VAR) == (progress.TRANSIENT, progress.PROGRESS_VAR)
    printed = {"output_type": "stream", "name": "stdout", "text": "12 runs\n"}
    line = {"output_type": "display_data", "data": {"text/plain": ""}, "metadata": {progress.TRANSIENT: True}}
    notebook = {"cells": [{"cell_type": "code", "source": "sweep = train(lecture)", "metadata": {},
                           "execution_count": 3, "outputs": [line, dict(printed)]}], "metadata": {}}
    assert execute_notebooks.normalise(notebook)
    assert notebook["cells"][0]["outputs"] == [printed]

    seen = {}

    class Client:
        def __init__(self, notebook, **kwargs):
            pass

        def execute(self):
            import os
            seen["progress"] = os.environ.get(execute_notebooks.PROGRESS_VAR)

    import nbclient
    monkeypatch.setattr(nbclient, "NotebookClient", Client)
    monkeypatch.delenv(execute_notebooks.PROGRESS_VAR, raising=False)
    copy_of = tmp_path / "ch.ipynb"
    copy_of.write_text(CHAPTER_8.read_text())
    execute_notebooks.execute(copy_of)
    assert seen["progress"] == "0"


def test_a_folded_output_is_stored_collapsed_as_jupyterlab_saves_it():
    # JupyterLab writes "collapsed": true beside jupyter.outputs_hidden on every save: the stored form must hold it,
    # or opening and saving a chapter with a folded solution would rewrite it
    cell = {"cell_type": "code", "id": "s", "metadata": {"tags": ["solution"]}, "outputs": [], "source": "",
            "execution_count": 1}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    execute_notebooks.normalise(notebook)
    assert cell["metadata"]["collapsed"] is True and cell["metadata"]["jupyter"]["outputs_hidden"] is True
    assert not execute_notebooks.normalise(notebook)  # the stored form is a fixed point
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for stored in json.loads(path.read_text())["cells"]:
            if stored["metadata"].get("jupyter", {}).get("outputs_hidden"):
                assert stored["metadata"].get("collapsed") is True, f"{path.name}: cell {stored['id']}"
