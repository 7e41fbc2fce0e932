"""The versions environment.yml pins: printed as pip constraints for `make setup`, or refreshed.

    python tools/pins.py environment.yml            # `name==version` lines (torch left out: TORCH in the Makefile)
    python tools/pins.py --update environment.yml   # rewrite each pin to the version installed here

environment.yml is what Binder installs. `make setup` installs the same versions (it passes the
printed lines to pip with `-c`), so that what CI tests is what Binder runs. Reading needs no
third-party package (it runs before anything is installed), so the file is read line by line:
requirements are the `- name...` lines under `- pip:`.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import sys

REQUIREMENT = re.compile(r"^(?P<indent>\s+- )(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<spec>\s*[<>=!~].*)?$")
NOT_CONSTRAINED = {"torch"}  # installed first, from the Makefile's TORCH and TORCH_INDEX


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


def constraints(text: str) -> list[str]:
    """The pinned requirements as pip constraints (torch left out)."""
    return [f"{m['name']}{m['spec'].strip()}" for _, m in pip_lines(text)
            if m["spec"] and "==" in m["spec"] and _normal(m["name"]) not in NOT_CONSTRAINED]


def update(path: pathlib.Path) -> list[str]:
    """Pin every requirement of the pip section to the version installed in this environment."""
    from importlib.metadata import PackageNotFoundError, version

    lines = path.read_text().splitlines()
    changes = []
    for number, match in pip_lines("\n".join(lines)):
        try:
            installed = version(match["name"]).split("+")[0]  # 2.13.0+cpu: the CPU index serves it as 2.13.0+cpu
        except PackageNotFoundError:
            sys.exit(f"{match['name']} is not installed here: run `make setup` first")
        pinned = f"{match['indent']}{match['name']}=={installed}"
        if lines[number] != pinned:
            changes.append(f"{match['name']}: {(match['spec'] or '').strip() or 'unpinned'} -> =={installed}")
            lines[number] = pinned
    path.write_text("\n".join(lines) + "\n")
    return changes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("environment", type=pathlib.Path, help="the conda environment file (environment.yml)")
    parser.add_argument("--update", action="store_true", help="rewrite the pins to the versions installed here")
    args = parser.parse_args(argv)
    if args.update:
        for change in update(args.environment):
            print(change)
    else:
        print("\n".join(constraints(args.environment.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
