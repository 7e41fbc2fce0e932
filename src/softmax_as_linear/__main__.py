"""Command line: reproduce the paper's figures.

    python -m softmax_as_linear reproduce {fig1,fig2,fig3,fig4,fig6,fig7,fig8,all} [more figures] \\
        [--preset {paper,lecture}] [--device {auto,cpu,cuda}] [--out results/] [--max-minutes M]

Figures 2-4 share one isotropic sweep and figures 6-8 one anisotropic sweep: the sweep is trained
once (with a progress bar, checkpointed so that an interrupted run resumes where it stopped) and
saved as ``sweep_<covariance>_<preset>.npz``; each figure is then written as ``figN_<preset>.json``.
With ``--max-minutes``, training stops after about that long and the artifacts are written marked
``"complete": false`` with the steps reached; the same command later resumes from the checkpoint.
"""
from __future__ import annotations

import argparse
import pathlib
import signal
import sys
import time

import torch

from .devices import DEVICE_CHOICES, resolve_device
from .experiments import FIGURES, figure_data, load_sweep, save_sweep
from .presets import PRESET_NAMES, sweep_config

FIGURE_CHOICES = ("fig1", *FIGURES, "all")


def _sweep(covariance: str, preset: str, device, out: pathlib.Path, deadline: float | None = None):
    from .train import train

    config = sweep_config(preset, covariance)
    path = out / f"sweep_{covariance}_{preset}.npz"
    if path.exists():
        result = load_sweep(path)
        if result.config == config and result.complete:
            print(f"{path}: up to date")
            return result
    checkpoint = out / "checkpoints" / f"sweep_{covariance}_{preset}.pt"
    print(f"training the {covariance} sweep ({preset} preset) on {device}; checkpoint {checkpoint}", flush=True)
    stop = None if deadline is None else (lambda: time.monotonic() > deadline)
    result = train(config, device=device, progress=True, checkpoint=checkpoint, checkpoint_every=2000,
                   should_stop=stop)
    save_sweep(path, result)
    status = "complete" if result.complete else f"stopped at step {int(result.steps[-1])} of {config.steps} (partial)"
    print(f"{path}: {status}, {result.seconds:.0f} s of training, {int(result.diverged.sum())} diverged runs")
    return result


def reproduce(figure: str | list[str], preset: str = "lecture", device: str = "auto", out="results",
              max_minutes: float | None = None) -> list[pathlib.Path]:
    """Compute and save the artifacts of ``figure`` (a name, ``"all"``, or a list of them); returns the files written.

    ``max_minutes`` bounds the training time of this call (artifacts are then marked partial).
    """
    from .artifacts import save_json

    requested = [figure] if isinstance(figure, str) else list(figure)
    for name in requested:
        if name not in FIGURE_CHOICES:
            raise ValueError(f"figure must be one of {', '.join(FIGURE_CHOICES)}; got {name!r}")
    if not requested:
        raise ValueError("figure must name at least one figure")
    if preset not in PRESET_NAMES:
        raise ValueError(f"preset must be one of {', '.join(PRESET_NAMES)}; got {preset!r}")
    if max_minutes is not None and not max_minutes > 0:
        raise ValueError(f"max_minutes must be positive, got {max_minutes!r}")
    deadline = None if max_minutes is None else time.monotonic() + 60 * max_minutes
    device = resolve_device(device)
    out = pathlib.Path(out)
    names = [f for f in FIGURE_CHOICES if f != "all" and ("all" in requested or f in requested)]
    written, sweeps = [], {}
    for name in names:
        if name == "fig1":
            from .concentration import figure1

            data = figure1(preset, device=device, progress=True)
        else:
            covariance = FIGURES[name][0]
            if covariance not in sweeps:
                sweeps[covariance] = _sweep(covariance, preset, device, out, deadline)
            data = figure_data(name, sweeps[covariance])
        written.append(save_json(out / f"{name}_{preset}.json", data))
        print(f"wrote {written[-1]}", flush=True)
    return written


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m softmax_as_linear",
                                     description="Reproduce the figures of Boyer & Boursier (arXiv 2512.11784).")
    commands = parser.add_subparsers(dest="command", required=True)
    rep = commands.add_parser("reproduce", help="compute the artifacts of a paper figure")
    rep.add_argument("figure", nargs="+", choices=FIGURE_CHOICES,
                     help="one or more figures; those of one sweep share its training")
    rep.add_argument("--preset", choices=PRESET_NAMES, default="lecture")
    rep.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    rep.add_argument("--out", default="results", help="folder for the artifacts (default: results/)")
    rep.add_argument("--max-minutes", type=float, default=None,
                     help="stop training after about this long and write partial artifacts (resume later)")
    rep.add_argument("--threads", type=int, default=1,
                     help="compute threads on a CPU (default 1: the next batch is drawn on a spare core meanwhile)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"argument --threads: must be a positive integer, got {args.threads}")
    threads = torch.get_num_threads()
    # Ctrl-C, and a polite kill (SIGTERM), both save a checkpoint before leaving.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGTERM, _interrupt)
    try:
        if resolve_device(args.device).type == "cpu":
            torch.set_num_threads(args.threads)
        reproduce(args.figure, args.preset, args.device, args.out, args.max_minutes)
    except ValueError as error:
        parser.error(str(error))
    except KeyboardInterrupt:
        print("\ninterrupted: run the same command again to resume from the last checkpoint", file=sys.stderr)
        return 130
    finally:
        torch.set_num_threads(threads)
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
