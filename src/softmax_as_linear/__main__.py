"""Command line: reproduce the paper's figures.

    python -m softmax_as_linear reproduce {fig1,fig2,fig3,fig4,fig5,fig6,fig7,fig8,all} [more figures] \\
        [--preset {paper,lecture,smoke}] [--device {auto,cpu,cuda}] [--out DIR] [--max-minutes M]
        [--seeds N] [--sampler {paper,published}]

Figures 2-4 share one isotropic sweep and figures 6-8 one anisotropic sweep: the sweep is trained
once (with a progress bar, checkpointed so that an interrupted run resumes where it stopped) and
saved as ``sweep_<covariance>_<preset>.npz``; each figure is then written as ``figN_<preset>.json``
(``sweep_kms_published_<preset>.npz`` and ``figN_<preset>_published.json`` for Figures 6-8 drawn with the
published code's sampler). ``--seeds N`` trains N seeds at once (327 first); final risks are measured on
fresh prompts (``_final.npz`` next to the sweep) and every file records its provenance.
With ``--max-minutes``, training stops after about that long and the artifacts are written marked
``"complete": false`` with the steps reached; the same command later resumes from the checkpoint.
Files go to the results folder (:func:`softmax_as_linear.artifacts.results_folder`), where the
chapters read, unless ``--out`` says otherwise. Exit codes: see ``EXIT_CODES``.

Nothing heavy is imported before a command runs, so ``--help`` and ``--version`` answer at once.
"""
from __future__ import annotations

import argparse
import pathlib
import signal
import sys
import time

from . import __version__

# Known here without importing torch; tests/test_cli.py checks them against the library's registries.
FIGURE_CHOICES = ("fig1", "fig2", "fig3", "fig4", "fig5", "fig6", "fig7", "fig8", "all")
PRESET_CHOICES = ("paper", "lecture", "smoke")
SAMPLER_CHOICES = ("paper", "published")
DEVICE_CHOICES = ("auto", "cpu", "cuda")

# A checkpoint at the first multiple of CHECKPOINT_EVERY steps once CHECKPOINT_SECONDS of training have passed
# since the last one (and on Ctrl-C / SIGTERM, and at --max-minutes): a minute of work at most is lost, and a
# fast GPU sweep does not spend its time writing checkpoints.
CHECKPOINT_EVERY, CHECKPOINT_SECONDS = 1000, 60.0

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


def _sweep(covariance: str, preset: str, device, out: pathlib.Path, deadline: float | None = None,
           seeds: int | None = None, sampler: str = "paper"):
    from .presets import sweep_config, sweep_seeds
    from .sweep import load_sweep, save_sweep
    from .train import train

    overrides = {"sampler": sampler} if seeds is None else {"sampler": sampler, "seeds": sweep_seeds(seeds)}
    config = sweep_config(preset, covariance, **overrides)
    stem = f"sweep_{covariance}{'' if sampler == 'paper' else '_' + sampler}_{preset}"
    path = out / f"{stem}.npz"
    if path.exists():
        result = load_sweep(path)
        if result.config == config and result.complete:
            print(f"{path}: up to date")
            return result
    checkpoint = out / "checkpoints" / f"{stem}.pt"
    print(f"training the {covariance} sweep ({preset} preset) on {device}; checkpoint {checkpoint}", flush=True)
    stop = None if deadline is None else (lambda: time.monotonic() > deadline)
    result = train(config, device=device, progress=True, checkpoint=checkpoint, checkpoint_every=CHECKPOINT_EVERY,
                   checkpoint_seconds=CHECKPOINT_SECONDS, should_stop=stop)
    save_sweep(path, result)
    status = "complete" if result.complete else f"stopped at step {int(result.steps[-1])} of {config.steps} (partial)"
    print(f"{path}: {status}, {result.seconds:.0f} s of training, {int(result.diverged.sum())} diverged runs")
    return result


def _figures(figure: str | list[str]) -> list[str]:
    requested = [figure] if isinstance(figure, str) else list(figure)
    for name in requested:
        if name not in FIGURE_CHOICES:
            raise ValueError(f"figure must be one of {', '.join(FIGURE_CHOICES)}; got {name!r}")
    if not requested:
        raise ValueError("figure must name at least one figure")
    return [f for f in FIGURE_CHOICES if f != "all" and ("all" in requested or f in requested)]


def _final(result, path: pathlib.Path, preset: str, device) -> dict:
    """The final evaluation of a sweep (cached next to it as ``<sweep>_final.npz``)."""
    import json

    import numpy as np

    from .artifacts import load_npz, save_npz
    from .evaluation import final_evaluation
    from .presets import FINAL_PROMPTS

    final = path.with_name(path.stem + "_final.npz")
    key = json.dumps({"config": result.config.as_dict(), "steps": int(result.steps[-1]),
                      "n_prompts": FINAL_PROMPTS[preset]})
    if final.exists():
        cached = load_npz(final)
        if str(cached.pop("key")) == key:
            return cached
    start = time.monotonic()
    evaluation = final_evaluation(result, FINAL_PROMPTS[preset], device=device)
    save_npz(final, key=np.array(key), **evaluation)
    print(f"{final}: final risks on {FINAL_PROMPTS[preset]:,} fresh prompts per seed and L, "
          f"{time.monotonic() - start:.0f} s", flush=True)
    return evaluation


def _check(preset: str, max_minutes: float | None, seeds: int | None = None, sampler: str = "paper") -> None:
    if preset not in PRESET_CHOICES:
        raise ValueError(f"preset must be one of {', '.join(PRESET_CHOICES)}; got {preset!r}")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= 1000):
        raise ValueError(f"seeds must be an integer from 1 to 1000, got {seeds!r}")
    if sampler not in SAMPLER_CHOICES:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLER_CHOICES)}; got {sampler!r}")
    if max_minutes is not None and not max_minutes > 0:
        raise ValueError(f"max_minutes must be positive, got {max_minutes!r}")


def reproduce(figure: str | list[str], preset: str = "lecture", device: str = "auto", out=None,
              max_minutes: float | None = None, seeds: int | None = None, sampler: str = "paper") -> list[pathlib.Path]:
    """Compute and save the artifacts of ``figure`` (a name, ``"all"``, or a list of them); returns the files written.

    ``out`` defaults to the results folder, where the chapters read. ``max_minutes`` bounds the
    training time of this call (artifacts are then marked ``"complete": false``). ``seeds``: number of
    seeds of each sweep (default: the preset's, the paper's seed 327). ``sampler``: the inputs of the
    KMS sweep (Figures 6-8), ``"paper"`` or ``"published"``; the isotropic sweep is the same for both.
    """
    from .artifacts import results_folder, save_json
    from .devices import resolve_device
    from .experiments import PAPER_FIGURES, figure_data, result_name, sweep_provenance

    names = _figures(figure)
    _check(preset, max_minutes, seeds, sampler)
    deadline = None if max_minutes is None else time.monotonic() + 60 * max_minutes
    device = resolve_device(device)
    out = results_folder() if out is None else pathlib.Path(out)
    written, sweeps = [], {}
    for name in names:
        if name in ("fig1", "fig5"):  # no training: softmax against linear attention at the initialisation
            from .experiments import concentration_figure

            data = concentration_figure(name, preset, device=device, progress=True)
        else:
            covariance = PAPER_FIGURES[name][0]
            used = sampler if covariance == "kms" else "paper"  # isotropic inputs: both samplers draw the same
            if covariance not in sweeps:
                start = time.monotonic()
                result = _sweep(covariance, preset, device, out, deadline, seeds, used)
                stem = f"sweep_{covariance}{'' if used == 'paper' else '_' + used}_{preset}"
                evaluation = _final(result, out / f"{stem}.npz", preset, device)
                origin = sweep_provenance(result, preset, device, time.monotonic() - start, evaluation)
                sweeps[covariance] = result, evaluation, origin
            result, evaluation, origin = sweeps[covariance]
            data = {**figure_data(name, result, evaluation=evaluation), "provenance": origin}
        filename = result_name(name, preset, used) if name in PAPER_FIGURES else f"{name}_{preset}.json"
        written.append(save_json(out / filename, data))
        print(f"wrote {written[-1]}", flush=True)
    return written


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
    parser.add_argument("--version", action="version", version=f"softmax_as_linear {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    rep = commands.add_parser(
        "reproduce", formatter_class=_Formatter, help="compute and save the data of paper figures",
        description="Train (or reuse) the runs behind the given figures and write one figNAME_PRESET.json "
                    "per figure, with the sweep it came from, into the output folder.",
        epilog=f"{EXAMPLES}\n\n{EXIT_CODES}")
    rep.add_argument("figure", nargs="+", choices=FIGURE_CHOICES, metavar="FIGURE",
                     help=f"one or more of {', '.join(FIGURE_CHOICES)}; the figures of one sweep (2-4, 6-8) "
                          "share its training")
    rep.add_argument("--preset", choices=PRESET_CHOICES, default="lecture",
                     help="paper: the paper's settings (hours on a CPU, minutes on a GPU); lecture: the same "
                          "stories in minutes on a CPU (default: %(default)s)")
    rep.add_argument("--device", choices=DEVICE_CHOICES, default="auto",
                     help="auto: CUDA when available, else the CPU (default: %(default)s)")
    rep.add_argument("--out", metavar="DIR", type=pathlib.Path, default=None,
                     help=f"folder for the files (default: {RESULTS_RULE}); chapters read another folder "
                          "only when $SOFTMAX_AS_LINEAR_RESULTS names it")
    rep.add_argument("--max-minutes", metavar="M", type=float, default=None,
                     help="stop training after about M minutes, write the artifacts marked partial and "
                          f"exit with {EXIT_PARTIAL}; the same command resumes (default: no limit)")
    rep.add_argument("--seeds", metavar="N", type=int, default=None,
                     help="train N seeds of each sweep at once, the paper's 327 first (default: the preset's, 327)")
    rep.add_argument("--sampler", choices=SAMPLER_CHOICES, default="paper",
                     help="inputs of the KMS sweep (Figures 6-8): paper (prompts and queries N(0, Sigma)) or "
                          "published (the published code: prompts N(0, C Sigma C^T), queries N(0, I)) "
                          "(default: %(default)s)")
    rep.add_argument("--threads", type=int, default=1,
                     help="compute threads on a CPU; with 1, the next batch is drawn on a spare core "
                          "meanwhile (default: %(default)s)")
    return parser


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import torch

    from .artifacts import load_json, results_folder
    from .devices import resolve_device

    # Every option of `reproduce` (all but --threads) is passed on by name.
    options = {k: v for k, v in vars(args).items() if k not in ("command", "figure", "threads")}
    try:
        if args.threads < 1:
            raise ValueError(f"argument --threads: must be a positive integer, got {args.threads}")
        _figures(args.figure)
        _check(args.preset, args.max_minutes, args.seeds, args.sampler)
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


if __name__ == "__main__":
    sys.exit(main())
