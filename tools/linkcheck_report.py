"""The broken external links of the book, from Sphinx's linkcheck output, as a Markdown report.

    python tools/linkcheck_report.py _build/linkcheck/output.json [--github-output FILE]

Reads the JSON lines that `make linkcheck` writes (one per link: page, line, status, address, what
went wrong) and prints a table of the links that are broken or timed out, by page. With
``--github-output``, appends ``broken=N`` to that file (a GitHub Actions step output). Reporting
is its job, not judging: the exit status is 0 whenever the file could be read (1 when it cannot).
Needs no third-party package.
"""
from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys

BAD = ("broken", "timeout")


def read(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def report(entries: list[dict]) -> tuple[str, int]:
    """(Markdown report, number of bad links)."""
    counts = collections.Counter(entry.get("status") for entry in entries)
    bad = sorted((e for e in entries if e.get("status") in BAD), key=lambda e: (e["filename"], e.get("lineno", 0)))
    lines = ["### External links", "",
             "Checked: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) + ".", ""]
    if bad:
        lines += ["| page | line | link | status | what went wrong |", "| --- | --- | --- | --- | --- |"]
        for e in bad:
            info = str(e.get("info", "")).replace("|", "\\|").replace("\n", " ")[:200]
            lines.append(f"| {e['filename']} | {e.get('lineno', '')} | {e['uri']} | {e['status']} | {info} |")
    else:
        lines.append("No broken link.")
    return "\n".join(lines) + "\n", len(bad)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=pathlib.Path, help="_build/linkcheck/output.json")
    parser.add_argument("--github-output", type=pathlib.Path, help="append broken=N to this file")
    args = parser.parse_args(argv)
    try:
        text, bad = report(read(args.output))
    except (OSError, ValueError, KeyError) as error:
        print(f"cannot read {args.output}: {error}", file=sys.stderr)
        return 1
    print(text, end="")
    if args.github_output:
        with args.github_output.open("a") as f:
            f.write(f"broken={bad}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
