"""The rendered book as a reader gets it: every built page, loaded in headless Chromium.

The built site ``_build/html`` is served on a free port of 127.0.0.1. Every page must load with no
JavaScript error and no request leaving 127.0.0.1, typeset all its mathematics, draw every plotly
figure, move every figure's slider to every step (each step must redraw the figure with exactly its
own traces), and keep its exercise solutions folded until their toggle is clicked. It must also be
accessible: axe-core (vendored in ``tests/vendor/axe-core``, so the test stays offline) finds no
violation of its rules, of any impact (WCAG 2.x A and AA, and best practices); every figure
has a text alternative (a ``<figure>`` named by its title, captioned with what it shows); every
slider is reached with Tab, moved with the arrow keys (the figure redraws) and shows its focus. A
full-page screenshot of each page is written to ``_build/screenshots/`` for review, and what axe
reported, every impact included, to ``_build/accessibility/`` (``BOOK_HTML=DIR`` checks a book
built into ``DIR`` instead, with these folders beside it).

Static checks of the built HTML come first: every page of ``_toc.yml`` is built, no page loads
anything from outside the site or names a CDN, internal links and anchors resolve, and every
chapter has its Binder and Colab launch buttons and hides its Colab install cell.

Run after building the book (``make test`` builds it strictly, then runs this file with
``REQUIRE_BOOK=1``, which turns the missing-book skip into a failure).
"""
from __future__ import annotations

import functools
import html.parser
import importlib
import json
import os
import pathlib
import re
import sys
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = pathlib.Path(os.environ.get("BOOK_HTML") or ROOT / "_build" / "html")  # a book built elsewhere
SCREENSHOTS = SITE.parent / "screenshots"
SCREENSHOT_TIMEOUT_MS = 120_000
ACCESSIBILITY = SITE.parent / "accessibility"  # what axe-core reported, page by page
AXE = ROOT / "tests" / "vendor" / "axe-core" / "axe.min.js"  # tests/vendor/README.md
FAILING_IMPACTS = ("minor", "moderate", "serious", "critical")  # every impact axe-core gives
sys.path.insert(0, str(ROOT / "tools"))
install_chromium = importlib.import_module("install_chromium")  # the rule `make chromium` installs by
CHROMIUM = install_chromium.find()  # $CHROMIUM, else `chromium` on the PATH, else Playwright's
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CDN_HOSTS = ("unpkg.com", "jsdelivr.net", "cdnjs.cloudflare.com", "cdn.plot.ly", "mathjax.org",
             "googleapis.com", "gstatic.com", "polyfill.io", "code.jquery.com", "plausible.io")

if not (SITE / "index.html").exists():
    reason = f"the book is not built ({SITE} has no index.html): run `make book` or `make test`"
    if os.environ.get("REQUIRE_BOOK") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)

PAGES = sorted(str(p.relative_to(SITE)) for p in SITE.rglob("*.html")
               if not p.relative_to(SITE).parts[0].startswith("_"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())


def _text(page: str) -> str:
    return (SITE / page).read_text(encoding="utf-8")


def _toc_files() -> list[str]:
    return re.findall(r"file:\s*(\S+)", (ROOT / "_toc.yml").read_text())


def _notebook_pages() -> list[str]:
    """Built pages whose source is a notebook (its copy is served under ``_sources``)."""
    return [page for page in PAGES if (SITE / "_sources" / page).with_suffix(".ipynb").exists()]


# --- the built HTML ------------------------------------------------------------------------------

def test_every_page_of_the_toc_is_built():
    missing = [f for f in _toc_files() + [yaml.safe_load((ROOT / "_toc.yml").read_text())["root"]]
               if not (SITE / f"{f}.html").exists()]
    assert not missing, f"not built: {missing}"


class _Links(html.parser.HTMLParser):
    """Collects the ids of a page, the URLs it loads by itself, and the links a reader can follow."""

    LOADING = {"script": "src", "img": "src", "iframe": "src", "source": "src", "audio": "src",
               "video": "src", "embed": "src", "link": "href"}

    def __init__(self):
        super().__init__()
        self.ids, self.loads, self.links = set(), [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag in self.LOADING and attrs.get(self.LOADING[tag]):
            if not (tag == "link" and attrs.get("rel") in ("canonical", "alternate")):
                self.loads.append(attrs[self.LOADING[tag]])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


@functools.cache
def _parse(page: str) -> _Links:
    parser = _Links()
    parser.feed(_text(page))
    return parser


def _is_external(url: str) -> bool:
    return bool(urllib.parse.urlsplit(url).scheme) or url.startswith("//")


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_nothing_from_outside_the_site(page):
    external = [url for url in _parse(page).loads if _is_external(url) and not url.startswith("data:")]
    assert not external, f"{page} loads {external}"
    cdn = sorted({host for host in CDN_HOSTS if host in _text(page)})
    assert not cdn, f"{page} names the content delivery networks {cdn}"


@pytest.mark.parametrize("page", PAGES)
def test_internal_links_resolve(page):
    broken = []
    for href in _parse(page).links:
        if _is_external(href):
            continue
        target, _, anchor = urllib.parse.unquote(href).partition("#")
        path = (SITE / page).parent / target if target else SITE / page
        path = path.resolve()
        if path.is_dir():
            path = path / "index.html"
        if not path.exists():
            broken.append(href)
        elif anchor and path.suffix == ".html" and anchor not in _parse(str(path.relative_to(SITE))).ids:
            broken.append(href)
    assert not broken, f"{page} links to missing pages or anchors: {broken}"


def _live_links():
    import sys

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import live_links

    return live_links


def test_chapters_number_as_jupyterlab_does():
    """Exercises, boxes and equations numbered within their chapter (Exercise 2.3, (4.1)), as the chapters'
    front matter makes JupyterLab number them."""
    live_links = _live_links()
    wrong = []
    for target in live_links.all_targets(ROOT).values():
        text = _text(f"{target.doc}.html")
        match = re.search(rf'id="{re.escape(target.anchor)}"(.{{0,600}})', text, re.S)
        shown = re.sub(r"<[^>]+>|\s+", " ", match.group(1)) if match else ""
        if target.text().strip("()") not in shown:
            wrong.append(f"{target.label}: expected {target.text()}, the page shows {shown[:80]!r}")
    assert not wrong, wrong


def test_every_link_of_the_chapters_into_the_book_exists():
    """The citations and cross-chapter links that JupyterLab and Colab follow to the published book point to
    pages and anchors that this build has."""
    live_links = _live_links()
    base = live_links.book_url(ROOT)
    missing = []
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for source in live_links.markdown_cells(notebook):
            for _, url in live_links.DEFINITION.findall(source):
                if not url.startswith(base):
                    continue
                page, _, anchor = url[len(base):].partition("#")
                if not (SITE / page).exists() or (anchor and anchor not in _parse(page).ids):
                    missing.append(f"{notebook.name}: {url}")
    assert not missing, missing


class _Prose(html.parser.HTMLParser):
    """The text of a page outside code, scripts, styles and mathematics (what Markdown rendered as prose)."""

    SKIP = {"pre", "code", "script", "style", "math", "svg"}

    def __init__(self):
        super().__init__()
        self.depth, self.parts = 0, []

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag in self.SKIP or "math" in classes or self.depth:
            self.depth += tag not in ("br", "img", "input", "meta", "link", "hr", "wbr")

    def handle_endtag(self, tag):
        if self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if not self.depth:
            self.parts.append(data)


def unresolved_reference_links(page_html: str) -> list[str]:
    """Reference-style links ``[text][label]`` that Markdown left as raw text: a label with no definition."""
    parser = _Prose()
    parser.feed(page_html)
    return re.findall(r"\[[^\]\n]+\]\[[\w:./-]+\]", " ".join(parser.parts))


def test_unresolved_reference_links_are_found():
    raw = "<p>As [Boyer &amp; Boursier (2025)][boyer2025softmax] prove.</p>"
    assert unresolved_reference_links(raw) == ["[Boyer & Boursier (2025)][boyer2025softmax]"]
    assert unresolved_reference_links('<pre>data["a"]["b"]</pre><code>x[0][1]</code><p>a <a href="#x">link</a></p>'
                                      '<span class="math">[a][b]</span>') == []


@pytest.mark.parametrize("page", PAGES)
def test_no_reference_link_is_left_unresolved(page):
    """A citation or reference written as ``[text][label]`` without its definition shows as raw text."""
    left = unresolved_reference_links(_text(page))
    assert not left, f"{page} shows unresolved reference links (run tools/live_references.py): {left}"


def test_citations_read_as_in_the_chapters():
    text = re.sub(r"<[^>]+>", "", _text("notebooks/00_quick_tour.html")).replace("&amp;", "&")
    assert "Boyer & Boursier (2025)" in text and "Castin et al. (2025)" in text


def test_every_chapter_has_binder_and_colab_buttons():
    repo = CONFIG["repository"]
    org_repo = urllib.parse.urlsplit(repo["url"]).path.strip("/")
    buttons = CONFIG["launch_buttons"]
    assert _notebook_pages(), "no chapter was built from a notebook"
    for page in _notebook_pages():
        notebook = pathlib.PurePosixPath(page).with_suffix(".ipynb")
        text = _text(page).replace("&amp;", "&")
        binder = f"{buttons['binderhub_url']}/v2/gh/{org_repo}/{repo['branch']}?urlpath=lab/tree/{notebook}"
        colab = f"{buttons['colab_url']}/github/{org_repo}/blob/{repo['branch']}/{notebook}"
        assert binder in text, f"{page} lacks the Binder button {binder}"
        assert colab in text, f"{page} lacks the Colab button {colab}"
        assert "google.colab" not in text, f"{page} shows its Colab install cell (tag it remove-cell)"


# --- the pages in a browser ----------------------------------------------------------------------

class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    if os.environ.get("REQUIRE_BOOK") != "1":
        pytest.importorskip("playwright", reason="playwright is in the `test` extra: pip install -e '.[test]'")
    from playwright.sync_api import sync_playwright

    if CHROMIUM is None:
        pytest.fail(install_chromium.NOT_FOUND, pytrace=False)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        # Playwright gives every launch a fresh, temporary profile (--user-data-dir).
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


class _Visit:
    """One page in a fresh browser context, with everything that went wrong on the way."""

    def __init__(self, browser, site_url: str, page: str, width: int = 1280):
        self.origin = site_url.rstrip("/")
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.context.route("**/*", self._only_local)
        self.tab = self.context.new_page()
        self.errors: list[str] = []
        self.tab.on("pageerror", lambda error: self.errors.append(f"JavaScript error: {error}"))
        self.tab.on("console", lambda m: m.type == "error" and self.errors.append(f"console error: {m.text}"))
        self.tab.on("request", self._record_request)
        self.tab.on("response", lambda r: r.status >= 400 and self.errors.append(f"HTTP {r.status}: {r.url}"))
        self.tab.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url} ({r.failure})"))
        self.tab.goto(site_url + page, wait_until="networkidle")  # idle: index.html redirects
        if self.tab.locator(".math").count():  # MathJax is loaded (deferred) on pages with mathematics
            self.tab.wait_for_function("() => window.MathJax?.startup?.promise", timeout=15_000)
            self.tab.evaluate("() => MathJax.startup.promise")

    def _is_local(self, url: str) -> bool:
        return url.startswith((self.origin + "/", "data:", "blob:", "about:"))

    def _only_local(self, route):
        route.continue_() if self._is_local(route.request.url) else route.abort()

    def _record_request(self, request):
        if not self._is_local(request.url):
            self.errors.append(f"request leaving 127.0.0.1: {request.url}")

    def close(self):
        self.context.close()


_MATH_PROBLEMS = r"""() => {
    const math = [...document.querySelectorAll(".math")];
    const untypeset = math.filter(e => !e.querySelector("mjx-container")).map(e => e.textContent.slice(0, 60));
    const errors = [...document.querySelectorAll("mjx-merror")].map(e => e.textContent.slice(0, 60));
    const wide = [...document.querySelectorAll('mjx-container[display="true"]')]
        .filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.parentElement.textContent.slice(0, 60));
    const raw = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (node.parentElement.closest("pre, code, script, style, textarea, mjx-container")) continue;
        if (/\\\(|\\\[|\$\$/.test(node.textContent)) raw.push(node.textContent.trim().slice(0, 60));
    }
    return {untypeset, errors, raw, wide};
}"""

# Markdown that reached the page as text: a directive MyST did not parse (for instance a ``` fence
# whose title holds a `role`, which CommonMark forbids: use a ```` or ::: fence there).
_UNPARSED_MARKUP = r"""() => {
    const found = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (node.parentElement.closest(".cell, script, style")) continue;
        const match = node.textContent.match(/(```|:::)\{[\w:-]+\}.*|^\s*:(label|class):.*/m);
        if (match) found.push(match[0].slice(0, 60));
    }
    return found;
}"""

_UNDRAWN_FIGURES = """() => [...document.querySelectorAll(".plotly-graph-div")]
    .filter(gd => !gd.querySelector("svg.main-svg") || !(gd._fullData || []).length)
    .map(gd => gd.id)"""
_ALL_FIGURES_DRAWN = "() => (" + _UNDRAWN_FIGURES.removeprefix("() =>") + ").length === 0"

# The drawn traces (not the slider, whose label changes with every step), and what Plotly shows. The drawn
# layers' markup is hashed in the page (53-bit cyrb53): equal hashes mean equal markup, and the markup, often
# a megabyte, never crosses to Python.
_FIGURE_STATE = """gd => {
    const drawn = [...gd.querySelectorAll(".cartesianlayer, .polarlayer, .ternarylayer, .pielayer")]
        .map(layer => layer.innerHTML).join("");
    let h1 = 0xdeadbeef, h2 = 0x41c6ce57;
    for (let i = 0; i < drawn.length; i++) {
        const c = drawn.charCodeAt(i);
        h1 = Math.imul(h1 ^ c, 2654435761); h2 = Math.imul(h2 ^ c, 1597334677);
    }
    h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
    h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
    return {drawn: `${drawn.length}:${(4294967296 * (2097151 & h2) + (h1 >>> 0)).toString(36)}`,
            visible: gd._fullData.map(trace => trace.visible === true),
            active: gd.layout.sliders.map(slider => slider.active ?? 0)};
}"""

# The slider is at ``step`` and the drawn layers differ from ``drawn``: Plotly redraws a frame or two after
# the click or the key. Waiting for this (10 s at most, for a machine busy with the other stages of `make test`;
# then the check below reports what is wrong) replaces a fixed pause.
_REDRAWN = ("([gd, slider, step, drawn]) => gd.layout.sliders[slider].active === step && ("
            + _FIGURE_STATE + ")(gd).drawn !== drawn")

# The slider scrolled into view if it is not (as Playwright's scroll_into_view_if_needed), where its steps
# are on the screen, and the figure's state before the click.
_SLIDER_GEOMETRY = """(gd, index) => {
    const slider = gd.querySelectorAll(".slider-group")[index];
    const box = slider.getBoundingClientRect();
    if (box.top < 0 || box.bottom > window.innerHeight) slider.scrollIntoView({block: "center"});
    const centre = e => { const b = e.getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2]; };
    return {steps: [...slider.querySelectorAll(".slider-tick-rect")].map(e => centre(e)[0]),
            y: centre(slider.querySelector(".slider-rail-rect"))[1], before: (""" + _FIGURE_STATE + """)(gd)};
}"""


def _check_text(visit: _Visit) -> list[str]:
    math = visit.tab.evaluate(_MATH_PROBLEMS)
    problems = [f"math not typeset: {m!r}" for m in math["untypeset"]]
    problems += [f"MathJax error: {m!r}" for m in math["errors"]]
    problems += [f"raw TeX delimiters left in the text: {m!r}" for m in math["raw"]]
    problems += [f"display equation wider than the text column: {m!r}" for m in math["wide"]]
    problems += [f"markup left unparsed: {m!r}" for m in visit.tab.evaluate(_UNPARSED_MARKUP)]
    return problems


def _check_figures(visit: _Visit) -> list[str]:
    try:
        visit.tab.wait_for_function(_ALL_FIGURES_DRAWN, timeout=15_000)
    except Exception:  # reported below, figure by figure
        pass
    return [f"plotly figure {gd} not drawn" for gd in visit.tab.evaluate(_UNDRAWN_FIGURES)]


def _check_sliders(visit: _Visit) -> tuple[int, list[str]]:
    """Click every step of every slider; each click must show that step's traces and redraw."""
    problems, moves = [], 0
    figures = visit.tab.locator(".plotly-graph-div")
    for index in range(figures.count()):
        gd = figures.nth(index).element_handle()
        sliders = gd.evaluate("gd => (gd.layout.sliders || []).map(s => s.steps.map(step => step.args))")
        for s, steps in enumerate(sliders):
            if len(steps) < 2:
                continue
            start = gd.evaluate(_FIGURE_STATE)["active"][s]
            order = list(range(start + 1, len(steps))) + list(range(start + 1))
            for step in order:
                geometry = gd.evaluate(_SLIDER_GEOMETRY, s)
                if len(geometry["steps"]) != len(steps):
                    problems.append(f"figure {index}: slider {s} draws {len(geometry['steps'])} of {len(steps)} steps")
                    break
                before = geometry["before"]
                visit.tab.mouse.click(geometry["steps"][step], geometry["y"])
                try:  # Plotly restyles on the click; give a busy machine a moment
                    visit.tab.wait_for_function(_REDRAWN, arg=[gd, s, step, before["drawn"]], timeout=10_000)
                except Exception:  # reported below
                    pass
                after = gd.evaluate(_FIGURE_STATE)
                moves += 1
                where = f"figure {index}, slider {s}, step {step}"
                if after["active"][s] != step:
                    problems.append(f"{where}: clicking the step left the slider at {after['active'][s]}")
                visible = steps[step][0].get("visible") if steps[step] and isinstance(steps[step][0], dict) else None
                if visible is not None and after["visible"] != [bool(v) for v in visible]:
                    problems.append(f"{where}: the visible traces are not the step's")
                if after["drawn"] == before["drawn"]:
                    problems.append(f"{where}: moving the slider did not change the figure")
    return moves, problems


def _check_solutions(visit: _Visit) -> list[str]:
    problems = []
    solutions = visit.tab.locator("div.solution")
    for index in range(solutions.count()):
        if "dropdown" not in (solutions.nth(index).get_attribute("class") or ""):
            problems.append(f"solution {index} is not hidden (give it `:class: dropdown`)")
    dropdowns = visit.tab.locator("div.admonition.dropdown")
    for index in range(dropdowns.count()):
        dropdown = dropdowns.nth(index)
        body = dropdown.locator(":scope > :not(.admonition-title)").first
        if body.is_visible():
            problems.append(f"dropdown {index} is open before its toggle is clicked")
            continue
        dropdown.locator(":scope > .admonition-title button.toggle-button").first.click()
        try:
            body.wait_for(state="visible", timeout=10_000)
        except Exception:
            problems.append(f"dropdown {index} stays folded when its toggle is clicked")
    return problems


_SET_MODE = """mode => { document.documentElement.dataset.theme = mode; document.documentElement.dataset.mode = mode;
    return new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done))); }"""

# Where each plot is drawn: switching the theme recolours the page, it does not move or resize a figure.
_PLOT_BOXES = """() => [...document.querySelectorAll(".plotly-graph-div")].map(gd => {
    const box = gd.getBoundingClientRect();
    return [gd.id, Math.round(box.left), Math.round(box.width)];
})"""


def _check_accessibility(visit: _Visit, page: str) -> list[str]:
    """axe-core's rules that are on by default, on the page as drawn in the light and the dark theme;
    a violation of any impact fails. The dark theme draws the plots where the light one does."""
    visit.tab.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    visit.tab.add_style_tag(content="*, *::before, *::after { transition: none !important; }")  # switch at once
    report, problems, boxes = {"page": page}, [], {}
    for mode in ("light", "dark"):
        visit.tab.evaluate(_SET_MODE, mode)
        result = visit.tab.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
        violations = [{"rule": v["id"], "impact": v["impact"], "help": v["help"], "nodes": len(v["nodes"]),
                       "where": [" ".join(map(str, n["target"])) for n in v["nodes"]][:5]}
                      for v in result["violations"]]
        report.update(axe=result["testEngine"]["version"], **{mode: violations})
        problems += [f"axe-core, {mode} theme, {v['impact']}: {v['rule']} ({v['help']}) at {v['where']}"
                     for v in violations if v["impact"] in FAILING_IMPACTS]
        boxes[mode] = visit.tab.evaluate(_PLOT_BOXES)
    moved = [(light, dark) for light, dark in zip(boxes["light"], boxes["dark"]) if light != dark]
    if moved:
        problems.append(f"the dark theme moves or resizes plots ([id, left, width] light, dark): {moved[:3]}")
    visit.tab.evaluate(_SET_MODE, "light")
    ACCESSIBILITY.mkdir(parents=True, exist_ok=True)
    (ACCESSIBILITY / (page.removesuffix(".html").replace("/", "__") + ".json")).write_text(json.dumps(report, indent=1))
    return problems


_FIGURES_WITHOUT_TEXT = """() => [...document.querySelectorAll(".plotly-graph-div")].filter(gd => {
    const figure = gd.closest("figure.sal-figure");
    const caption = figure && document.getElementById(figure.getAttribute("aria-describedby") || "");
    return !figure || !(figure.getAttribute("aria-label") || "").trim() || !caption
        || !figure.contains(caption) || caption.textContent.trim().length < 20;
}).map(gd => gd.id)"""

# A keyboard user's view of a slider: is it focused, what does it announce, is its focus ring drawn.
_FOCUSED_SLIDER = """gd => {
    const group = document.activeElement;
    if (!group || !gd.contains(group) || group.getAttribute("role") !== "slider") return null;
    const rail = group.querySelector(".slider-rail-rect");
    return {index: [...gd.querySelectorAll("g.slider-group")].indexOf(group),
            valuenow: Number(group.getAttribute("aria-valuenow")), valuetext: group.getAttribute("aria-valuetext"),
            name: group.getAttribute("aria-label"), ring: getComputedStyle(rail).stroke,
            plain: getComputedStyle(gd.querySelector(".slider-rail-rect")).stroke};
}"""
_FOCUS_RING = "rgb(26, 86, 176)"  # #1a56b0, book/_static/course.css


def _check_figure_text_and_keys(visit: _Visit) -> list[str]:
    """Every figure has a text alternative; each slider is reached by Tab and moved by the arrow keys."""
    problems = [f"plotly figure {gd} has no text alternative (figure.sal-figure with a name and a caption)"
                for gd in visit.tab.evaluate(_FIGURES_WITHOUT_TEXT)]
    figures = visit.tab.locator(".plotly-graph-div")
    for index in range(figures.count()):
        gd = figures.nth(index).element_handle()
        count = gd.evaluate("gd => (gd.layout.sliders || []).filter(s => s.steps.length > 1).length")
        if not count:
            continue
        # Tab from a button placed just before the figure reaches its first slider.
        gd.evaluate("""gd => { const probe = document.createElement("button");
            probe.id = "keyboard-probe"; probe.textContent = "probe"; gd.before(probe); }""")
        visit.tab.focus("#keyboard-probe")
        visit.tab.keyboard.press("Tab")
        for s in range(count):
            where = f"figure {index}, slider {s}"
            focused = gd.evaluate(_FOCUSED_SLIDER)
            if focused is None or focused["index"] != s:
                problems.append(f"{where}: Tab does not reach the slider (focus on {focused})")
                break
            if focused["ring"] != _FOCUS_RING:
                problems.append(f"{where}: no visible focus (rail stroke {focused['ring']})")
            before = gd.evaluate(_FIGURE_STATE)
            last = gd.evaluate("(gd, s) => gd.layout.sliders[s].steps.length - 1", s)
            key, step = ("ArrowRight", before["active"][s] + 1) if before["active"][s] < last else \
                ("ArrowLeft", before["active"][s] - 1)
            visit.tab.keyboard.press(key)
            try:
                visit.tab.wait_for_function(_REDRAWN, arg=[gd, s, step, before["drawn"]], timeout=10_000)
            except Exception:  # reported below
                pass
            after, focused = gd.evaluate(_FIGURE_STATE), gd.evaluate(_FOCUSED_SLIDER)
            if after["active"][s] != step:
                problems.append(f"{where}: {key} left the slider at step {after['active'][s]}, not {step}")
            elif after["drawn"] == before["drawn"]:
                problems.append(f"{where}: {key} did not redraw the figure")
            if focused is None or focused["valuenow"] != step or not focused["valuetext"]:
                problems.append(f"{where}: after {key} the slider lost focus or does not announce step {step}")
            visit.tab.keyboard.press("Tab")  # on to the figure's next slider
        gd.evaluate("gd => document.getElementById('keyboard-probe').remove()")
    return problems


#: JPEG's largest height in pixels: Chromium writes an empty file for a full page taller than this.
JPEG_LIMIT = 65_535


def _screenshot(visit: _Visit, page: str, suffix: str = "") -> list[str]:
    """A full-page screenshot for review: JPEG (a long page's PNG took up to twice the CPU to encode, for a copy to
    look at), PNG where the page is taller than JPEG allows (an API page at a phone's width). An empty file is a
    problem."""
    height = visit.tab.evaluate("async () => { await document.fonts.ready; return document.documentElement.scrollHeight; }")
    kind = "jpeg" if height <= JPEG_LIMIT else "png"
    path = SCREENSHOTS / (page.removesuffix(".html").replace("/", "__") + suffix + (".jpg" if kind == "jpeg" else ".png"))
    # the longest API pages take more than Playwright's default 30 s to capture on a slow CPU shared with the other stages
    visit.tab.screenshot(path=str(path), full_page=True, type=kind, timeout=SCREENSHOT_TIMEOUT_MS,
                         **({"quality": 85} if kind == "jpeg" else {}))
    path.with_suffix(".png" if kind == "jpeg" else ".jpg").unlink(missing_ok=True)  # an earlier run's, of the other kind
    return [] if path.stat().st_size else [f"the screenshot {path.name} ({height} px tall) is empty"]


def test_the_book_has_slider_figures():
    """The static counterparts of the chapters' live widgets; the browser test moves their sliders."""
    assert any('"sliders"' in _text(page) for page in PAGES), "no page of the book has a plotly slider"


@pytest.mark.parametrize("page", PAGES)
def test_page_in_the_browser(browser, site_url, page):
    visit = _Visit(browser, site_url, page)
    try:
        problems = _check_text(visit) + _check_figures(visit) + _screenshot(visit, page)
        problems += _check_accessibility(visit, page) + _check_figure_text_and_keys(visit)
        moves, slider_problems = _check_sliders(visit)
        if '"sliders"' in _text(page) and not moves:
            slider_problems.append("the page has slider figures but no slider could be moved")
        problems = visit.errors + problems + slider_problems + _check_solutions(visit)
    finally:
        visit.close()
    assert not problems, f"{page}:\n  " + "\n  ".join(problems)


#: A phone's width, and the pages a reader found scrolling sideways, with squeezed figures or cut formulas there.
PHONE_WIDTH = 390
PHONE_PAGES = ["book/reproduce.html", "book/api/theory.html", "notebooks/07_depth.html", "notebooks/08_nonlinear_icl.html",
               "notebooks/09_linearity_map.html"]

# The outermost elements of the article that reach past the screen's right edge (a table scrolls in its own box).
_WIDER_THAN_THE_SCREEN = r"""() => {
    const width = document.documentElement.clientWidth;
    if (document.documentElement.scrollWidth <= width + 1) return [];
    const past = e => e.getBoundingClientRect().right > width + 1;
    const found = [...document.querySelectorAll("article *")]
        .filter(e => past(e) && !past(e.parentElement) && !e.closest(".pst-scrollable-table-container"))
        .slice(0, 5).map(e => `${e.tagName.toLowerCase()}.${e.className}: ${e.textContent.trim().slice(0, 60)}`);
    return found.length ? found : [`the page is ${document.documentElement.scrollWidth} px wide`];
}"""

# Figures whose axes take less than 60 % of their width (a legend at their right takes the rest on a phone) and
# less than the 240 px that figures.js keeps them (the figure then scrolls in its own box, course.css).
_SQUEEZED_FIGURES = """() => [...document.querySelectorAll(".plotly-graph-div")]
    .filter(gd => gd._fullLayout && gd._fullLayout._size.w < Math.min(0.6 * gd._fullLayout.width, 235))
    .map(gd => `${gd.id} (${(gd.layout.title || {}).text}): axes ${Math.round(gd._fullLayout._size.w)} of ${gd._fullLayout.width} px`)"""


# Formulas cut off: wider than their box (span.math, div.math) with no way to scroll it, or past the right edge of
# a theorem, exercise or note box that does not scroll either.
_CUT_FORMULAS = """() => [...document.querySelectorAll("article mjx-container")].filter(m => {
    const scrolls = e => ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
    const math = m.closest("span.math, div.math");
    if (math && math.scrollWidth > math.clientWidth + 1 && !scrolls(math)) return true;
    const box = m.closest(".admonition");
    return box && m.getBoundingClientRect().right > box.getBoundingClientRect().right + 1 && !(math && scrolls(math));
}).slice(0, 5).map(m => m.textContent.slice(0, 60))"""


@pytest.mark.parametrize("page", PHONE_PAGES)
def test_at_a_phones_width_nothing_scrolls_sideways_and_figures_keep_their_axes(browser, site_url, page):
    visit = _Visit(browser, site_url, page, width=PHONE_WIDTH)
    try:
        visit.tab.wait_for_function(_ALL_FIGURES_DRAWN, timeout=30_000)
        visit.tab.wait_for_timeout(500)  # figures.js widens a squeezed figure after it is drawn
        wide, squeezed = visit.tab.evaluate(_WIDER_THAN_THE_SCREEN), visit.tab.evaluate(_SQUEEZED_FIGURES)
        cut = visit.tab.evaluate(_CUT_FORMULAS)
        empty = _screenshot(visit, page, suffix=f"_{PHONE_WIDTH}px")
    finally:
        visit.close()
    assert not wide and not squeezed and not cut and not empty, \
        f"{page} at {PHONE_WIDTH} px: past the screen {wide}; squeezed figures {squeezed}; cut formulas {cut}; {empty}"
