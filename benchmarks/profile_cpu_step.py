"""Where the time of one CPU training step goes: the CPU path against the tensor formulas it replaced.

    python benchmarks/profile_cpu_step.py [--preset paper] [--steps 15] [--rounds 3]

The step of :func:`softmax_as_linear.engine.train.train` on one seed, split into its parts and timed
with each part's thread CPU time (``time.thread_time``, which counts the work of the part and not the
time other processes take the cores from it, so that a shared machine still gives comparable
figures), best of ``--rounds`` alternating rounds in this process:

- draw: the normal draws and the arithmetic that turns them into prompts (the data thread);
- prepare: the tokens as columns and the prefix moments of linear attention (the data thread; the
  tensor formulas form them inside the forward pass);
- forward, backward, optimiser: the compute thread.

Then the operators of the forward and backward passes by self CPU time (``torch.profiler``), for each
path.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
from torch.profiler import ProfilerActivity, profile

from softmax_as_linear.engine.batched import SweepModel
from softmax_as_linear.engine.data import SweepData
from softmax_as_linear.experiments.presets import sweep_config

PARTS = ("draw", "prepare", "forward", "backward", "optimiser")


def build(preset: str, formulas: bool):
    config = sweep_config(preset)
    sweep = SweepModel(config, torch.device("cpu"), None)
    if formulas:
        sweep.predict = lambda tokens, query, prepared=None: sweep._predict_tensor(tokens, query)
    data = SweepData(config, sweep.task, torch.device("cpu"), sweep.dtype)
    optimizer = torch.optim.SGD(list(sweep.params.values()), lr=config.lr)
    return sweep, data, optimizer


def parts(preset: str, formulas: bool, steps: int) -> dict[str, float]:
    """CPU milliseconds per step of each part."""
    sweep, data, optimizer = build(preset, formulas)
    spent = dict.fromkeys(PARTS, 0.0)
    for k in range(steps + 3):
        if k == 3:
            spent = dict.fromkeys(PARTS, 0.0)
        clock = time.thread_time()

        def tick(part):
            nonlocal clock
            now = time.thread_time()
            spent[part] += now - clock
            clock = now

        tokens, query, target = data._draw()
        tick("draw")
        prepared = None if formulas else sweep.prepare(tokens)
        tick("prepare")
        risk = sweep.risk(tokens, query, target, prepared)
        tick("forward")
        optimizer.zero_grad(set_to_none=False)
        (2 * risk).sum().backward()
        tick("backward")
        optimizer.step()
        tick("optimiser")
    return {part: 1e3 * seconds / steps for part, seconds in spent.items()}


def operators(preset: str, formulas: bool, steps: int = 5, rows: int = 10) -> str:
    sweep, data, optimizer = build(preset, formulas)
    tokens, query, target = data._draw()
    prepared = None if formulas else sweep.prepare(tokens)

    def step():
        risk = sweep.risk(tokens, query, target, prepared)
        optimizer.zero_grad(set_to_none=False)
        (2 * risk).sum().backward()
        optimizer.step()

    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
    return f"({steps} steps, forward + backward + optimiser)\n{table}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="paper", choices=("paper", "lecture", "smoke"))
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--operators", action="store_true", help="also the operator tables (torch.profiler)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    print(f"one step of the {args.preset} sweep (one seed), torch {torch.__version__}, 1 thread{load}")
    best = {True: None, False: None}
    for _ in range(args.rounds):
        for formulas in (True, False):
            found = parts(args.preset, formulas, args.steps)
            best[formulas] = found if best[formulas] is None else {p: min(best[formulas][p], found[p]) for p in PARTS}
    print(f"CPU ms per step, best of {args.rounds} rounds of {args.steps} steps:")
    print(f"  {'':16s}" + "".join(f"{p:>11s}" for p in PARTS) + f"{'compute':>11s}{'data':>8s}")
    for formulas, label in ((True, "tensor formulas"), (False, "CPU path")):
        row = best[formulas]
        compute = row["forward"] + row["backward"] + row["optimiser"]
        data = row["draw"] + row["prepare"]
        print(f"  {label:16s}" + "".join(f"{row[p]:11.2f}" for p in PARTS) + f"{compute:11.2f}{data:8.2f}")
    if args.operators:
        for formulas, label in ((True, "tensor formulas"), (False, "CPU path")):
            print(f"\n{label} {operators(args.preset, formulas)}")
    if hasattr(os, "getloadavg"):
        print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
