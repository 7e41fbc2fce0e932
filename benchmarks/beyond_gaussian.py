"""Chapter 6 at a chosen scale, as the command line runs it: ``python -m softmax_as_linear reproduce beyond``.

    python benchmarks/beyond_gaussian.py [options of reproduce beyond]

is ``python -m softmax_as_linear reproduce beyond --preset paper [options]`` (the paper preset unless ``--preset``
is given): the same options (``--covariates``, ``--seeds``, ``--lengths``, ``--device``, ``--out``, ``--max-minutes``,
``--shard``, ``--allow-dirty``, ...), progress, resume, shards and exit codes; see its ``--help``. Kept so that older
notes keep working; a pip-installed library has the command line, not this file.

The paper preset (the paper's learning rate 1e-3 and batch 128, ten seeds, L up to 3000, 40,000 steps) is
sized for one GPU (about a minute per law expected on an H100-class card, not yet measured). On a 2-core CPU,
``--seeds 3 --lengths 10 30 100 300 1000`` took 21 min (uniform) and 37 min (Rademacher) of training.
"""
from __future__ import annotations

import sys


def main(argv=None) -> int:
    from softmax_as_linear.cli import main as command_line

    argv = list(sys.argv[1:] if argv is None else argv)
    preset = [] if any(arg == "--preset" or arg.startswith("--preset=") for arg in argv) else ["--preset", "paper"]
    return command_line(["reproduce", "beyond", *preset, *argv])


if __name__ == "__main__":
    sys.exit(main())
