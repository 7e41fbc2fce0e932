"""``python -m softmax_as_linear``: the command line of :mod:`softmax_as_linear.cli`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
