"""The live chapters as a student runs them: JupyterLab with a real kernel, driven in headless Chromium.

JupyterLab is started from this environment on a free port of 127.0.0.1 with a random token, on a
temporary copy of ``notebooks/`` (nothing tracked is touched), with the save hook that ``make lab``
uses. Each test opens one chapter (the references test: every chapter, one after the other), starts its
kernel once and checks what a student sees; a test opens its chapter in the page the previous test left,
without loading JupyterLab again (a new page after a failure), and shuts the kernel of the chapter it
leaves down (JupyterLab would keep it running). Checked:

- the lecture boxes (theorems, proofs, exercises, solutions) are rendered by jupyterlab-myst as
  formatted boxes, solutions folded, with no directive fence left as text;
- a panel not yet run, or reloaded, says how to bring it to life instead of showing ``VBox(children=...``;
- opening and saving a chapter writes it back byte for byte;
- running only the cells a live panel needs (found from the names they define and use) shows its
  widgets, and moving its controls changes the figure it draws (read from the plotly data in the
  page, not from pixels): the prompt length L, the covariance Σ and the initialisation α;
- a bad value typed into a control shows a message, never a traceback; a value out of range is clamped and
  said so (Chapter 1's scale of U, then redrawn at the clamped value; Chapter 5's α);
- the training panel trains, shows progress, stops within seconds when *Stop* is pressed and draws
  the partial result marked as stopped; *Kernel > Interrupt* and running its cell again stop it too;
  its controls that do nothing for the current choice are disabled, *Stop* looks disabled until a run
  starts, and its seed box takes exactly the trainer's seeds (Chapter 4);
- every chapter reads as the book does: citations "Boyer & Boursier (2025)" linked to the book's
  bibliography, references to other chapters linked to them, no raw key or warning icon, exercises,
  boxes and equations numbered within the chapter as in the book; the Colab set-up cell is folded;
- Chapter 4's paper figures keep their titles clear of the axis titles at JupyterLab's width;
- a panel whose computation fails says why, and what to change, in its message line: Chapter 5's
  flow for a singular or a stiff Σ, Chapter 3's gap for Laplace tokens;
- Chapter 6's panel trains the covariate law chosen in it and draws the distances to the limits; a seed
  beyond the seeding rule's range typed into it brings no traceback;
- Chapter 7's panel redraws the token cloud for the number of layers and the attention chosen in it, and a bad
  number typed into it shows a message.

Screenshots land in ``_build/lab-screenshots/``; ``LAB_NOTEBOOKS=DIR`` tests the chapters stored in ``DIR``. ``make test`` runs this file with ``REQUIRE_LAB=1``,
which turns a missing JupyterLab, jupyterlab-myst, Playwright or Chromium into a failure instead of a skip.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import json
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHOTS = ROOT / "_build" / "lab-screenshots"
sys.path.insert(0, str(ROOT / "tools"))
install_chromium = importlib.import_module("install_chromium")  # the rule `make chromium` installs by
CHROMIUM = install_chromium.find()  # $CHROMIUM, else `chromium` on the PATH, else Playwright's
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
# Settings of the test's JupyterLab: every cell rendered (no virtual scrolling, so that the page
# holds every box) and no news pop-up over the notebook.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
}


def _missing() -> str | None:
    for module in ("jupyterlab", "jupyterlab_myst", "playwright", "ipykernel"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed: pip install -e '.[test]'"
    if CHROMIUM is None:
        return install_chromium.NOT_FOUND
    return None


if _missing():
    if os.environ.get("REQUIRE_LAB") == "1":
        pytest.fail(_missing(), pytrace=False)
    pytest.skip(_missing(), allow_module_level=True)


# --- which cells a panel needs --------------------------------------------------------------------

def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a code cell defines, names it reads before defining), IPython magics removed."""
    from IPython.core.inputtransformer2 import TransformerManager

    tree = ast.parse(TransformerManager().transform_cell(source))
    defined, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, ast.Store) else used).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return defined, used - defined


def cells_for(notebook: pathlib.Path, target: int) -> list[int]:
    """Indices of the code cells that cell ``target`` needs (those defining the names it reads,
    recursively), in order, ``target`` last."""
    cells = json.loads(notebook.read_text())["cells"]
    needed = set(_names("".join(cells[target]["source"]))[1])
    chosen = [target]
    for index in range(target - 1, -1, -1):
        if cells[index]["cell_type"] != "code":
            continue
        defined, used = _names("".join(cells[index]["source"]))
        if defined & needed:
            chosen.append(index)
            needed = (needed - defined) | used
    return sorted(chosen)


def panel_cell(notebook: pathlib.Path, marker: str) -> int:
    """Index of the first code cell whose source contains ``marker`` (or one of ``"a|b"``)."""
    cells = json.loads(notebook.read_text())["cells"]
    return next(i for i, c in enumerate(cells) if c["cell_type"] == "code"
                and any(m in "".join(c["source"]) for m in marker.split("|")))


def run_to_panel(open_chapter, lab, name: str, marker: str):
    """Open chapter ``name``, run the cells the panel cell (the one containing ``marker``) needs and
    that cell; returns the chapter, the cell's index and the panel's output area."""
    path = lab[2] / f"{name}.ipynb"
    index = panel_cell(path, marker)
    chapter = open_chapter(name)
    chapter.run(cells_for(path, index))
    return chapter, index, _panel_output(chapter, index)


def _panel_output(chapter, index: int):
    """The output area of code cell ``index`` (where its panel draws)."""
    return chapter.cell(index).locator(".jp-OutputArea").first


# --- JupyterLab and the browser -------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of the chapters; yields (url, token, folder)."""
    home = tmp_path_factory.mktemp("lab")
    folder = home / "notebooks"
    shutil.copytree(pathlib.Path(os.environ.get("LAB_NOTEBOOKS") or ROOT / "notebooks"), folder)
    for name, value in LAB_SETTINGS.items():
        (home / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (home / "settings" / name).write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tools"), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")])}
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={folder}", f"--LabApp.user_settings_dir={home / 'settings'}",
               f"--LabApp.workspaces_dir={home / 'workspaces'}",
               "--ContentsManager.pre_save_hook=execute_notebooks.pre_save_hook",
               "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: open the next chapter in the loaded page
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = open(home / "lab.log", "w")
    server = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                assert server.poll() is None, (home / "lab.log").read_text()[-3000:]
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start within 2 minutes:\n" + (home / "lab.log").read_text()[-3000:])
        yield url, token, folder
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


class Chapter:
    """One chapter open in JupyterLab, with the kernel idle."""

    def __init__(self, browser, lab, name: str):
        self.url, self.token, self.folder = lab
        self.name = name
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.goto(f"{self.url}/lab/tree/{name}.ipynb?token={self.token}&reset")
        self.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        self.wait_idle()

    def wait_idle(self, timeout: float = 180):
        """Until the status bar shows the kernel idle, with nothing queued."""
        self.page.locator(".jp-StatusBar-Widget", has_text="| Idle").first.wait_for(timeout=timeout * 1000)

    def cell(self, index: int):
        return self.page.locator(".jp-Notebook > .jp-WindowedPanel-outer .jp-Cell, .jp-Notebook .jp-Cell").nth(index)

    def run(self, indices: list[int], timeout: float = 300):
        """Run the given cells in order (click each one's prompt, then Ctrl+Enter) and wait."""
        for index in indices:
            cell = self.cell(index)
            cell.scroll_into_view_if_needed()
            cell.locator(".jp-InputPrompt").first.click()
            self.page.keyboard.press("Control+Enter")
            # wait for this cell to finish (its prompt shows a number, not "*")
            prompt = cell.locator(".jp-InputArea-prompt").first
            deadline = time.monotonic() + timeout
            while True:
                text = prompt.inner_text().strip()
                if text not in ("[*]:", "[ ]:", "") and "*" not in text:
                    break
                assert time.monotonic() < deadline, f"{self.name}: cell {index} still running after {timeout} s"
                time.sleep(0.3)
        self.wait_idle(timeout)

    def save(self, timeout: float = 60):
        """Select a cell (command mode), press Ctrl+S and wait until the file on disk changes."""
        stored = self.folder / f"{self.name}.ipynb"
        stamp = stored.stat().st_mtime_ns
        self.cell(0).locator(".jp-InputPrompt").first.click()  # the title (a click on the folded cell 1 unfolds it)
        self.page.keyboard.press("Control+s")
        deadline = time.monotonic() + timeout
        while stored.stat().st_mtime_ns == stamp:
            assert time.monotonic() < deadline, f"{self.name}: Ctrl+S did not save the chapter"
            time.sleep(0.5)
        time.sleep(1)

    def shot(self, label: str, locator=None):
        SHOTS.mkdir(parents=True, exist_ok=True)
        if locator is not None:
            locator.scroll_into_view_if_needed()
        self.page.screenshot(path=str(SHOTS / f"{self.name.replace('/', '-')}-{label}.png"))

    def switch(self, name: str):
        """Close this chapter and open ``name`` in the same page: JupyterLab is not loaded again."""
        self.page.evaluate("""async path => {
            const app = window.jupyterapp;
            for (const widget of [...app.shell.widgets('main')]) {
                if (widget.context) widget.context.model.dirty = false;  // closed without a dialog
                widget.dispose();
            }
            const widget = await app.commands.execute('docmanager:open', {path});
            await widget.context.ready;
            await widget.sessionContext.ready;  // its kernel started
        }""", f"{name}.ipynb")
        self.errors.clear()
        self.page.wait_for_function("() => document.querySelectorAll('.jp-Notebook').length === 1")
        end_sessions(self.url, self.token, f"{self.name}.ipynb")
        self.name = name
        self.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        self.wait_idle()

    def close(self):
        self.page.close()
        end_sessions(self.url, self.token, f"{self.name}.ipynb")


def end_sessions(url: str, token: str, path: str):
    """Shut down the kernel of ``path``'s session: JupyterLab leaves it running when its page or tab closes."""
    headers = {"Authorization": f"token {token}"}
    with urllib.request.urlopen(urllib.request.Request(f"{url}/api/sessions", headers=headers), timeout=30) as answer:
        sessions = json.loads(answer.read())
    for session in sessions:
        if session["path"] == path:
            urllib.request.urlopen(urllib.request.Request(f"{url}/api/sessions/{session['id']}", method="DELETE",
                                                          headers=headers), timeout=60).close()


@pytest.fixture(scope="module")
def _held(browser, lab):
    """The page a passing test leaves open, for the next test to open its chapter in (``Chapter.switch``)."""
    held = []
    yield held
    for chapter in held:
        chapter.close()


@pytest.fixture
def open_chapter(request, browser, lab, _held):
    """``open_chapter(name)``: the chapter open in JupyterLab, in the page the last test left when it passed,
    else in a new one (a failed test may leave a dialog or a busy kernel behind: its page is closed)."""
    failed = request.session.testsfailed

    def open_(name: str) -> Chapter:
        if _held:
            _held[0].switch(name)
        else:
            _held.append(Chapter(browser, lab, name))
        return _held[0]
    yield open_
    if request.session.testsfailed > failed and _held:
        _held.pop().close()


def figure(locator, timeout: float = 120) -> dict:
    """The plotly figure drawn inside ``locator``: its title and its traces' names and data.

    plotly sends NumPy arrays as base64 (``{dtype, bdata}``), which plotly.js keeps as they are in
    ``gd.data``: such data are compared by their base64 text, plain lists as arrays."""
    plot = locator.locator(".js-plotly-plot").first
    plot.wait_for(timeout=timeout * 1000)
    return plot.evaluate("""gd => {
        const values = a => a == null ? [] : (a.bdata !== undefined ? a.dtype + ':' + a.bdata : Array.from(a));
        return {title: (gd.layout.title && gd.layout.title.text) || '',
                traces: gd.data.map(t => [t.name || '', values(t.x), values(t.y)])};
    }""")


def wait_for_new_figure(locator, before: dict, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:  # a short wait for the plot: the Output widget replaces it when the panel redraws
            now = figure(locator, timeout=max(1.0, min(5.0, deadline - time.monotonic())))
        except Exception:  # the Output widget is between two figures
            now = before
        if now != before:
            return now
        time.sleep(0.5)
    plots = locator.locator(".js-plotly-plot").count()
    raise AssertionError(f"the panel's figure did not change: {plots} plot(s), title {now['title']!r} "
                         f"(before {before['title']!r}), first trace {str(now['traces'][:1])[:300]}; "
                         f"text: {locator.inner_text()[-600:]!r}")


def type_bad_numbers(output, entry, redraws_when_clamped: bool = False):
    """Type a non-number, then an out-of-range number, into ``entry``: the panel's message line says what became of
    each ("not a number", "outside ..."); with ``redraws_when_clamped``, the figure is redrawn for the clamped value."""
    note = output.locator(".sal-message")
    for typed, said in (("abc", "not a number"), ("99", "outside")):
        before = figure(output) if redraws_when_clamped and typed == "99" else None
        entry.fill(typed)
        entry.press("Enter")
        note.filter(has_text=said).wait_for(timeout=30_000)
    if redraws_when_clamped:
        wait_for_new_figure(output, before)


def eventually(condition, what: str, timeout: float = 30):
    """Wait until ``condition()`` holds (a loaded machine answers late), or fail saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.2)


def slide(output, description: str, key: str, to: str, presses: int = 12):
    """Move the slider named ``description`` with the keyboard (arrow keys on its focused handle), as a student would, until its readout shows ``to``:
    one press at a time, each waited for. (Pressed in a burst, a key can be lost on a loaded machine while the
    widget redraws or the handle loses focus; the readout is what the kernel is sent.)"""
    page = output.page
    slider = output.locator(".widget-hslider", has=page.locator(f"text={description}")).first
    handle = slider.locator(".noUi-handle, .ui-slider-handle").first
    readout = slider.locator(".widget-readout").first
    shown = lambda: readout.inner_text().strip().replace(",", "")  # noqa: E731
    for _ in range(presses):
        before = shown()
        if before == to:
            time.sleep(1.0)  # and stays there: the kernel's echo of an earlier value does not move it back
            if shown() == to:
                return
            continue
        handle.focus()
        page.keyboard.press(key)
        deadline = time.monotonic() + 10
        while shown() == before and time.monotonic() < deadline:
            time.sleep(0.1)
    assert shown() == to, f"the slider {description!r} shows {shown()!r} after {presses} presses of {key}, not {to!r}"


@contextlib.contextmanager
def check(what: str):
    """A step of a test that checks several things in one chapter: its failure says which check failed."""
    try:
        yield
    except Exception as error:  # an assertion, or Playwright's time-out
        raise AssertionError(f"{what}: {type(error).__name__}: {error}") from error


def no_traceback(locator):
    text = locator.inner_text()
    assert "Traceback" not in text and locator.locator("[data-mime-type='application/vnd.jupyter.stderr']").count() == 0, \
        text[-2000:]


# --- the tests ------------------------------------------------------------------------------------

def test_lecture_boxes_are_formatted_and_solutions_folded(open_chapter, lab):
    source = (lab[2] / "02_lemma_2_1.ipynb").read_text()
    expected = (source.count(":::{prf:"), source.count(":::{exercise}"), source.count(":::{solution}"))
    chapter = open_chapter("02_lemma_2_1")
    page = chapter.page
    page.wait_for_selector(".jp-MarkdownCell aside.myst-proof", timeout=60_000)
    deadline = time.monotonic() + 60
    while True:  # jupyterlab-myst renders the cells one after the other
        report = page.evaluate("""() => {
            const cells = [...document.querySelectorAll('.jp-MarkdownCell')];
            const raw = cells.map(c => c.innerText).filter(t => t.includes(':::{') || t.includes('```{'));
            const count = s => document.querySelectorAll(s).length;
            return {raw, proofs: count('.jp-MarkdownCell aside.myst-proof'),
                    exercises: count('.jp-MarkdownCell aside.myst-exercise'),
                    solutions: [...document.querySelectorAll('.jp-MarkdownCell details.myst-exercise')].map(d => d.open),
                    admonitions: count('.jp-MarkdownCell aside.myst-admonition')};
        }""")
        if (report["proofs"], report["exercises"], len(report["solutions"])) == expected or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert report["raw"] == [], f"directive fences shown as text: {report['raw']}"
    assert (report["proofs"], report["exercises"], len(report["solutions"])) == expected, report
    assert report["solutions"] == [False] * expected[2], "solutions must start folded"
    assert report["admonitions"] >= 1
    chapter.shot("boxes", page.locator(".jp-MarkdownCell aside.myst-proof").first)
    solution = page.locator(".jp-MarkdownCell details.myst-exercise").first
    solution.locator("summary").click()
    assert solution.evaluate("d => d.open")
    chapter.shot("solution-open", solution)


def _panel_not_yet_run_says_it_needs_a_kernel(chapter):
    index = panel_cell(chapter.folder / "04_isotropic_icl.ipynb", "regression_panel(")
    output = chapter.cell(index).locator(".jp-OutputArea").first
    output.scroll_into_view_if_needed()
    text = output.inner_text()
    chapter.shot("panel-before-run", output)
    assert "VBox(children" not in text, text
    assert "Live panel: its controls appear when this cell runs" in text, text


def _opening_and_saving_changes_no_byte(chapter, before: bytes):
    stored = chapter.folder / f"{chapter.name}.ipynb"
    chapter.page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)  # figures drawn (and snapshotted)
    time.sleep(2)
    chapter.save()
    after = stored.read_bytes()
    if after != before:
        import difflib
        diff = list(difflib.unified_diff(before.decode().splitlines(), after.decode().splitlines(), lineterm="", n=1))
        raise AssertionError("saving an unchanged chapter rewrote it (see tools/execute_notebooks.py):\n"
                             + "\n".join(line[:200] for line in diff[:40]))


def _measure_panel_redraws_for_L_and_reports_bad_values(chapter, output):
    output.locator(".widget-slider").first.wait_for(timeout=60_000)
    before = figure(output)
    chapter.shot("measure-panel", output)
    slide(output, "prompt length L", "ArrowRight", "1778")  # the next value after L = 1,000
    after = wait_for_new_figure(output, before)
    assert after["title"] != before["title"] and "L = 1778" in after["title"].replace(",", ""), after["title"]
    # a non-number and an out-of-range number typed into the scale of U: messages, and a redraw for the clamped value
    type_bad_numbers(output, output.locator("input.widget-input, .sal-typed-entry input").first, redraws_when_clamped=True)
    chapter.shot("measure-panel-bad-value", output)
    no_traceback(output)
    assert not chapter.errors, chapter.errors


def _cell_index(notebook: pathlib.Path, cell_id: str) -> int:
    return next(i for i, c in enumerate(json.loads(notebook.read_text())["cells"]) if c.get("id") == cell_id)


def _a_coding_exercise_answers_as_a_student_types(chapter, path):
    """The skeleton's check says "not attempted yet"; a wrong answer typed in gets its diagnosis; the solution's
    code and output stay folded."""
    skeleton = _cell_index(path, "ch1-code-softmax-skeleton")
    answer = _cell_index(path, "ch1-code-softmax-answer")
    folded = chapter.cell(answer)
    folded.scroll_into_view_if_needed()
    assert folded.locator(".jp-InputPlaceholder").count() == 1, "the solution's code must start folded"
    assert folded.locator(".jp-OutputPlaceholder").count() == 1, "the solution's output must start folded"
    chapter.run(cells_for(path, skeleton + 1))
    output = chapter.cell(skeleton + 1).locator(".jp-OutputArea").first
    assert "softmax_attention: not attempted yet" in output.inner_text(), output.inner_text()
    editor = chapter.cell(skeleton).locator(".cm-content").first
    editor.click()
    chapter.page.keyboard.press("Control+a")
    chapter.page.keyboard.insert_text("def softmax_attention(tokens, query, U, V):\n"
                                      "    return V @ (torch.exp(tokens @ U @ query) @ tokens)\n")
    chapter.run([skeleton, skeleton + 1])
    text = output.inner_text()
    chapter.shot("coding-exercise-diagnosed", chapter.cell(skeleton))
    assert "the weights do not sum to one" in text and "Traceback" not in text, text


def test_chapter_1_saves_unchanged_and_its_panel_redraws_and_reports_bad_values(open_chapter, lab):
    """Chapter 1, opened once: saving it unchanged writes it back byte for byte; its measure panel redraws for L,
    and a non-number or an out-of-range number typed into it gets a message (the clamped value redrawn); a coding
    exercise answers a student's wrong function with its diagnosis, its solution folded."""
    path = lab[2] / "01_measure_view.ipynb"
    before = path.read_bytes()
    chapter = open_chapter("01_measure_view")
    with check("opening and saving Chapter 1"):
        _opening_and_saving_changes_no_byte(chapter, before)
    index = panel_cell(path, "widgets.panel(|measure_panel(")
    chapter.run(cells_for(path, index))
    with check("Chapter 1's measure panel"):
        _measure_panel_redraws_for_L_and_reports_bad_values(chapter, _panel_output(chapter, index))
    with check("Chapter 1's coding exercise"):
        _a_coding_exercise_answers_as_a_student_types(chapter, path)


def _flow_panel_redraws_for_the_covariance_and_the_initialisation(chapter, output):
    output.locator("select").first.wait_for(timeout=60_000)
    first = figure(output)
    chapter.shot("flow-panel", output)
    output.locator("select").first.select_option(label="Σ = I")  # the covariance
    second = wait_for_new_figure(output, first)
    alpha = output.locator(".widget-hbox", has=chapter.page.locator("text=α")).locator(".sal-typed-entry input").first
    alpha.fill("0.05")  # the initialisation of Assumption 5.1
    alpha.press("Enter")
    third = wait_for_new_figure(output, second)
    assert third["traces"][0][2] != second["traces"][0][2]  # another excess-risk curve
    alpha.fill("1e9")  # out of range: clamped, and said so
    alpha.press("Enter")
    output.locator(".sal-message", has_text="outside").wait_for(timeout=30_000)
    chapter.shot("flow-panel-changed", output)
    no_traceback(output)
    assert not chapter.errors, chapter.errors


def _flow_panel_saved_and_reloaded_says_what_to_do(chapter, index):
    """Saved and reloaded, the panel says what to do, not `VBox(children=...`."""
    chapter.save()
    chapter.page.reload()
    chapter.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    chapter.wait_idle()
    output = chapter.cell(index).locator(".jp-OutputArea").first
    output.scroll_into_view_if_needed()
    eventually(lambda: output.inner_text().strip() != "", "the reloaded panel's output shows text", timeout=60)
    time.sleep(1)  # a widget view, if one comes, replaces the text
    text = output.inner_text()
    chapter.shot("flow-panel-reloaded", output)
    assert "VBox(children" not in text and ("Live panel" in text or output.locator("select").count()), text


def _training_panel_trains_stops_and_shows_the_partial_result(chapter, output):
    train = output.locator("button", has_text="Train")
    stop = output.locator("button", has_text="Stop")
    train.wait_for(timeout=60_000)
    chapter.shot("training-panel", output)
    progress = output.locator(".widget-hprogress .progress-bar, .widget-progress .progress-bar").first
    # a run long enough to be stopped on a fast machine: 500 -> 10,000 steps
    slide(output, "steps", "ArrowRight", "10000")
    train.click()
    started = time.monotonic()
    deadline = started + 120
    while (progress.evaluate("e => parseFloat(e.style.width) || 0") or 0) <= 0:
        assert time.monotonic() < deadline, "no progress within 2 minutes"
        time.sleep(0.3)
    time.sleep(1.0)
    chapter.shot("training-progress", output)
    stop.click()
    clicked = time.monotonic()
    status = output.locator(".sal-status")
    status.filter(has_text="stopped at step").wait_for(timeout=30_000)
    assert time.monotonic() - clicked < 10, "Stop took more than 10 s"
    partial = figure(output)
    assert "stopped at step" in partial["title"]
    chapter.shot("training-stopped", output)
    # another initialisation gives another run
    output.locator("select").nth(1).select_option(label="Assumption 5.1 (α)")
    slide(output, "steps", "ArrowLeft", "100")
    train.click()
    status.filter(has_text="finished at step").wait_for(timeout=240_000)
    full = figure(output)
    assert full != partial and "stopped" not in full["title"]
    chapter.shot("training-block-init", output)
    no_traceback(output)
    assert not chapter.errors, chapter.errors


# --- what a student reads: references, numbers, the set-up cell, the paper's figures -----------------

CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


def _rendered(chapter: Chapter, settle: float = 3.0) -> dict:
    """The Markdown of the open chapter once jupyterlab-myst has rendered every cell: its warnings
    (unresolved citations and references), its links and the headers of its exercises."""
    page = chapter.page
    before, deadline = None, time.monotonic() + 90
    while True:
        report = page.evaluate("""() => {
            const q = s => [...document.querySelectorAll(s)];
            return {
              cells: q('.jp-MarkdownCell').length,
              rendered: q('.jp-MarkdownCell .myst').length,
              warnings: q('.jp-MarkdownCell [title$="Not Found"]').map(e => e.title + ': ' + e.innerText.trim()),
              links: q('.jp-MarkdownCell a').map(e => [e.textContent.replace(/\\u00a0/g, ' ').trim(),
                                                       e.getAttribute('href') || '']),
              exercises: q('.jp-MarkdownCell aside.myst-exercise').map(e => e.innerText.trim().split('\\n')[0]),
              raw: q('.jp-MarkdownCell').map(c => c.innerText)
                .filter(t => /\\{(cite|eq|ref|doc|prf:ref)[^}]*\\}`|\\[[^\\]\\n]+\\]\\[[\\w:.\\/-]+\\]/.test(t)),
            };
        }""")
        if report == before or time.monotonic() > deadline:
            return report
        before = report
        time.sleep(settle)


def test_citations_references_numbers_and_the_set_up_cell_read_as_in_the_book(open_chapter, lab):
    """Every chapter: no raw key or warning icon; citations read "Boyer & Boursier (2025)" and link to the
    book's bibliography; references to another chapter link to it; exercises, boxes and equations carry the
    chapter's numbers (Exercise 2.3), the same as in the book; the Colab set-up cell (Chapter 0's first code
    cell) is folded."""
    import re
    import sys as _sys

    _sys.path.insert(0, str(ROOT / "book" / "_ext"))
    # What is checked here is in the Markdown cells only: each chapter is opened from a copy without its code
    # cells' outputs (the same Markdown, the same front matter), which spares Chromium drawing every figure.
    text_only = lab[2] / "text_only"
    text_only.mkdir(exist_ok=True)
    for name in CHAPTERS:
        stored = json.loads((lab[2] / f"{name}.ipynb").read_text())
        for cell in stored["cells"]:
            if cell["cell_type"] == "code":
                cell["outputs"], cell["execution_count"] = [], None
        (text_only / f"{name}.ipynb").write_text(json.dumps(stored))
    problems = []
    for name in CHAPTERS:
        chapter = open_chapter(f"text_only/{name}")
        if name == "00_quick_tour":
            try:
                _the_colab_set_up_cell_is_folded_away(chapter)
            except AssertionError as error:
                problems.append(f"{name}: {error}")
        report = _rendered(chapter)
        if report["warnings"] or report["raw"]:
            problems.append(f"{name}: unresolved {report['warnings'][:5]} raw {[t[:80] for t in report['raw'][:2]]}")
            continue
        import live_links

        base = live_links.book_url(ROOT)
        targets = live_links.all_targets(lab[2].parent)
        number = live_links.chapter_of(f"notebooks/{name}")
        for text, href in report["links"]:
            if href.startswith(base + live_links.BIBLIOGRAPHY):
                if not re.fullmatch(r"[A-Za-z][\w' -]+( & [A-Za-z][\w' -]+| et al\.)?(, \d{4}| \(\d{4}\))", text):
                    problems.append(f"{name}: citation reads {text!r}")
            elif href.startswith(base + "notebooks/"):
                page_, _, anchor = href[len(base):].partition("#")
                found = [t for t in targets.values() if t.anchor == anchor and f"{t.doc}.html" == page_]
                if anchor and (not found or text != found[0].text()):
                    problems.append(f"{name}: link {text!r} to {href}")
            elif href.startswith("#"):
                found = [t for t in targets.values() if t.anchor == href[1:] and t.doc == f"notebooks/{name}"]
                shown = re.match(r"^\(?(?:[A-Z][a-z]+ )?(\d+(?:\.\d+)?)\)?", text)
                if found and shown and shown.group(1) != found[0].number:
                    problems.append(f"{name}: {text!r} refers to {found[0].label}, numbered {found[0].number} in the book")
        expected = [f"Exercise {t.number}" for t in live_links.scan(f"notebooks/{name}",
                                                                   live_links.markdown_cells(lab[2] / f"{name}.ipynb"))
                    if t.kind == "exercise"]
        shown = [re.match(r"Exercise [\d.]+", e).group(0) for e in report["exercises"] if e.startswith("Exercise")]
        if shown != expected:
            problems.append(f"{name}: exercises {shown}, the book has {expected}")
        if number is not None and not any(t.startswith(f"Exercise {number}.") for t in shown) and expected:
            problems.append(f"{name}: exercises are not numbered within Chapter {number}")
        if name in ("00_quick_tour", "05_anisotropic_icl"):  # screenshots of what a student reads
            cited = chapter.page.locator(f'.jp-MarkdownCell a[href^="{base}book/bibliography"]').first
            chapter.shot("citations", cited)
            across = chapter.page.locator(f'.jp-MarkdownCell a[href^="{base}notebooks/"]')
            if across.count():
                chapter.shot("cross-references", across.nth(min(3, across.count() - 1)))
            exercise = chapter.page.locator(".jp-MarkdownCell aside.myst-exercise")
            if exercise.count():
                chapter.shot("exercise", exercise.first)
    assert not problems, "\n".join(problems)


def _the_colab_set_up_cell_is_folded_away(chapter):
    """The first code cell (the Colab set-up) shows folded, not as the first code a student reads."""
    cells = json.loads((chapter.folder / f"{chapter.name}.ipynb").read_text())["cells"]
    index = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    cell = chapter.cell(index)
    cell.scroll_into_view_if_needed()
    chapter.shot("colab-cell", cell)
    assert "google.colab" not in cell.inner_text(), "the Colab set-up cell shows its code"
    assert cell.locator(".jp-InputPlaceholder").count() == 1, "the Colab set-up cell is not folded"


def _overlaps(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and \
        a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def _paper_figures_keep_their_titles_clear_of_the_axes(chapter, output):
    """Chapter 4's paper figures (show_saved) at JupyterLab's width: no axis title over the figure's title."""
    plots = output.locator(".js-plotly-plot")
    plots.first.wait_for(timeout=120_000)
    problems = []
    for k in range(plots.count()):
        plot = plots.nth(k)
        plot.scroll_into_view_if_needed()
        boxes = plot.evaluate("""gd => {
            const box = e => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, width: r.width, height: r.height,
                                                                          text: e.textContent}; };
            return {title: [...gd.querySelectorAll('.g-gtitle text')].map(box),
                    axes: [...gd.querySelectorAll('.g-ytitle text, .g-y2title text, .g-y3title text, .g-y4title text, '
                                                   + '.annotation-text-g text')].map(box)};
        }""")
        for title in boxes["title"]:
            for axis in boxes["axes"]:
                if axis["text"] and _overlaps(title, axis):
                    problems.append(f"figure {k + 1}: {axis['text']!r} over the title {title['text'][:60]!r}")
        chapter.shot(f"paper-figure-{k + 1}", plot)
    assert plots.count() == 3 and not problems, problems


# --- panels that fail gracefully ------------------------------------------------------------------

def _message(output) -> str:
    return " ".join(output.locator(".sal-message").all_inner_texts()).strip()


def _wait_message(output, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not _message(output):
        assert time.monotonic() < deadline, "no message in the panel's message line"
        time.sleep(0.3)
    return _message(output)


def _flow_panel_takes_a_singular_covariance_and_says_what_to_change(chapter, output):
    """Chapter 5's flow for any Σ: a singular Σ (Appendix F.3) draws its flow; a Σ too stiff to integrate,
    or one that is not a covariance, gets a message naming what to change in the panel, never a traceback."""
    output.locator("select").first.wait_for(timeout=60_000)
    first = figure(output)
    output.locator("select").first.select_option(label="eigenvalues")
    spectrum = output.locator(".widget-text", has=chapter.page.locator("text=eigenvalues")).locator("input").first
    spectrum.fill("1, 1, 1, 1, 0")
    spectrum.press("Enter")
    singular = wait_for_new_figure(output, first)
    assert not _message(output), _message(output)
    assert len(singular["traces"]) >= 2
    chapter.shot("flow-singular", output)
    for typed, words, unwanted in (("1e9, 1, 1, 1, 1", "eigenvalues", "below 0"),
                                   ("1e-9, 1, 1, 1, 1", "eigenvalues", "below 0"),
                                   ("1, 1, 1, 1, -1", "eigenvalue", "Traceback")):
        spectrum.fill(typed)
        spectrum.press("Enter")
        text = _wait_message(output)
        assert words in text and unwanted not in text, (typed, text)
        chapter.shot("flow-message", output)
        spectrum.fill("1, 1, 1, 1, 0")
        spectrum.press("Enter")
        deadline = time.monotonic() + 60
        while _message(output):
            assert time.monotonic() < deadline, _message(output)
            time.sleep(0.3)
    no_traceback(output)
    assert not chapter.errors, chapter.errors


def test_gap_panel_explains_the_laplace_law_with_its_own_controls(open_chapter, lab):
    """Chapter 3's panel refuses the Laplace law at its defaults, in the chapter's notation, naming the
    controls that change it (σ, ‖U‖), and computes once they are low enough."""
    chapter, index, output = run_to_panel(open_chapter, lab, "03_concentration", "Output gap|gap_panel(")
    output.locator("select").first.wait_for(timeout=60_000)
    before = figure(output)
    output.locator("select").first.select_option("laplace")
    text = _wait_message(output)
    chapter.shot("gap-laplace", output)
    assert "σ" in text and "‖U‖" in text and "C^T" not in text and "query or" not in text, text
    sigma = output.locator(".widget-hbox", has=chapter.page.locator("text=σ")).locator(".sal-typed-entry input").first
    sigma.fill("0.1")
    sigma.press("Enter")
    norm = output.locator(".widget-hbox", has=chapter.page.locator("text=‖U‖")).locator(".sal-typed-entry input").first
    norm.fill("0.25")
    norm.press("Enter")
    wait_for_new_figure(output, before, timeout=180)
    no_traceback(output)
    assert not chapter.errors, chapter.errors


def _disabled(output, description: str) -> bool:
    slider = output.locator(".widget-hslider", has=output.page.locator(f"text={description}")).first
    return slider.evaluate("""e => [...e.querySelectorAll('input, select, button, .noUi-target')].some(
        x => x.disabled || x.hasAttribute('disabled') || x.classList.contains('disabled'))""")


def _training_panel_controls_seed_interrupt_and_rerun(chapter, index, output):
    """The training panel: controls that do nothing for the current choice are disabled; Stop looks disabled
    until a run starts; the seed box takes exactly the trainer's seeds; Kernel > Interrupt stops training;
    running the panel's cell again stops the run of the old panel and says so."""
    page = chapter.page
    train = output.locator("button", has_text="Train")
    stop = output.locator("button", has_text="Stop")
    train.wait_for(timeout=60_000)
    # Σ = I: ρ does nothing; the PyTorch initialisation: neither α nor the init scale
    assert _disabled(output, "ρ (KMS)") and _disabled(output, "α (Assumption 5.1)") and _disabled(output, "init scale")
    selects = output.locator("select")
    selects.nth(1).select_option(label="PyTorch × scale (near zero)")
    eventually(lambda: _disabled(output, "α (Assumption 5.1)") and not _disabled(output, "init scale"),
               "the PyTorch initialisation disables α and enables the init scale")
    selects.nth(1).select_option(label="Assumption 5.1 (α)")
    eventually(lambda: not _disabled(output, "α (Assumption 5.1)") and _disabled(output, "init scale"),
               "Assumption 5.1 enables α and disables the init scale")
    selects.first.select_option(label="Kac-Murdock-Szegő ρ^|i-j|")
    eventually(lambda: not _disabled(output, "ρ (KMS)"), "the KMS covariance enables ρ")
    chapter.shot("training-controls", output)
    # the seed box: the trainer's range [0, 10,000)
    seed = output.locator(".sal-typed-entry", has=page.locator("text=seed")).locator("input").first
    seed.fill("10000")
    seed.press("Enter")
    assert "9999" in _wait_message(output)
    # Stop: visibly disabled before a run
    look = lambda: stop.evaluate("b => [getComputedStyle(b).backgroundColor, getComputedStyle(b).opacity].join()")  # noqa: E731
    idle_look = look()
    slide(output, "steps", "ArrowRight", "10000")  # a run long enough to interrupt
    train.click()
    status = output.locator(".sal-status")
    status.filter(has_text="training").wait_for(timeout=30_000)
    eventually(lambda: look() != idle_look, "Stop looks different once a run has started")
    # Kernel > Interrupt stops the training
    page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").click()
    page.locator(".lm-Menu-itemLabel", has_text="Interrupt Kernel").click()
    status.filter(has_text="stopped at step").wait_for(timeout=30_000)
    chapter.shot("training-interrupted", output)
    # running the cell again stops the run of the old panel, and the new panel says so
    train.click()
    status.filter(has_text="training").wait_for(timeout=30_000)
    chapter.run([index])
    output = chapter.cell(index).locator(".jp-OutputArea").first
    output.locator("button", has_text="Train").wait_for(timeout=60_000)
    assert "stopped" in _wait_message(output, timeout=30)
    chapter.shot("training-rerun", output)


def test_chapter_6_panel_trains_the_chosen_law(open_chapter, lab):
    chapter, index, output = run_to_panel(open_chapter, lab, "06_beyond_gaussian", "beyond_panel(")
    train = output.locator("button", has_text="Train")
    train.wait_for(timeout=60_000)
    chapter.shot("beyond-panel", output)
    output.locator("select").first.select_option(label="Rademacher")  # the covariate law
    slide(output, "prompt length L", "ArrowLeft", "10")  # from L = 100
    slide(output, "steps", "ArrowLeft", "250")  # from 1,250 steps
    train.click()
    status = output.locator(".sal-status")
    status.filter(has_text="finished at step").wait_for(timeout=240_000)
    drawn = figure(output)
    assert "Rademacher covariates, L = 10" in drawn["title"], drawn["title"]
    assert any("limit" in name for name, _, _ in drawn["traces"])
    chapter.shot("beyond-panel-trained", output)
    # a seed beyond the seeding rule's range is clamped by the control, never a traceback
    seed = output.locator(".widget-text input, input[type=number]").first
    seed.fill("123456")
    seed.press("Enter")
    time.sleep(1)
    no_traceback(output)
    assert not chapter.errors, chapter.errors


def test_chapter_7_panel_redraws_for_depth_and_attention_and_reports_a_bad_value(open_chapter, lab):
    chapter, index, output = run_to_panel(open_chapter, lab, "07_depth", "depth_panel(")
    output.locator(".widget-slider").first.wait_for(timeout=60_000)
    before = figure(output)
    assert "K = 3" in before["title"], before["title"]
    chapter.shot("depth-panel", output)
    slide(output, "layers K", "ArrowRight", "4")  # the number of layers
    deeper = wait_for_new_figure(output, before)
    assert "K = 4" in deeper["title"], deeper["title"]
    # linear attention instead of softmax (the second drop-down, after the family of weights)
    output.locator("select").nth(1).select_option(label="linear")
    linear = wait_for_new_figure(output, deeper)
    assert linear["title"].startswith("Linear attention"), linear["title"]
    # a non-number, then an out-of-range number, typed into the first number box (the number of layers)
    type_bad_numbers(output, output.locator(".sal-typed-entry input").first)
    chapter.shot("depth-panel-bad-value", output)
    no_traceback(output)
    assert not chapter.errors, chapter.errors


def test_chapter_8_panels_redraw_the_limit_and_train_a_short_run(open_chapter, lab):
    chapter, index, output = run_to_panel(open_chapter, lab, "08_nonlinear_icl", "limit_panel(")
    output.locator(".widget-slider").first.wait_for(timeout=60_000)
    before = figure(output)
    assert "L = 1,000" in before["title"], before["title"]
    chapter.shot("nonlinear-limit-panel", output)
    slide(output, "prompt length L", "ArrowLeft", "100")
    shorter = wait_for_new_figure(output, before)
    assert "L = 100" in shorter["title"], shorter["title"]
    no_traceback(output)
    # the training panel, in the same kernel (the cells it needs that the limit panel did not)
    path = lab[2] / "08_nonlinear_icl.ipynb"
    training = panel_cell(path, "nonlinear_training_panel(")
    chapter.run([i for i in cells_for(path, training) if i not in cells_for(path, index)])
    output = _panel_output(chapter, training)
    train = output.locator("button", has_text="Train")
    train.wait_for(timeout=60_000)
    slide(output, "prompt length L", "ArrowLeft", "10")  # from L = 100
    slide(output, "steps", "ArrowLeft", "100")  # from 500 steps
    train.click()
    output.locator(".sal-status").filter(has_text="finished at step").wait_for(timeout=240_000)
    drawn = figure(output)
    assert "L = 10" in drawn["title"] and "window" in drawn["title"], drawn["title"]
    assert any("softmax" in name for name, _, _ in drawn["traces"])
    chapter.shot("nonlinear-training-panel", output)
    no_traceback(output)
    assert not chapter.errors, chapter.errors


def test_chapter_4_panel_before_a_run_paper_figures_and_training_panel(open_chapter, lab):
    """Chapter 4, opened once, its kernel started once: the panel not yet run says it needs a kernel; the paper
    figures keep their titles clear; the training panel trains and stops, then (run again, fresh) its controls."""
    path = lab[2] / "04_isotropic_icl.ipynb"
    chapter = open_chapter("04_isotropic_icl")
    with check("Chapter 4's panel before a run"):
        _panel_not_yet_run_says_it_needs_a_kernel(chapter)
    figures = panel_cell(path, "show_saved(")
    done = cells_for(path, figures)
    chapter.run(done)
    with check("Chapter 4's paper figures"):
        _paper_figures_keep_their_titles_clear_of_the_axes(chapter, _panel_output(chapter, figures))
    index = panel_cell(path, "regression_panel(")
    chapter.run([i for i in cells_for(path, index) if i not in done])
    with check("Chapter 4's training panel trains and stops"):
        _training_panel_trains_stops_and_shows_the_partial_result(chapter, _panel_output(chapter, index))
    chapter.run([index])  # a fresh panel, at its defaults
    with check("Chapter 4's training panel controls, seed, interrupt and rerun"):
        _training_panel_controls_seed_interrupt_and_rerun(chapter, index, _panel_output(chapter, index))


def test_chapter_5_flow_panel_redraws_takes_a_singular_covariance_and_reloads(open_chapter, lab):
    """Chapter 5, opened once: the flow panel redraws for Σ and α; run again (fresh), it takes a singular Σ and
    says what to change for a stiff one; saved and reloaded, it says how to bring it to life."""
    chapter, index, output = run_to_panel(open_chapter, lab, "05_anisotropic_icl", "covariance_flow_panel(")
    with check("Chapter 5's flow panel redraws"):
        _flow_panel_redraws_for_the_covariance_and_the_initialisation(chapter, output)
    chapter.run([index])  # a fresh panel, at its defaults
    with check("Chapter 5's flow panel with a singular or a stiff Σ"):
        _flow_panel_takes_a_singular_covariance_and_says_what_to_change(chapter, _panel_output(chapter, index))
    with check("Chapter 5 saved and reloaded"):
        _flow_panel_saved_and_reloaded_says_what_to_do(chapter, index)


def test_chapter_9_panel_redraws_the_map_for_another_variant_and_regimes(open_chapter, lab):
    chapter, index, output = run_to_panel(open_chapter, lab, "09_linearity_map", "linearity_map_panel(")
    output.locator("select").first.wait_for(timeout=60_000)
    before = figure(output)
    assert before["title"].replace("<br>", " ").startswith("Risk softmax attention saves"), before["title"]
    assert any(name.startswith("theory at L = ∞") for name, _, _ in before["traces"])
    chapter.shot("linearity-map-panel", output)
    # the measure's variant (the drop-down after the list of regimes)
    output.locator("select").nth(1).select_option(label="share of linear attention's excess risk")
    share = wait_for_new_figure(output, before)
    # the title is wrapped for a phone's width (style.fit_phone): read it as one line
    assert share["title"].replace("<br>", " ").startswith("Share of linear attention's excess risk"), share["title"]
    # one regime only
    output.locator("select").first.select_option(label="uniform inputs")
    one = wait_for_new_figure(output, share)
    assert sum(name.startswith("uniform inputs") for name, _, _ in one["traces"]) == 1, one["traces"]
    no_traceback(output)
    assert not chapter.errors, chapter.errors
