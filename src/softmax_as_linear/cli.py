"""The command line: ``python -m softmax_as_linear reproduce FIGURE... [options]`` and ``merge`` (and the
``softmax-as-linear`` script), parsing its arguments and mapping outcomes to exit codes.

    python -m softmax_as_linear reproduce {fig1,...,fig8,beyond,depth,nonlinear,...,all} [more] [--preset P]
        [--device {auto,cpu,cuda}] [--out DIR] [--max-minutes M] [--seeds N] [--sampler {paper,published}]
        [--rng {auto,torch,philox}] [--covariates LAW...] [--lengths L...] [--threads T] [--restart] [--allow-dirty]
        [--shard K/N | --shards N [--launcher {local,slurm}] [cluster options]]
    python -m softmax_as_linear merge FIGURE... --shards N [--preset P] [--seeds N] [--sampler S] [--rng R]
        [--covariates LAW...] [--lengths L...] [--out DIR] [--allow-dirty]

The reproductions are those of :data:`softmax_as_linear.experiments.reproductions.REPRODUCTIONS` (``--help`` lists
them); what they compute is :func:`softmax_as_linear.experiments.reproduce.reproduce` and
:mod:`softmax_as_linear.experiments.shards`. Nothing heavy is imported before a command runs, so
``--help`` and ``--version`` answer at once. Exit codes: see ``EXIT_CODES``.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import pathlib
import shlex
import signal
import sys
import tempfile

from .experiments.reproductions import REPRODUCTIONS
from .registry import COVARIATES, DEVICES, LAUNCHERS, PRESETS, RNGS, SAMPLERS, VERSION

#: What ``reproduce`` and ``merge`` take: every reproduction of the registry, and ``all`` (the paper's figures).
FIGURE_CHOICES = (*REPRODUCTIONS, "all")

EXIT_COMPLETE, EXIT_ERROR, EXIT_USAGE, EXIT_PARTIAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_CODES = f"""\
exit codes:
  {EXIT_COMPLETE}    every artifact written and complete
  {EXIT_USAGE}    bad arguments, an output folder that cannot be written, or a library with uncommitted
       changes without --allow-dirty (nothing computed)
  {EXIT_PARTIAL}    partial: --max-minutes reached; the artifacts are written marked "complete": false
       and the same command resumes from the checkpoint (with shards: the shards stopped, nothing merged)
  {EXIT_INTERRUPTED}  interrupted by Ctrl-C (143 by SIGTERM); a checkpoint is saved and the same command resumes
  {EXIT_ERROR}    any other error; a damaged file (a truncated sweep, checkpoint or result file) or a missing
       or failed shard is named, with what to do, and nothing else is touched"""

RESULTS_RULE = ("the results folder, where the chapters read: $SOFTMAX_AS_LINEAR_RESULTS if set, else "
                "results/ of the source checkout, else ./results in the working directory")

_EXAMPLES = """\
examples:
  python -m softmax_as_linear reproduce fig2 fig3 fig4 --preset paper --device cuda
  python -m softmax_as_linear reproduce all --preset paper --max-minutes 60   # time-boxed; run again to resume
  python -m softmax_as_linear reproduce fig1                                  # lecture preset, a few minutes
{chapters}
  # Chapter 6 on a 2-core CPU, reduced (written as beyond_<covariates>_paper_3seeds_L10-30-100-300-1000.json)
  python -m softmax_as_linear reproduce beyond --preset paper --seeds 3 --lengths 10 30 100 300 1000
  SOFTMAX_AS_LINEAR_RESULTS=~/runs python -m softmax_as_linear reproduce fig6 fig7 fig8
  # ten seeds in five shards: a SLURM job array (one GPU each), merged when all are done
  python -m softmax_as_linear reproduce fig2 fig3 fig4 --preset paper --seeds 10 --device cuda \\
      --shards 5 --launcher slurm --slurm-partition gpu --job-minutes 60
  # or by hand, shard by shard (anywhere, in any order), then merged
  python -m softmax_as_linear reproduce fig2 fig3 fig4 --preset paper --seeds 10 --shard 2/5
  python -m softmax_as_linear merge fig2 fig3 fig4 --preset paper --seeds 10 --shards 5"""


def _examples() -> str:
    """The examples, with the line of each reproduction of the registry that has one."""
    return _EXAMPLES.format(chapters="\n".join(f"  python -m softmax_as_linear {r.example}"
                                                for r in REPRODUCTIONS.values() if r.example))


# ValueErrors of the library name its parameters; the command line names its options.
OPTION_OF = {"preset": "--preset", "seeds": "--seeds", "sampler": "--sampler", "max_minutes": "--max-minutes",
             "shard": "--shard", "launcher": "--launcher", "device": "--device", "rng": "--rng",
             "covariates": "--covariates", "lengths": "--lengths"}


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt raised by a signal, which it keeps as ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible():
    """Inside the block, Ctrl-C (SIGINT) and a polite kill (SIGTERM) both raise KeyboardInterrupt, so that a
    long job saves its checkpoint before leaving; the previous handlers are restored after it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def resume_advice(argv: list[str] | None) -> str:
    """The command that resumes a run of the command line ``argv`` (its arguments): the same command, or, when it
    has ``--restart`` (which would delete the checkpoints again and start from step 0), the same without it."""
    if argv is None or not any(_is_restart(a) for a in argv):
        return "run the same command again"
    kept = shlex.join(a for a in argv if not _is_restart(a))
    return f"run, without --restart,\n    python -m softmax_as_linear {kept}\nagain"


def _is_restart(arg: str) -> bool:
    return len(arg) > 4 and "--restart".startswith(arg)  # argparse takes --restart's prefixes too


def interrupted_exit(stop: KeyboardInterrupt, argv: list[str] | None = None) -> int:
    """Say how to resume, and return the exit code a shell gives the signal: 130 (Ctrl-C), 143 (SIGTERM)."""
    print(f"\ninterrupted: {resume_advice(argv)} to resume from the last checkpoint", file=sys.stderr)
    return 128 + getattr(stop, "signum", signal.SIGINT)


class _RenamedOption(argparse.Action):
    """An option's former name (``--law``, now ``--covariates``): still accepted, with a note naming the new one."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"note: {option_string} is now --{self.dest}", file=sys.stderr)
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    """A parser whose argument errors are one line and a pointer to ``--help`` (exit code 2), not the usage first."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n(see '{self.prog} --help')\n")


class _Formatter(argparse.HelpFormatter):
    """Wraps one-paragraph texts; keeps the line breaks of the examples and exit codes."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=30, width=100)

    def _fill_text(self, text, width, indent):
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _seed_count(text: str) -> int:
    value = _positive_int(text)
    if value > 1000:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to 1000, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _shard(text: str) -> tuple[int, int]:
    k, slash, n = text.partition("/")
    try:
        shard = (int(k), int(n))
    except ValueError:
        shard = None
    if not slash or shard is None or not 1 <= shard[0] <= shard[1]:
        raise argparse.ArgumentTypeError(f"must be K/N, shard K of N with 1 <= K <= N (for instance 2/5), got {text!r}")
    return shard


def _key_value(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE (for instance account=myproject), got {text!r}")
    return key.replace("-", "_"), value


def _common_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("figure", nargs="+", choices=FIGURE_CHOICES, metavar="FIGURE",
                         help=f"one or more of {', '.join(FIGURE_CHOICES)}; the figures of one sweep (2-4, 6-8) "
                              "share its training; "
                              + "; ".join(f"{r.name}: {r.summary}" for r in REPRODUCTIONS.values() if r.summary)
                              + "; all: the paper's figures (not "
                              + ", not ".join(r.name for r in REPRODUCTIONS.values() if not r.in_all) + ")")
    command.add_argument("--preset", choices=PRESETS, default="lecture",
                         help="paper: the paper's settings (about 45 min of a 2-core CPU for one sweep of one seed, "
                              "minutes on a GPU); lecture: the same stories in minutes on a CPU; smoke: seconds, "
                              "checks that every step runs (default: %(default)s)")
    command.add_argument("--device", choices=DEVICES, default="auto",
                         help="auto: CUDA when available, else the CPU (default: %(default)s)")
    command.add_argument("--out", metavar="DIR", type=pathlib.Path, default=None,
                         help=f"folder for the files (default: {RESULTS_RULE}); chapters read another folder "
                              "only when $SOFTMAX_AS_LINEAR_RESULTS names it")
    command.add_argument("--seeds", metavar="N", type=_seed_count, default=None,
                         help="train N seeds of each sweep at once, the paper's 327 first (default: the preset's; "
                              "327 alone for the figures)")
    command.add_argument("--sampler", choices=SAMPLERS, default="paper",
                         help="inputs of the KMS sweep (Figures 6-8): paper (prompts and queries N(0, Sigma)) or "
                              "published (the published code: prompts N(0, C Sigma C^T), queries N(0, I)) "
                              "(default: %(default)s)")
    command.add_argument("--covariates", nargs="+", choices=COVARIATES, default=None, metavar="LAW",
                         help="beyond: the covariate laws, among " + ", ".join(COVARIATES)
                              + " (default: uniform rademacher)")
    command.add_argument("--law", dest="covariates", nargs="+", choices=COVARIATES, default=None,
                         action=_RenamedOption, help=argparse.SUPPRESS)
    command.add_argument("--lengths", nargs="+", type=_positive_int, default=None, metavar="L",
                         help="beyond: the prompt lengths, increasing (default: the preset's); a run with other "
                              "seeds or lengths than its preset's is written under a name that says so, "
                              "beyond_<covariates>_<preset>_<N>seeds_L<lengths>.json")
    command.add_argument("--allow-dirty", action="store_true",
                         help="write results although the library has uncommitted changes (they then say so); "
                              "without it such a run stops before computing anything")
    command.add_argument("--rng", choices=RNGS, default="auto",
                         help="random stream of the training prompts: torch (per-seed generators, as every result "
                              "file before this option), philox (a counter-based stream, the same prompts on every "
                              "device, drawn inside the training kernel on a GPU) or auto (philox on CUDA, torch on "
                              "a CPU; merge: what the shards used) (default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m softmax_as_linear`` and its subcommands."""
    parser = _Parser(
        prog="python -m softmax_as_linear", formatter_class=_Formatter,
        description="Reproduce the figures of Boyer & Boursier, Softmax as Linear Attention in the "
                    "Large-Prompt Regime (arXiv 2512.11784).",
        epilog=f"{_examples()}\n\n{EXIT_CODES}")
    parser.add_argument("--version", action="version", version=f"softmax_as_linear {VERSION}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND",
                                     parser_class=_Parser)
    rep = commands.add_parser(
        "reproduce", formatter_class=_Formatter, help="compute and save the data of paper figures",
        description="Train (or reuse) the runs behind the given figures and write one figNAME_PRESET.json "
                    "per figure (beyond_COVARIATES_PRESET.json per covariate law of Chapter 6), with the sweep it came "
                    "from, into the output folder.",
        epilog=f"{_examples()}\n\n{EXIT_CODES}")
    _common_options(rep)
    rep.set_defaults(command_parser=rep)
    rep.add_argument("--max-minutes", metavar="M", type=_positive_float, default=None,
                     help="stop training after about M minutes, write the artifacts marked partial and "
                          f"exit with {EXIT_PARTIAL}; the same command resumes (default: no limit)")
    rep.add_argument("--threads", metavar="T", type=_positive_int, default=1,
                     help="compute threads on a CPU; with 1, the next batch is drawn on a spare core "
                          "meanwhile (default: %(default)s)")
    rep.add_argument("--restart", action="store_true",
                     help="train the requested sweeps afresh: their checkpoints are deleted and their files "
                          "rewritten (the other sweeps' files are kept)")
    shards = rep.add_argument_group(
        "shards", "A reproduction of several seeds splits into N shards of consecutive seeds that run anywhere, "
                  "resume independently and merge into the files one process writes (bit for bit on a CPU, "
                  "except the provenance, which lists the shards). Launching needs submitit: "
                  'pip install -e ".[cluster]" in the checkout.')
    where = shards.add_mutually_exclusive_group()
    where.add_argument("--shard", metavar="K/N", type=_shard, default=None,
                       help="train shard K of N only, into DIR/shards/K-of-N/ (then: merge ... --shards N)")
    where.add_argument("--shards", metavar="N", type=_positive_int, default=None,
                       help="launch the N shards through submitit (--launcher), wait for them and merge")
    shards.add_argument("--launcher", choices=LAUNCHERS, default=None,
                        help="with --shards: local (the shards as processes of this machine; with CUDA one GPU "
                             "each) or slurm (one SLURM job array) (default: local)")
    shards.add_argument("--job-minutes", metavar="M", type=_positive_float, default=24 * 60,
                        help="time limit of each shard's job (default: %(default)s)")
    shards.add_argument("--gpus-per-shard", metavar="G", type=int, default=None,
                        help="GPUs of each shard's job (default: 1 with --device cuda, else 0)")
    shards.add_argument("--slurm-partition", metavar="NAME", default=None, help="SLURM partition of the jobs")
    shards.add_argument("--slurm-option", metavar="KEY=VALUE", type=_key_value, action="append", default=[],
                        help="any other sbatch option, for instance account=myproject or qos=short (repeatable)")

    merge = commands.add_parser(
        "merge", formatter_class=_Formatter, help="join the shards of a reproduction into its files",
        description="Join the shards written by 'reproduce ... --shard K/N' (K = 1..N) in DIR/shards/ and write "
                    "the files one process would have written into DIR; Figures 1 and 5 are computed here.",
        epilog=f"{_examples()}\n\n{EXIT_CODES}")
    _common_options(merge)
    merge.set_defaults(command_parser=merge)
    merge.add_argument("--shards", metavar="N", type=_positive_int, required=True, help="the number of shards")
    return parser


def _option_error(parser: argparse.ArgumentParser, error: ValueError, **renamed: str):
    """A library ValueError ("seeds must be ...") as the command line's "argument --seeds: must be ..."."""
    name, _, rest = str(error).partition(" ")
    options = {**OPTION_OF, **renamed}
    if name in options:
        parser.error(f"argument {options[name]}: {rest}")
    parser.error(str(error))


def _check_out(parser: argparse.ArgumentParser, out: pathlib.Path | None) -> None:
    """Exit 2 with a message when the output folder cannot be made or written."""
    from .core.artifacts import results_folder

    folder = results_folder() if out is None else out
    option = "--out" if out is not None else "the results folder (--out, $SOFTMAX_AS_LINEAR_RESULTS)"
    if folder.exists() and not folder.is_dir():
        parser.error(f"argument {option}: {folder} is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        parser.error(f"argument {option}: cannot write to {folder}: {error.strerror or error}")


def _check_cuda(parser: argparse.ArgumentParser, device: str) -> None:
    """Exit 2 when CUDA is asked of a PyTorch built without it (not merely a machine without a GPU)."""
    import torch

    if device == "cuda" and torch.version.cuda is None and not torch.cuda.is_available():
        parser.error(f"argument --device: the installed PyTorch ({torch.__version__}) has no CUDA support; install a "
                     "CUDA build (from a checkout: make setup TORCH_INDEX= for PyPI's, or "
                     "TORCH_INDEX=https://download.pytorch.org/whl/cu128 for a given CUDA version), or use "
                     "--device auto")


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Every argument checked before anything is computed: exit 2 naming the option at fault."""
    from .core.devices import resolve_device
    from .experiments.reproduce import UncommittedChangesError, check_clean, check_options, figures_of

    renamed = {} if getattr(args, "shard", None) else {"shard": "--shards"}
    try:
        names = figures_of(args.figure)
        extra = dict(names=names, covariates=args.covariates, lengths=args.lengths)
        if args.command == "merge":
            check_options(args.preset, None, args.seeds, args.sampler, args.rng, shard=(1, args.shards), **extra)
        else:
            if args.launcher is not None and args.shards is None:
                raise ValueError("launcher needs --shards N (the number of shards to launch)")
            if args.shards is not None and importlib.util.find_spec("submitit") is None:
                parser.error('argument --shards: launching shards needs submitit, which is not installed: install the '
                             'extra with pip install -e ".[cluster]" in the checkout (pip install '
                             '"softmax_as_linear[cluster]" elsewhere), or run each shard with --shard K/N')
            check_options(args.preset, args.max_minutes, args.seeds, args.sampler, args.rng,
                          shard=args.shard or (None if args.shards is None else (1, args.shards)), **extra)
        if args.command == "merge" or args.launcher != "slurm":
            _check_cuda(parser, args.device)
            resolve_device(args.device)
        check_clean(args.allow_dirty)
    except UncommittedChangesError as error:
        parser.error(str(error))
    except ValueError as error:
        _option_error(parser, error, **renamed)
    _check_out(parser, args.out)


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    parser = getattr(args, "command_parser", parser)  # usage errors name the subcommand and its --help
    _check(args, parser)

    import torch

    from .core.artifacts import DamagedFileError, SettingsMismatchError, load_json, results_folder
    from .core.devices import resolve_device

    threads = torch.get_num_threads()
    common = dict(preset=args.preset, out=args.out, seeds=args.seeds, sampler=args.sampler, rng=args.rng,
                  covariates=args.covariates, lengths=args.lengths, allow_dirty=args.allow_dirty)
    try:
        with interruptible():  # Ctrl-C and a polite kill (SIGTERM) save a checkpoint before leaving
            if args.command == "merge":
                from .experiments.shards import merge

                written = merge(args.figure, args.shards, device=args.device, **common)
            elif args.shards is not None:
                from .experiments.shards import launch

                slurm = dict(additional_parameters=dict(args.slurm_option)) if args.slurm_option else {}
                if args.slurm_partition:
                    slurm["partition"] = args.slurm_partition
                written = launch(args.figure, args.shards, args.launcher or "local", device=args.device,
                                 max_minutes=args.max_minutes, restart=args.restart, threads=args.threads,
                                 timeout_minutes=args.job_minutes, slurm=slurm, gpus_per_shard=args.gpus_per_shard,
                                 **common)
            else:
                from .experiments.reproduce import reproduce

                if resolve_device(args.device).type == "cpu":
                    torch.set_num_threads(args.threads)
                written = reproduce(args.figure, device=args.device, max_minutes=args.max_minutes, restart=args.restart,
                                    shard=args.shard, **common)
    except KeyboardInterrupt as stop:
        return interrupted_exit(stop, argv)
    except (DamagedFileError, SettingsMismatchError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as error:
        from .experiments.reproduce import UncommittedChangesError
        from .experiments.shards import ShardError, ShardsPartial

        if isinstance(error, UncommittedChangesError):  # the library changed while the shards trained
            print(f"error: {error}; the shards' files are kept, and once that is done their merge is\n    "
                  f"python -m softmax_as_linear merge {' '.join(args.figure)} --preset {args.preset} "
                  f"--shards {args.shards}" + ("" if args.out is None else f" --out {args.out.absolute()}"),
                  file=sys.stderr)
            return EXIT_ERROR
        if not isinstance(error, ShardError):
            raise
        print(f"{'partial' if isinstance(error, ShardsPartial) else 'error'}: {error}", file=sys.stderr)
        return EXIT_PARTIAL if isinstance(error, ShardsPartial) else EXIT_ERROR
    finally:
        torch.set_num_threads(threads)
    sharded = args.command == "reproduce" and args.shard is not None
    if sharded:
        k, n = args.shard
        options = (("" if args.seeds is None else f" --seeds {args.seeds}")
                   + ("" if args.sampler == "paper" else f" --sampler {args.sampler}")
                   + ("" if args.rng == "auto" else f" --rng {args.rng}")
                   + ("" if args.covariates is None else f" --covariates {' '.join(args.covariates)}")
                   + ("" if args.lengths is None else f" --lengths {' '.join(map(str, args.lengths))}")
                   + ("" if args.out is None else f" --out {args.out.absolute()}")
                   + (" --allow-dirty" if args.allow_dirty else ""))
        print(f"shard {k}/{n} written; once every shard is, join them with: python -m softmax_as_linear merge "
              f"{' '.join(args.figure)} --preset {args.preset} --shards {n}{options}", file=sys.stderr)
    partial = [path.name for path in written if load_json(path).get("complete", True) is False]
    if args.preset == "smoke" and not sharded:  # the chapters read the lecture and paper presets' files only
        print("note: the smoke preset checks that every step runs; no chapter reads its files", file=sys.stderr)
    elif not sharded and args.out is not None and args.out.resolve() != results_folder().resolve():
        print(f"note: the chapters read {results_folder().absolute()}; for them to read {args.out.absolute()}"
              + (" once its files are complete (they refuse a partial one)" if partial else "")
              + f", set SOFTMAX_AS_LINEAR_RESULTS={args.out.absolute()}", file=sys.stderr)
    if partial:
        print(f"partial: {', '.join(partial)} (time limit reached); {resume_advice(argv)} to resume",
              file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_COMPLETE


def main(argv=None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    return _run(args, parser, argv)
