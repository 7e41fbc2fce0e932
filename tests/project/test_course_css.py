"""book/_static/course.css: the introduction's table of chapters fits a phone's width (each chapter a block, its
cells named as the table's header names them). The rendered page is checked in a browser by tests/book; here, that
the rule still finds the table it lays out."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
CSS = (ROOT / "book" / "_static" / "course.css").read_text()


def test_the_chapter_table_of_the_introduction_is_laid_out_for_a_phone():
    intro = (ROOT / "book" / "intro.md").read_text()
    section = intro.split("\n## The chapters\n", 1)
    assert len(section) == 2, "the rule finds the table by its section's id, the-chapters"
    header = next(line for line in section[1].splitlines() if line.startswith("|"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    assert len(columns) == 3
    phone = re.search(r"@media \(max-width: 599\.98px\) \{(.*?)\n\}", CSS, re.S)
    assert phone and "section#the-chapters table td" in phone.group(1)
    labels = re.findall(r'td:nth-child\((\d)\)::before \{\s*content: "([^"]+): "', phone.group(1))
    assert [(int(n), label) for n, label in labels] == [(2, columns[1]), (3, columns[2])]
