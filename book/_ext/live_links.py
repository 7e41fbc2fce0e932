"""The chapters' citations and cross-chapter references, stored as links into the published book.

JupyterLab's MyST renderer (jupyterlab-myst) has no bibliography and sees one notebook at a time, and
Colab renders plain Markdown: there, ``{cite:t}`key``` and a reference to another chapter's label
show as raw keys. The chapters therefore store those as Markdown reference links into the published
book, with the text the book shows (``tools/live_references.py`` writes them)::

    … as [Boyer & Boursier (2025)][boyer2025softmax] show ([Zhang et al., 2024][zhang2024trained]), …
    … the model [(4.1)][ch4-eq-task] and [Exercise 4.1][ch4-ex-balance] …

    [boyer2025softmax]: https://OWNER.github.io/REPO/book/bibliography.html#cite-boyer2025softmax
    [zhang2024trained]: https://OWNER.github.io/REPO/book/bibliography.html#cite-zhang2024trained
    [ch4-eq-task]: https://OWNER.github.io/REPO/notebooks/04_isotropic_icl.html#equation-ch4-eq-task
    [ch4-ex-balance]: https://OWNER.github.io/REPO/notebooks/04_isotropic_icl.html#ch4-ex-balance

As a Sphinx extension, this module turns them back into the roles they stand for (``{cite:t}``,
``{cite:p}``, ``{eq}``, ``{ref}``, ``{prf:ref}``, ``{doc}``) when a notebook is read, and drops the
numbering front matter meant for JupyterLab, so the book keeps its own bibliography and
cross-references, checked by the strict build. It also registers the citation style that makes the
book read as the links do (``Boyer & Boursier (2025)``, ``(Zhang et al., 2024)``).

The numbering rule shared with JupyterLab (:func:`scan`) is applied to the book by ``chapter_numbers``.
"""
from __future__ import annotations

import json
import pathlib
import re
from dataclasses import dataclass

import yaml

ROLE = re.compile(r"\{(cite:t|cite:p|eq|ref|prf:ref|numref|doc)\}`([^`]+)`")
DEFINITION = re.compile(r"^\[([^\]\n]+)\]:[ \t]*(\S+)[ \t]*(?:\n|$)", re.M)
USE = r"\[([^\]\n]+)\]\[([^\]\n]+)\]"
# YAML front matter that JupyterLab reads from a chapter's first Markdown cell, inside an HTML comment
# so that a plain-Markdown view (Colab, GitHub) shows nothing of it but two rules.
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
BIBLIOGRAPHY = "book/bibliography.html#cite-"
PROOF_TYPES = ("axiom", "theorem", "lemma", "algorithm", "definition", "remark", "conjecture", "corollary",
               "criterion", "example", "property", "observation", "proposition", "assumption", "notation")
NOT_MARKDOWN = ("math", "code", "code-block", "code-cell", "raw", "csv-table", "list-table", "bibliography")


def front_matter(chapter: int) -> str:
    """The front matter of chapter ``chapter``: JupyterLab numbers its boxes and equations ``chapter.k``."""
    return f"---\n<!--:\nnumbering:\n  enumerator: {chapter}.%s\nend: -->\n---\n"


def book_url(root: pathlib.Path) -> str:
    """The published book's address: ``html.baseurl`` of ``_config.yml`` when set, else the GitHub
    Pages address of ``repository.url`` (``https://OWNER.github.io/REPO/``)."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    base = (config.get("html") or {}).get("baseurl")
    if base:
        return base.rstrip("/") + "/"
    owner, name = config["repository"]["url"].rstrip("/").split("/")[-2:]
    return f"https://{owner.lower()}.github.io/{name}/"


def chapter_of(doc: str) -> int | None:
    """The chapter number of a page ``notebooks/NN_name`` (``NN``), None for other pages."""
    match = re.match(r"^(\d+)_", doc.rsplit("/", 1)[-1])
    return int(match.group(1)) if match and doc.startswith("notebooks/") else None


# --- what is numbered, and how ---------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """A numbered thing of the book: ``kind`` is ``"equation"``, ``"exercise"`` or a proof type."""

    doc: str
    label: str
    kind: str
    number: str   # "4.2" on a chapter's page, "2" on another page
    anchor: str   # its HTML id in the book

    def text(self) -> str:
        """What the book's reference to it shows: ``(4.2)``, ``Exercise 4.1``, ``Theorem 4.2``."""
        return f"({self.number})" if self.kind == "equation" else f"{self.kind.title()} {self.number}"


def _markdown_parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(MdParserConfig(enable_extensions={"amsmath", "dollarmath", "colon_fence", "deflist"}),
                            RendererHTML)


def _options(content: str) -> tuple[dict[str, str], str]:
    """A directive's ``:name: value`` options and its body."""
    options, lines = {}, content.splitlines(keepends=True)
    while lines:
        match = re.match(r"^:([\w-]+):\s*(.*)$", lines[0])
        if not match:
            break
        options[match.group(1)] = match.group(2).strip()
        lines.pop(0)
    return options, "".join(lines)


def scan(doc: str, cells: list[str]) -> list[Target]:
    """The numbered things of page ``doc`` (its Markdown ``cells``), in order.

    The rule is JupyterLab's, which the book follows: every display equation is numbered, labelled
    or not (an ``amsmath`` environment unless starred); every exercise and every proof-type box
    (theorem, lemma, remark, …) unless ``:nonumber:``; each kind counted from 1 on each page; on a
    chapter's page the number is prefixed with the chapter's (``4.2``).
    """
    parse = _markdown_parser().parse
    chapter = chapter_of(doc)
    counts: dict[str, int] = {}
    found: list[Target] = []

    def add(kind: str, label: str, anchor: str):
        counts[kind] = counts.get(kind, 0) + 1
        number = f"{chapter}.{counts[kind]}" if chapter is not None else str(counts[kind])
        found.append(Target(doc, label, kind, number, anchor))

    def walk(source: str):
        for token in parse(source):
            if token.type in ("math_block", "math_block_label"):
                add("equation", token.info, f"equation-{token.info}".lower() if token.info else "")
            elif token.type == "amsmath" and token.meta.get("numbered") != "*":
                add("equation", "", "")
            elif token.type in ("colon_fence", "fence") and token.info.startswith("{") and "}" in token.info:
                name = token.info[1:].split("}", 1)[0]
                kind = name.split(":", 1)[1] if name.startswith("prf:") else name
                options, body = _options(token.content)
                if (kind in PROOF_TYPES or kind == "exercise") and "nonumber" not in options:
                    label = options.get("label", "")
                    add(kind, label, label.lower())
                if name not in NOT_MARKDOWN:
                    walk(body)

    for source in cells:
        walk(FRONT_MATTER.sub("", source))
    return found


def markdown_cells(path: pathlib.Path) -> list[str]:
    """The sources of a notebook's Markdown cells that the book shows."""
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]
            if c["cell_type"] == "markdown" and "remove-cell" not in c.get("metadata", {}).get("tags", [])]


def all_targets(root: pathlib.Path) -> dict[str, Target]:
    """Every labelled target of the chapters (``notebooks/*.ipynb``), by label."""
    targets = {}
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        for target in scan(f"notebooks/{path.stem}", markdown_cells(path)):
            if target.label:
                targets[target.label] = target
    return targets


# --- the book: links back to roles ----------------------------------------------------------------

def links_to_roles(markdown: str, base: str, targets: dict[str, Target], doc: str) -> str:
    """One Markdown cell of page ``doc`` with its links into the book at ``base`` turned back into roles."""
    urls: dict[str, str] = {}

    def definition(match):
        if not match.group(2).startswith(base):
            return match.group(0)
        urls[match.group(1).lower()] = match.group(2)[len(base):]
        return ""

    markdown = DEFINITION.sub(definition, FRONT_MATTER.sub("", markdown)).rstrip("\n")
    if not urls:
        return markdown
    by_anchor = {(t.doc, t.anchor): t for t in targets.values()}

    def cite_key(label: str) -> str | None:
        url = urls.get(label.lower(), "")
        return url[len(BIBLIOGRAPHY):] if url.startswith(BIBLIOGRAPHY) else None

    def parenthetical(match):  # ([Zhang et al., 2024][zhang2024trained]; [Liu, 2001][liu2001monte])
        uses = re.findall(USE, match.group(1))
        keys = [cite_key(label) for _, label in uses]
        if None in keys or any(text.endswith(")") for text, _ in uses):
            return match.group(0)
        return "{cite:p}`" + ",".join(keys) + "`"

    def use(match):
        text, url = match.group(1), urls.get(match.group(2).lower())
        if url is None:
            return match.group(0)
        if url.startswith(BIBLIOGRAPHY):
            return "{cite:t}`" + url[len(BIBLIOGRAPHY):] + "`"
        page, _, anchor = url.partition("#")
        page = page.removesuffix(".html")
        if not anchor:
            return "{doc}`" + text + " <" + "../" * (doc.count("/")) + page + ">`"
        target = by_anchor.get((page, anchor))
        if target is None:
            return match.group(0)  # an ordinary link into the book
        role = "eq" if target.kind == "equation" else "ref" if target.kind == "exercise" else "prf:ref"
        return "{" + role + "}`" + target.label + "`"

    markdown = re.sub(rf"\(({USE}(?:;\s*{USE})*)\)", parenthetical, markdown)
    return re.sub(USE, use, markdown)


def _source_read(app, docname: str, source: list[str]):
    if not (docname.startswith("notebooks/") and str(app.env.doc2path(docname)).endswith(".ipynb")):
        return
    root = pathlib.Path(app.confdir)
    if not hasattr(app, "_live_links"):
        app._live_links = (book_url(root), all_targets(root))
    base, targets = app._live_links
    notebook = json.loads(source[0])
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = links_to_roles("".join(cell["source"]), base, targets, docname)
    source[0] = json.dumps(notebook)


def _register_citation_style():
    """``author_year_round``: author-year citations in round brackets, ``&`` between two authors,
    ``et al.`` from three: ``Boyer & Boursier (2025)``, ``(Zhang et al., 2024; Liu, 2001)``."""
    from dataclasses import dataclass as style_class
    from dataclasses import field

    import sphinxcontrib.bibtex.plugin
    from sphinxcontrib.bibtex.style.referencing import BracketStyle, PersonStyle
    from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle

    def round_brackets():
        return BracketStyle(left="(", right=")", sep="; ")

    def persons():
        return PersonStyle(sep2=" & ", last_sep=", & ", other=" et al.")

    @style_class
    class RoundAuthorYear(AuthorYearReferenceStyle):
        bracket_textual: BracketStyle = field(default_factory=round_brackets)
        bracket_parenthetical: BracketStyle = field(default_factory=round_brackets)
        bracket_author: BracketStyle = field(default_factory=round_brackets)
        bracket_label: BracketStyle = field(default_factory=round_brackets)
        bracket_year: BracketStyle = field(default_factory=round_brackets)
        person: PersonStyle = field(default_factory=persons)

    sphinxcontrib.bibtex.plugin.register_plugin(
        "sphinxcontrib.bibtex.style.referencing", "author_year_round", RoundAuthorYear)


def setup(app):
    _register_citation_style()
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
