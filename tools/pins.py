"""The versions the course pins (environment.yml, constraints.txt): printed as pip constraints, held, or refreshed.

    python tools/pins.py                          # `name==version` lines of both files (torch left out: TORCH)
    .venv/bin/python tools/pins.py --installed    # what .venv has that they do not pin, as `name==version`
    .venv/bin/python tools/pins.py --update       # rewrite each pin to the version installed here

environment.yml is what Binder installs: the library and what running the chapters needs, pinned. constraints.txt
pins the tools of the book and of the tests (pyproject.toml's extras book, test and cluster), which a student's
install leaves out. `make setup` and each extra it installs later pass the printed lines to pip with `-c`, so that
what CI tests is what Binder runs. `--installed` lists every other distribution installed, at its version: the
Makefile passes it too when it adds an extra to an environment (a student's `make lab`, then `make test`), so that
nothing already installed changes version. Reading needs no third-party package (it runs before anything is
installed), so environment.yml is read line by line: its requirements are the `- name...` lines under `- pip:`.
Other files (names ending in .txt) are read as pip's constraint files: one `name==version` a line, `#` comments.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = (ROOT / "environment.yml", ROOT / "constraints.txt")
REQUIREMENT = re.compile(r"^(?P<indent>\s+- )(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<spec>\s*[<>=!~].*)?$")
CONSTRAINT = re.compile(r"^(?P<indent>)(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<spec>\s*[<>=!~][^#;]*?)?\s*(?:#.*)?$")
NOT_CONSTRAINED = {"torch"}  # installed first, from the Makefile's TORCH and TORCH_INDEX
PROJECT = "softmax-as-linear"  # installed editable from the checkout: never a constraint


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_lines(text: str) -> list[tuple[int, re.Match]]:
    """(line number, match) of every requirement in the `pip:` section of an environment file."""
    lines, found, inside, depth = text.splitlines(), [], False, None
    for number, line in enumerate(lines):
        if re.match(r"^\s+- pip:\s*$", line):
            inside, depth = True, len(line) - len(line.lstrip())
            continue
        if inside and line.strip() and not line.lstrip().startswith("#"):
            if len(line) - len(line.lstrip()) <= depth:
                break
            match = REQUIREMENT.match(line)
            if match:
                found.append((number, match))
    return found


def constraint_lines(text: str) -> list[tuple[int, re.Match]]:
    """(line number, match) of every requirement of a pip constraints file."""
    return [(number, match) for number, line in enumerate(text.splitlines())
            if line.strip() and not line.lstrip().startswith("#") and (match := CONSTRAINT.match(line.strip()))]


def _lines(path: pathlib.Path, text: str) -> list[tuple[int, re.Match]]:
    return constraint_lines(text) if path.suffix == ".txt" else pip_lines(text)


def constraints(text: str, path: pathlib.Path = pathlib.Path("environment.yml")) -> list[str]:
    """The pinned requirements of one file as pip constraints (torch left out)."""
    return [f"{m['name']}{m['spec'].strip()}" for _, m in _lines(path, text)
            if m["spec"] and "==" in m["spec"] and _normal(m["name"]) not in NOT_CONSTRAINED]


def pinned_names(paths) -> set[str]:
    """The normalised names of every requirement the files name."""
    return {_normal(m["name"]) for path in paths for _, m in _lines(path, path.read_text())}


def installed(paths) -> list[str]:
    """`name==version` of every distribution installed in this environment that the files do not name (their pins
    hold those), the course itself left out (it is installed editable from the checkout)."""
    from importlib.metadata import distributions

    skip = pinned_names(paths) | {PROJECT}
    found = {}
    for distribution in distributions():
        name = distribution.metadata["Name"]
        if name and _normal(name) not in skip:
            found[_normal(name)] = f"{name}=={distribution.version}"
    return [found[name] for name in sorted(found)]


def update(path: pathlib.Path) -> list[str]:
    """Pin every requirement of the file to the version installed in this environment."""
    from importlib.metadata import PackageNotFoundError, version

    lines = path.read_text().splitlines()
    changes = []
    for number, match in _lines(path, "\n".join(lines)):
        try:
            installed = version(match["name"]).split("+")[0]  # 2.13.0+cpu: the CPU index serves it as 2.13.0+cpu
        except PackageNotFoundError:
            sys.exit(f"{match['name']} is not installed here: run `make setup` first")
        pinned = f"{match['indent']}{match['name']}=={installed}"
        comment = lines[number][len(lines[number].split("#")[0]):] if path.suffix == ".txt" else ""
        if comment:
            pinned = f"{pinned}  {comment.strip()}"
        if lines[number] != pinned:
            changes.append(f"{match['name']}: {(match['spec'] or '').strip() or 'unpinned'} -> =={installed}")
            lines[number] = pinned
    path.write_text("\n".join(lines) + "\n")
    return changes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=pathlib.Path, default=list(FILES),
                        help="environment.yml and constraint files (default: environment.yml constraints.txt)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--update", action="store_true", help="rewrite the pins to the versions installed here")
    action.add_argument("--installed", action="store_true",
                        help="print the version of everything installed here that the files do not pin")
    args = parser.parse_args(argv)
    if args.update:
        for path in args.files:
            for change in update(path):
                print(f"{path.name}: {change}")
    elif args.installed:
        print("\n".join(installed(args.files)))
    else:
        print("\n".join(line for path in args.files for line in constraints(path.read_text(), path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
