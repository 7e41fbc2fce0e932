"""Make the chapters' citations and cross-chapter references readable in JupyterLab, Binder and Colab.

jupyterlab-myst has no bibliography and resolves references within one notebook only, and Colab
renders plain Markdown: ``{cite:t}`key```, ``{doc}`` and a reference to a label of another chapter
show there as raw keys. This script rewrites those roles in ``notebooks/*.ipynb`` as Markdown
reference links into the published book, with the text the book shows, and keeps that text up to
date (numbers, authors). A reference within one chapter stays a role where JupyterLab resolves it
(:data:`RESOLVED_WITHIN`: an equation by ``{eq}``, a theorem or other proof box by ``{prf:ref}``); any other,
a ``{ref}`` to an exercise among them, which jupyterlab-myst shows as a raw label with a warning sign, becomes
a link into the book as well. It also
puts at the top of every chapter the front matter that makes JupyterLab number exercises, boxes and
equations as the book does (``Exercise 4.1``, ``(4.2)``), and ``:nonumber:`` on proofs. The book's
build turns the links back into roles (``book/_ext/live_links.py``, which holds the format).

A reference link whose label the cell does not define (``[Boyer & Boursier (2025)][boyer2025softmax]``
with no ``[boyer2025softmax]: ...`` line below it) shows as raw text in JupyterLab, Colab and the book: the
script adds the definition when the label is a citation key or another chapter's label, and reports any other
as unresolved (exit 1).

Idempotent: run it after editing a chapter. ``--check`` changes nothing and exits 1 if a chapter
needs it or holds an unresolved reference link. Only cell sources change; outputs and the notebooks'
formatting stay as they are.

    python tools/live_references.py [--check] [notebooks/NN_name.ipynb ...]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import live_links  # noqa: E402

# Where a Markdown reference link cannot be: inline code and inline or display mathematics.
NOT_LINKS = re.compile(r"`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$", re.S)
#: What jupyterlab-myst resolves within one notebook: role -> the kinds of target (``live_links.Target.kind``).
RESOLVED_WITHIN = {"eq": ("equation",), "prf:ref": live_links.PROOF_TYPES}
PROOF_FENCE = re.compile(r"^(?P<fence>:{3,}|`{3,})\{prf:proof\}[^\n]*\n(?!:nonumber:)", re.M)


def citation_names(bibfile: pathlib.Path) -> dict[str, tuple[str, str]]:
    """``key -> (authors, year)`` as the book cites them: ``Liu``, ``Boyer & Boursier``, ``Zhang et al.``"""
    from pybtex.database import parse_file
    from pybtex.plugin import find_plugin
    from pybtex.richtext import Text

    # what Text.render_as("text") renders with, looked up once: each lookup reads every installed package's entry points
    plain_text = find_plugin("pybtex.backends", "text")
    names = {}
    for key, entry in parse_file(str(bibfile)).entries.items():
        last = [Text.from_latex(" ".join(p.prelast_names + p.last_names)).render(plain_text())
                for p in entry.persons["author"]]
        authors = last[0] if len(last) == 1 else " & ".join(last) if len(last) == 2 else f"{last[0]} et al."
        names[key] = (authors, entry.fields["year"])
    return names


def page_titles() -> dict[str, str]:
    """The first heading of every page, by docname (``book/notation``)."""
    titles = {}
    pages = [(f"book/{p.stem}", [p.read_text()]) for p in (ROOT / "book").glob("*.md")]
    pages += [(f"notebooks/{p.stem}", live_links.markdown_cells(p)) for p in (ROOT / "notebooks").glob("*.ipynb")]
    for doc, sources in pages:
        for source in sources:
            match = re.search(r"^# (.+)$", source, re.M)
            if match:
                titles[doc] = match.group(1).strip()
                break
    return titles


class Rewriter:
    """Rewrites the Markdown of the chapters (see the module's docstring)."""

    def __init__(self):
        self.base = live_links.book_url(ROOT)
        self.names = citation_names(ROOT / "book" / "references.bib")
        self.targets = live_links.all_targets(ROOT)
        self.titles = page_titles()

    def _citation(self, key: str, parenthetical: bool) -> str:
        if key not in self.names:
            raise SystemExit(f"no entry {key!r} in book/references.bib")
        authors, year = self.names[key]
        return f"{authors}, {year}" if parenthetical else f"{authors} ({year})"

    def _role(self, match: re.Match, doc: str, urls: dict[str, str]) -> str:
        name, content = match.groups()
        explicit = re.match(r"^(.*?)\s*<([^>]+)>$", content, re.S)
        text, target = explicit.groups() if explicit else (None, content)
        if name in ("cite:t", "cite:p"):
            keys = [key.strip() for key in target.split(",")]
            for key in keys:
                urls[key] = f"{self.base}{live_links.BIBLIOGRAPHY}{key}"
            links = [f"[{self._citation(key, name == 'cite:p')}][{key}]" for key in keys]
            return "(" + "; ".join(links) + ")" if name == "cite:p" else ", ".join(links)
        if name == "doc":
            parts: list[str] = []
            for part in f"{doc.rsplit('/', 1)[0]}/{target}".split("/"):
                parts = parts[:-1] if part == ".." else parts + [part] if part not in ("", ".") else parts
            page = "/".join(parts)
            urls[page] = f"{self.base}{page}.html"
            return f"[{text or self.titles[page]}][{page}]"
        found = self.targets.get(target)
        if found is None or found.doc == doc and resolved_within(name, found):
            return match.group(0)  # within the chapter: JupyterLab resolves it
        urls[found.label] = f"{self.base}{found.doc}.html#{found.anchor}"
        return f"[{text or found.text()}][{found.label}]"

    def _known(self, label: str, doc: str) -> str | None:
        """The book's address of a citation key or of a numbered label (another chapter's, or one of this chapter
        that a role would not resolve in JupyterLab: an exercise), None for anything else."""
        if label in self.names:
            return f"{self.base}{live_links.BIBLIOGRAPHY}{label}"
        found = self.targets.get(label)
        if found is not None and (found.doc != doc or found.kind == "exercise"):
            return f"{self.base}{found.doc}.html#{found.anchor}"
        return None

    def _refresh(self, match: re.Match, urls: dict[str, str], used: list[str]) -> str:
        text, label = match.groups()
        if label not in urls:
            return match.group(0)
        used.append(label)
        path = urls[label][len(self.base):]
        if path.startswith(live_links.BIBLIOGRAPHY):
            return f"[{self._citation(path[len(live_links.BIBLIOGRAPHY):], not text.endswith(')'))}][{label}]"
        found = self.targets.get(label)
        if "#" in path and found is not None:
            urls[label] = f"{self.base}{found.doc}.html#{found.anchor}"
            return f"[{found.text()}][{label}]"
        return match.group(0)

    def markdown(self, source: str, doc: str) -> str:
        """One Markdown cell, rewritten."""
        head = live_links.FRONT_MATTER.match(source)
        head, body = (head.group(0), source[head.end():]) if head else ("", source)
        urls = {label: url for label, url in live_links.DEFINITION.findall(body) if url.startswith(self.base)}
        text = live_links.DEFINITION.sub(lambda m: "" if m.group(2).startswith(self.base) else m.group(0), body)
        for _, label in re.findall(live_links.USE, NOT_LINKS.sub("", text)):
            if label not in urls and self._known(label, doc) and label.lower() not in defined_elsewhere(text):
                urls[label] = self._known(label, doc)  # a link written without its definition
        text = live_links.ROLE.sub(lambda m: self._role(m, doc, urls), text.rstrip("\n") if urls else text)
        used: list[str] = []
        text = re.sub(live_links.USE, lambda m: self._refresh(m, urls, used), text)
        text = PROOF_FENCE.sub(lambda m: m.group(0) + ":nonumber:\n", text)
        if used:
            text = text.rstrip("\n") + "\n\n" + "\n".join(f"[{label}]: {urls[label]}" for label in dict.fromkeys(used))
        return head + text

    def unresolved(self, path: pathlib.Path) -> list[str]:
        """The reference links of a chapter's Markdown cells that their cell does not define, ``[text][label]``."""
        return [f"[{text}][{label}]" for source in live_links.markdown_cells(path)
                for text, label in unresolved_links(source)]

    def notebook(self, path: pathlib.Path) -> tuple[str, str]:
        """The notebook's text before and after."""
        before = path.read_text()
        notebook = json.loads(before)
        doc = f"notebooks/{path.stem}"
        markdown = [cell for cell in notebook["cells"] if cell["cell_type"] == "markdown"]
        for cell in markdown:
            source = "".join(cell["source"])
            new = self.markdown(source, doc)
            if new != source:
                cell["source"] = new.splitlines(keepends=True)
        chapter = live_links.chapter_of(doc)
        if chapter is not None and markdown:
            for cell in markdown[1:]:  # the front matter belongs to the first Markdown cell only
                source = "".join(cell["source"])
                if live_links.FRONT_MATTER.match(source):
                    cell["source"] = live_links.FRONT_MATTER.sub("", source).splitlines(keepends=True)
            source = "".join(markdown[0]["source"])
            new = live_links.front_matter(chapter) + live_links.FRONT_MATTER.sub("", source)
            if new != source:
                markdown[0]["source"] = new.splitlines(keepends=True)
        return before, json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def resolved_within(role: str, target: live_links.Target) -> bool:
    """Whether JupyterLab resolves ``{role}`label``` to ``target`` of the same chapter (:data:`RESOLVED_WITHIN`)."""
    return target.kind in RESOLVED_WITHIN.get(role, ())


def defined_elsewhere(markdown: str) -> set[str]:
    """The labels a Markdown text defines (``[label]: URL``), lower-cased as Markdown compares them."""
    return {label.lower() for label, _ in live_links.DEFINITION.findall(markdown)}


def unresolved_links(markdown: str) -> list[tuple[str, str]]:
    """``(text, label)`` of every reference link ``[text][label]`` of ``markdown`` whose label it does not define:
    Markdown leaves such a link as the raw text ``[text][label]``. Inline code and mathematics are not read."""
    defined = defined_elsewhere(markdown)
    return [(text, label) for text, label in re.findall(live_links.USE, NOT_LINKS.sub("", markdown))
            if label.lower() not in defined]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path,
                        help="chapters to rewrite (default: every notebooks/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a chapter needs rewriting")
    args = parser.parse_args(argv)
    rewriter = Rewriter()
    stale, paths = [], args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        before, after = rewriter.notebook(path)
        if before != after:
            stale.append(path)
            if not args.check:
                path.write_text(after)
    for path in stale:
        print(f"{'needs rewriting' if args.check else 'rewrote'}: {path}"
              + (" (run python tools/live_references.py)" if args.check else ""))
    broken = {path: rewriter.unresolved(path) for path in paths}
    for path, links in broken.items():
        if links:
            print(f"unresolved reference links in {path} (no definition in their cell; write the citation as "
                  f"{{cite:t}}`key` or the reference as a role): {', '.join(links)}")
    return 1 if (args.check and stale) or any(broken.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
