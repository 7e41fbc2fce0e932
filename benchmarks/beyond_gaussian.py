"""Chapter 6 at a chosen scale: train and read the covariate-law sweeps, write ``beyond_<law>_<preset>.json``.

    python benchmarks/beyond_gaussian.py [--law uniform rademacher] [--preset paper] [--device auto]
                                         [--seeds N] [--lengths L ...] [--out DIR] [--max-minutes M]

For each law: the sweep of :func:`softmax_as_linear.experiments.presets.beyond_config` (softmax and linear
attention at every L and their infinite-prompt limits, same initialisation and batches), its final
evaluation on fresh prompts, and the readings of :mod:`softmax_as_linear.experiments.beyond_gaussian`,
written atomically with provenance (device, torch, commit, settings, seeds, times) into ``DIR`` (default:
the results folder, where Chapter 6 reads). Training checkpoints go to ``DIR/checkpoints``; the same
command resumes a stopped run.

The paper preset (the paper's learning rate 1e-3 and batch 128, ten seeds, L up to 3000, 40,000 steps) is
sized for one GPU (about a minute per law expected on an H100-class card, not yet measured). On a 2-core CPU,
``--seeds 3 --lengths 10 30 100 300 1000`` took 21 min (uniform) and 37 min (Rademacher) of training.

Exit codes: 0 every file complete; 1 error; 2 bad arguments; 3 partial (``--max-minutes`` reached: files
written marked ``"complete": false``, the same command resumes); 130/143 interrupted (checkpoint saved).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time


def main(argv=None) -> int:
    from softmax_as_linear.cli import EXIT_COMPLETE, EXIT_ERROR, EXIT_PARTIAL, interrupted_exit, interruptible
    from softmax_as_linear.registry import COVARIATE_LAWS, DEVICES, PRESETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--law", nargs="+", default=["uniform", "rademacher"], choices=COVARIATE_LAWS)
    parser.add_argument("--preset", default="paper", choices=PRESETS)
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (327 first; default: the preset's)")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="prompt lengths, increasing (default: the preset's)")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="folder of the result files (default: results/)")
    parser.add_argument("--max-minutes", type=float, default=None, help="bound on the training time of this call")
    args = parser.parse_args(argv)
    if args.seeds is not None and not 1 <= args.seeds <= 1000:
        parser.error(f"argument --seeds: must be an integer from 1 to 1000, got {args.seeds}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        parser.error(f"argument --max-minutes: must be positive, got {args.max_minutes}")

    from softmax_as_linear.core.artifacts import results_folder, save_json
    from softmax_as_linear.core.devices import resolve_device
    from softmax_as_linear.experiments import beyond_gaussian
    from softmax_as_linear.experiments.presets import beyond_config, sweep_seeds

    try:
        device = resolve_device(args.device)
    except ValueError as error:
        parser.error(str(error))
    out = results_folder() if args.out is None else args.out
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    overrides = {} if args.seeds is None else {"seeds": sweep_seeds(args.seeds)}
    if args.lengths is not None:
        overrides["lengths"] = tuple(args.lengths)
    try:  # every setting checked before anything is computed
        beyond_config(args.preset, args.law[0], **overrides)
    except ValueError as error:
        parser.error(str(error))
    deadline = None if args.max_minutes is None else time.monotonic() + 60 * args.max_minutes
    stop = None if deadline is None else (lambda: time.monotonic() > deadline)
    partial = []
    try:
        with interruptible():  # Ctrl-C and a polite kill (SIGTERM) save a checkpoint before leaving
            for law in args.law:
                name = beyond_gaussian.result_name(law, args.preset)
                stem = pathlib.Path(name).stem
                print(f"== {law} covariates, {args.preset} preset, on {device}", flush=True)
                data = beyond_gaussian.beyond_experiment(law, args.preset, device=device, progress=True,
                                                         checkpoint=out / "checkpoints" / f"{stem}.pt", should_stop=stop,
                                                         **overrides)
                path = save_json(out / name, data)
                where = data["provenance"]
                print(f"wrote {path}: {where['training_seconds']} s of training, {where['wall_seconds']} s in all"
                      + ("" if data["complete"] else " (partial)"), flush=True)
                if not data["complete"]:
                    partial.append(name)
    except KeyboardInterrupt as stopped:
        return interrupted_exit(stopped)
    except Exception as error:  # noqa: BLE001  (a clear message and exit code 1, not a traceback)
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    if partial:
        print(f"partial: {', '.join(partial)}; run the same command again to resume", file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_COMPLETE


if __name__ == "__main__":
    sys.exit(main())
