"""The command line: ``python -m softmax_as_linear reproduce FIGURE... [options]`` (and the
``softmax-as-linear`` script), parsing its arguments and mapping outcomes to exit codes.

    python -m softmax_as_linear reproduce {fig1,...,fig8,all} [more figures] [--preset {paper,lecture,smoke}]
        [--device {auto,cpu,cuda}] [--out DIR] [--max-minutes M] [--seeds N] [--sampler {paper,published}]
        [--rng {auto,torch,philox}]

What it computes is :func:`softmax_as_linear.experiments.reproduce.reproduce`. Nothing heavy is
imported before a command runs, so ``--help`` and ``--version`` answer at once. Exit codes: see
``EXIT_CODES``.
"""
from __future__ import annotations

import argparse
import pathlib
import signal
import sys

from .registry import DEVICES, FIGURES, PRESETS, RNGS, SAMPLERS, VERSION

FIGURE_CHOICES = (*FIGURES, "all")

EXIT_COMPLETE, EXIT_ERROR, EXIT_USAGE, EXIT_PARTIAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_CODES = f"""\
exit codes:
  {EXIT_COMPLETE}    every artifact written and complete
  {EXIT_USAGE}    bad arguments (nothing computed)
  {EXIT_PARTIAL}    partial: --max-minutes reached; the artifacts are written marked "complete": false
       and the same command resumes from the checkpoint
  {EXIT_INTERRUPTED}  interrupted by Ctrl-C (143 by SIGTERM); a checkpoint is saved and the same command resumes
  {EXIT_ERROR}    any other error"""

RESULTS_RULE = ("the results folder, where the chapters read: $SOFTMAX_AS_LINEAR_RESULTS if set, else "
                "results/ of the source checkout, else ./results in the working directory")

EXAMPLES = """\
examples:
  python -m softmax_as_linear reproduce fig2 fig3 fig4 --preset paper --device cuda
  python -m softmax_as_linear reproduce all --preset paper --max-minutes 60   # time-boxed; run again to resume
  python -m softmax_as_linear reproduce fig1                                  # lecture preset, a few minutes
  SOFTMAX_AS_LINEAR_RESULTS=~/runs python -m softmax_as_linear reproduce fig6 fig7 fig8"""


class _Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum, frame):
    raise _Interrupted(signum)


class _Formatter(argparse.HelpFormatter):
    """Wraps one-paragraph texts; keeps the line breaks of the examples and exit codes."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=30, width=100)

    def _fill_text(self, text, width, indent):
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m softmax_as_linear", formatter_class=_Formatter,
        description="Reproduce the figures of Boyer & Boursier, Softmax as Linear Attention in the "
                    "Large-Prompt Regime (arXiv 2512.11784).",
        epilog=f"{EXAMPLES}\n\n{EXIT_CODES}")
    parser.add_argument("--version", action="version", version=f"softmax_as_linear {VERSION}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    rep = commands.add_parser(
        "reproduce", formatter_class=_Formatter, help="compute and save the data of paper figures",
        description="Train (or reuse) the runs behind the given figures and write one figNAME_PRESET.json "
                    "per figure, with the sweep it came from, into the output folder.",
        epilog=f"{EXAMPLES}\n\n{EXIT_CODES}")
    rep.add_argument("figure", nargs="+", choices=FIGURE_CHOICES, metavar="FIGURE",
                     help=f"one or more of {', '.join(FIGURE_CHOICES)}; the figures of one sweep (2-4, 6-8) "
                          "share its training")
    rep.add_argument("--preset", choices=PRESETS, default="lecture",
                     help="paper: the paper's settings (hours on a CPU, minutes on a GPU); lecture: the same "
                          "stories in minutes on a CPU (default: %(default)s)")
    rep.add_argument("--device", choices=DEVICES, default="auto",
                     help="auto: CUDA when available, else the CPU (default: %(default)s)")
    rep.add_argument("--out", metavar="DIR", type=pathlib.Path, default=None,
                     help=f"folder for the files (default: {RESULTS_RULE}); chapters read another folder "
                          "only when $SOFTMAX_AS_LINEAR_RESULTS names it")
    rep.add_argument("--max-minutes", metavar="M", type=float, default=None,
                     help="stop training after about M minutes, write the artifacts marked partial and "
                          f"exit with {EXIT_PARTIAL}; the same command resumes (default: no limit)")
    rep.add_argument("--seeds", metavar="N", type=int, default=None,
                     help="train N seeds of each sweep at once, the paper's 327 first (default: the preset's, 327)")
    rep.add_argument("--sampler", choices=SAMPLERS, default="paper",
                     help="inputs of the KMS sweep (Figures 6-8): paper (prompts and queries N(0, Sigma)) or "
                          "published (the published code: prompts N(0, C Sigma C^T), queries N(0, I)) "
                          "(default: %(default)s)")
    rep.add_argument("--rng", choices=RNGS, default="auto",
                     help="random stream of the training prompts: torch (per-seed generators, as every result file "
                          "before this option), philox (a counter-based stream, the same prompts on every device, "
                          "drawn inside the training kernel on a GPU) or auto (philox on CUDA, torch on a CPU) "
                          "(default: %(default)s)")
    rep.add_argument("--threads", type=int, default=1,
                     help="compute threads on a CPU; with 1, the next batch is drawn on a spare core "
                          "meanwhile (default: %(default)s)")
    return parser


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import torch

    from .core.artifacts import load_json, results_folder
    from .core.devices import resolve_device
    from .experiments.reproduce import check_options, figures_of, reproduce

    # Every option of `reproduce` (all but --threads) is passed on by name.
    options = {k: v for k, v in vars(args).items() if k not in ("command", "figure", "threads")}
    try:
        if args.threads < 1:
            raise ValueError(f"argument --threads: must be a positive integer, got {args.threads}")
        figures_of(args.figure)
        check_options(args.preset, args.max_minutes, args.seeds, args.sampler, args.rng)
        device = resolve_device(args.device)
    except ValueError as error:
        parser.error(str(error))
    threads = torch.get_num_threads()
    # Ctrl-C, and a polite kill (SIGTERM), both save a checkpoint before leaving.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGTERM, _interrupt)
    try:
        if device.type == "cpu":
            torch.set_num_threads(args.threads)
        written = reproduce(args.figure, **options)
    except KeyboardInterrupt as stop:
        print("\ninterrupted: run the same command again to resume from the last checkpoint", file=sys.stderr)
        return 128 + getattr(stop, "signum", signal.SIGINT)
    finally:
        torch.set_num_threads(threads)
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    if args.out is not None and args.out.resolve() != results_folder().resolve():
        print(f"note: the chapters read {results_folder()}; for them to read {args.out}, set "
              f"SOFTMAX_AS_LINEAR_RESULTS={args.out}", file=sys.stderr)
    partial = [path.name for path in written if load_json(path).get("complete", True) is False]
    if partial:
        print(f"partial: {', '.join(partial)} (time limit reached); run the same command again to resume",
              file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_COMPLETE


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return _run(args, parser)
