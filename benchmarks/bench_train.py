"""Training speed: the per-run loop of the paper's code against the batched core, in one process.

    python benchmarks/bench_train.py [--steps 40] [--device auto] [--seeds 1 10] [--quick]
    python benchmarks/bench_train.py --device cpu --cpu-path [--steps 15] [--rounds 6]

(a) Per-run loop, as the published code runs: one ``nn.Module`` per (activation, L) run that projects
    every token by W_K and W_V, one query per prompt, plain SGD, one thread, one run at a time.
(b) The batched core (:func:`softmax_as_linear.engine.train.train`'s step, a
    :class:`~softmax_as_linear.engine.tensor_step.TensorStepper`): every run of the sweep in one
    computation per step, on one thread (like for like), then as ``train`` runs: on a CPU with the
    next batch drawn on a second thread, on one compute thread and on all the threads torch has;
    on a GPU with the step captured once as a CUDA graph and replayed.

Both use the paper preset (d = 5, batch 128, SGD lr 1e-3) on the same device. Prints run-steps per
second at L = 10, 100, 1000, the projected wall time of the isotropic Figure-2 sweep (38 runs x
300,000 steps, held-out evaluations included for (b)) for each, and their ratio. (c) times the whole
sweep with several seeds trained at once (``--seeds``, default 1 and 10: 38 and 380 runs per step) in
the fastest setting of (b): run-steps per second, the projected sweep and the ratio to the per-run loop.
On a GPU (c) also times the counter-based stream (``rng="philox"``): the prompts drawn inside the prompt kernel
(:mod:`softmax_as_linear.engine.gpu.prompt_kernel`) and the SGD kernel, against both steps above, in the same process.
``--quick`` skips the per-length probes of (b) (the loop's probes are needed for the ratio).
(d), alone with ``--cpu-path``: on a CPU, the step with the CPU path against the tensor formulas it
replaced (the previous CPU step), alternating in this process, for the paper sweep and the lecture
preset: wall time per step and each thread's CPU time per step (what an idle 2-core machine needs).
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch

from softmax_as_linear.core.devices import resolve_device
from softmax_as_linear.engine.batched import SweepModel
from softmax_as_linear.engine.data import SweepData
from softmax_as_linear.engine.gpu import fused_softmax
from softmax_as_linear.engine.gpu.kernel_step import PromptKernelStepper
from softmax_as_linear.engine.stepper import make_optimizer
from softmax_as_linear.engine.tensor_step import TensorStepper
from softmax_as_linear.experiments.presets import PAPER_LENGTHS, sweep_config, sweep_seeds
from softmax_as_linear.theory.models import AttentionModel

PROBE_LENGTHS = (10, 100, 1000)
SWEEP_STEPS = 300_000


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _seconds_per_step(step, steps: int, device, repeats: int = 3, warmup: int = 2) -> float:
    """Best of ``repeats`` timings of ``steps`` calls (after ``warmup`` calls)."""
    for _ in range(warmup):
        step()
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def per_run_loop(L: int, activation: str, steps: int, device) -> float:
    """Seconds per step of one run trained alone, the way the paper's code does it."""
    config = sweep_config("paper", lengths=(L,))
    task = config.task()
    model = AttentionModel(config.D, activation, seed=327).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    generator = torch.Generator(device=device).manual_seed(0)
    loss_fn = torch.nn.MSELoss()

    def step():
        batch = task.sample(config.batch_size, L, generator)
        loss = loss_fn(model(batch.tokens, batch.query), batch.target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return _seconds_per_step(step, steps, device)


def batched_core(lengths, steps: int, device, prefetch: bool = False, graph: bool = False,
                 seeds: int = 1, formulas: bool = False, preset: str = "paper") -> tuple[float, float]:
    """Seconds per step of the batched sweep over ``lengths`` (both activations) and ``seeds`` seeds at
    once, and of one evaluation.

    The step is :func:`train`'s own (divergence bookkeeping included). ``prefetch``: draw the next
    batch on a second thread during the step (a CPU); ``graph``: replay it as a CUDA graph (a GPU).
    ``formulas``: on a CPU, the tensor formulas of the GPU path instead of the CPU path (the CPU step
    before the CPU path existed: tokens as columns and prefix moments formed in the step, softmax in
    separate passes).
    """
    config = sweep_config(preset, lengths=tuple(lengths), seeds=sweep_seeds(seeds))
    sweep = SweepModel(config, device, None, forward_path="tensor" if formulas else None)
    prepare = sweep.prepare if sweep.forward_path == "cpu" else None
    data = SweepData(config, sweep.task, device, sweep.dtype, prefetch=prefetch, prepare=prepare)
    stepper = TensorStepper(sweep, data, make_optimizer(sweep), graph=graph)
    try:
        return (_seconds_per_step(stepper.step, steps, device, warmup=5 if graph else 2),
                _seconds_per_step(stepper.held_out, 1, device, repeats=2))
    finally:
        stepper.close()


def counter_core(lengths, steps: int, device, seeds: int = 1) -> tuple[float, float]:
    """Seconds per step of the sweep with ``rng="philox"``: the prompts drawn inside the prompt kernel, the SGD
    kernel after it, replayed as a CUDA graph; and of one record (the last batch's risk and the held-out risk,
    whose prompts the kernel draws again)."""
    config = sweep_config("paper", lengths=tuple(lengths), seeds=sweep_seeds(seeds), rng="philox")
    sweep = SweepModel(config, device, None)
    stepper = PromptKernelStepper(sweep, make_optimizer(sweep), graph=True)

    def evaluate():
        stepper.batch_risk()
        stepper.held_out()

    return (_seconds_per_step(stepper.step, steps, device, warmup=5),
            _seconds_per_step(evaluate, 1, device, repeats=2))


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="timed steps per measurement (default 40)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 10],
                        help="numbers of seeds trained at once in (c) (default: 1 10)")
    parser.add_argument("--quick", action="store_true", help="skip the per-length probes of (b)")
    parser.add_argument("--cpu-path", action="store_true",
                        help="only (d): the CPU path against the tensor formulas it replaces (a CPU)")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds of (d) (default 6)")
    args = parser.parse_args()
    device = resolve_device(args.device)
    threads = torch.get_num_threads()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{platform.processor() or 'CPU'}"
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    print(f"device: {device} ({name}), torch {torch.__version__}, {threads} threads available{load}")
    if args.cpu_path:
        cpu_path_against_formulas(args.steps, args.rounds)
        return

    print("\n(a) per-run loop (one thread, one run at a time)")
    torch.set_num_threads(1)
    loop = {}
    for L in PROBE_LENGTHS:
        loop[L] = np.mean([per_run_loop(L, a, args.steps, device) for a in ("softmax", "linear")])
        print(f"  L = {L:4d}: {1 / loop[L]:8.1f} run-steps/s")
    torch.set_num_threads(threads)
    # Time per step grows affinely with L: fit it on the probes and sum over the sweep's lengths.
    slope, intercept = np.polyfit(PROBE_LENGTHS, [loop[L] for L in PROBE_LENGTHS], 1)
    loop_sweep = sum(2 * SWEEP_STEPS * (intercept + slope * L) for L in PAPER_LENGTHS)

    runs = 2 * len(PAPER_LENGTHS)
    records = SWEEP_STEPS // 1000 + 1
    # (label, compute threads, data thread, CUDA graph): one thread like the loop; then as train() runs,
    # on a CPU with the next batch drawn on a second thread (one compute thread, then all of them),
    # on a GPU with the step replayed as a CUDA graph.
    settings = [("1 compute thread", 1, False, False)]
    if device.type == "cpu":
        settings += [(f"{n} compute thread{'s' if n > 1 else ''} + data thread", n, True, False)
                     for n in sorted({1, threads})]
    else:
        settings.append(("1 compute thread, CUDA graph", 1, False, True))
    sweeps = {}
    for label, n_threads, prefetch, graph in settings:
        torch.set_num_threads(n_threads)
        print(f"\n(b) batched core ({label})")
        for L in () if args.quick else PROBE_LENGTHS:
            seconds, _ = batched_core((L,), args.steps, device, prefetch, graph)
            print(f"  L = {L:4d}: {2 / seconds:8.1f} run-steps/s (softmax and linear together)")
        seconds, evaluation = batched_core(PAPER_LENGTHS, args.steps, device, prefetch, graph)
        print(f"  all {runs} runs: {runs / seconds:8.1f} run-steps/s ({1e3 * seconds:.1f} ms per step)")
        sweeps[label] = (SWEEP_STEPS * seconds + records * evaluation, records * evaluation)
    torch.set_num_threads(threads)

    print(f"\nprojected isotropic Figure-2 sweep ({runs} runs x {SWEEP_STEPS:,} steps):")
    print(f"  per-run loop (1 thread): {_hours(loop_sweep)}")
    for label, (total, evaluations) in sweeps.items():
        print(f"  batched core ({label}): {_hours(total)} "
              f"(of which {records} held-out evaluations: {_hours(evaluations)}); ratio {loop_sweep / total:.1f}x")
    like_for_like = sweeps["1 compute thread"][0]
    best_label, (best, _) = min(sweeps.items(), key=lambda item: item[1][0])
    print(f"like for like (one thread each): {loop_sweep / like_for_like:.1f}x")
    print(f"sweep speed-up: {loop_sweep / best:.1f}x (batched core, {best_label}, against the per-run loop)")

    # (c) several seeds at once, in the fastest setting of (b)
    n_threads, prefetch, graph = next((n, p, g) for label, n, p, g in settings if label == best_label)
    torch.set_num_threads(n_threads)
    loop_rate = runs * SWEEP_STEPS / loop_sweep  # run-steps/s of the per-run loop over the whole sweep
    print(f"\n(c) several seeds at once (batched core, {best_label}); per-run loop: {loop_rate:.1f} run-steps/s")
    # On a GPU with Triton: batches drawn with torch's generators, softmax as one fused kernel, the tensor
    # formulas as the baseline; and the counter-based stream drawn inside the prompt kernel (rng="philox").
    gpu = device.type == "cuda" and fused_softmax.triton is not None
    methods = ["fused softmax kernel", "tensor formulas", "prompt kernel (rng philox)"] if gpu else ["tensor formulas"]
    for n in args.seeds:
        rates = {}
        for how in methods:
            try:
                if how == "prompt kernel (rng philox)":
                    seconds, evaluation = counter_core(PAPER_LENGTHS, args.steps, device, seeds=n)
                else:
                    fused_softmax.ENABLED = how == "fused softmax kernel"
                    seconds, evaluation = batched_core(PAPER_LENGTHS, args.steps, device, prefetch, graph, seeds=n)
            except Exception as error:  # a kernel that fails here is reported, not fatal to the others
                print(f"  {n:3d} seed{'s' if n > 1 else ' '}, {how}: FAILED ({type(error).__name__}: {error})")
                continue
            total = SWEEP_STEPS * seconds + records * evaluation
            rates[how] = rate = n * runs / seconds
            print(f"  {n:3d} seed{'s' if n > 1 else ' '}, {how}: {rate:9.1f} run-steps/s ({1e3 * seconds:.3f} ms per "
                  f"step of {n * runs} runs; a record {1e3 * evaluation:.1f} ms); {n}-seed sweep projected "
                  f"{_hours(total)} ({SWEEP_STEPS * seconds:.0f} s of steps); {rate / loop_rate:.1f}x the per-run loop")
        for how in methods[1:]:
            if how in rates and methods[0] in rates:
                print(f"  {n:3d} seed{'s' if n > 1 else ' '}: {how} {rates[how] / rates[methods[0]]:.2f}x the "
                      f"{methods[0]}")
    fused_softmax.ENABLED = True
    torch.set_num_threads(threads)

def _thread_seconds(preset: str, formulas: bool, steps: int) -> tuple[float, float, float]:
    """Wall seconds per step of ``train``'s CPU step (1 compute thread + data thread), and the CPU seconds per
    step spent by each thread (compute, data): on an otherwise idle 2-core machine a step takes about the
    larger of the two, whatever else shares the cores while measuring."""
    device = torch.device("cpu")
    config = sweep_config(preset, seeds=sweep_seeds(1))
    sweep = SweepModel(config, device, None, forward_path="tensor" if formulas else "cpu")
    data = SweepData(config, sweep.task, device, sweep.dtype, prefetch=True,
                     prepare=None if formulas else sweep.prepare)
    spent = [0.0]
    draw = data._draw_prepared

    def timed_draw():
        start = time.thread_time()
        try:
            return draw()
        finally:
            spent[0] += time.thread_time() - start

    data._draw_prepared = timed_draw
    stepper = TensorStepper(sweep, data, make_optimizer(sweep))
    try:
        for _ in range(3):
            stepper.step()
        spent[0], wall, cpu = 0.0, time.perf_counter(), time.thread_time()
        for _ in range(steps):
            stepper.step()
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        return wall / steps, cpu / steps, spent[0] / steps
    finally:
        stepper.close()


def cpu_path_against_formulas(steps: int, rounds: int):
    """(d) On a CPU: the step of ``train`` (one compute thread, the next batch and its column layout and
    prefix moments drawn on the data thread) with the CPU path and with the tensor formulas it replaced,
    in alternating rounds of ``steps`` steps in this process, for the paper sweep and the lecture preset:
    wall time per step, and the CPU time of each thread per step."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    print(f"\n(d) CPU path against the tensor formulas (1 compute thread + data thread, one seed), {rounds} "
          f"alternating rounds of {steps} steps; CPU time of each thread per step, best round")
    for preset in ("paper", "lecture"):
        runs, total = 2 * len(sweep_config(preset).lengths), sweep_config(preset).steps
        found = {False: [], True: []}
        for _ in range(rounds):
            for formulas in (True, False):
                found[formulas].append(_thread_seconds(preset, formulas, steps))
        rows = {}
        for formulas, label in ((True, "tensor formulas"), (False, "CPU path")):
            wall = [w for w, _, _ in found[formulas]]
            compute, data = min(c for _, c, _ in found[formulas]), min(d for _, _, d in found[formulas])
            rows[formulas] = min(wall), float(np.median(wall)), compute, data
            print(f"  {preset} ({runs} runs), {label}: {1e3 * min(wall):.2f} ms per step (median "
                  f"{1e3 * float(np.median(wall)):.2f}); CPU per step: compute thread {1e3 * compute:.2f} ms, "
                  f"data thread {1e3 * data:.2f} ms")
        (w0, m0, c0, d0), (w1, m1, c1, d1) = rows[True], rows[False]
        load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
        print(f"  {preset}: ratio {w0 / w1:.2f}x (best), {m0 / m1:.2f}x (median); on an idle 2-core machine "
              f"(the busier thread) {1e3 * max(c0, d0):.2f} -> {1e3 * max(c1, d1):.2f} ms per step, "
              f"{max(c0, d0) / max(c1, d1):.2f}x; its {total:,} steps {_hours(total * max(c1, d1))}{load}")
    torch.set_num_threads(threads)


if __name__ == "__main__":
    main()
