"""Where the time of one training step goes on a GPU: the kernels of the paper sweep's step, by region.

    python benchmarks/profile_step.py [--seeds 1 10] [--covariance isotropic kms] [--rng torch philox]
                                      [--steps 200] [--top 25]

For each setting, and for both random streams of the prompts (``--rng``: ``torch``, the batch drawn with torch's
generators and the tensor formulas with the fused softmax kernel; ``philox``, the prompts drawn inside the prompt
kernel and the SGD kernel, :mod:`softmax_as_linear.engine.gpu.prompt_kernel`), it prints (1) the step's time as ``train`` runs it (replayed CUDA graph, best of three
timings of ``--steps`` steps), (2) the sum of the durations of the kernels one step launches, op by op,
split into regions (drawing the batch, forward pass, backward pass, optimiser; "other" holds what
the autograd engine launches from its own thread, most of the backward pass), with their kernel counts, and (3) the ``--top`` kernels by time. When the graph's step time is close to the
kernels' sum, arithmetic and memory traffic set the pace; when it is much larger, the gaps between
many small kernels do.
"""
from __future__ import annotations

import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from softmax_as_linear.engine.batched import SweepModel
from softmax_as_linear.engine.data import SweepData
from softmax_as_linear.engine.gpu.kernel_step import PromptKernelStepper
from softmax_as_linear.engine.stepper import make_optimizer
from softmax_as_linear.engine.tensor_step import TensorStepper
from softmax_as_linear.experiments.presets import sweep_config, sweep_seeds

REGIONS = ("data", "forward", "backward", "optimiser")


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def build(covariance: str, seeds: int, device):
    config = sweep_config("paper", covariance, seeds=sweep_seeds(seeds))
    sweep = SweepModel(config, device, None)
    data = SweepData(config, sweep.task, device, sweep.dtype)
    optimizer = torch.optim.SGD(list(sweep.params.values()), lr=config.lr)
    return config, sweep, data, optimizer


def counter_step(covariance: str, seeds: int, device, graph: bool = False) -> PromptKernelStepper:
    """The stepper of ``rng="philox"`` as ``train`` builds it (prompt kernel, then the SGD kernel)."""
    config = sweep_config("paper", covariance, seeds=sweep_seeds(seeds), rng="philox")
    sweep = SweepModel(config, device, None)
    return PromptKernelStepper(sweep, make_optimizer(sweep), graph=graph)


def graphed_ms(covariance: str, seeds: int, steps: int, device, rng: str = "torch") -> float:
    if rng == "philox":
        step = counter_step(covariance, seeds, device, graph=True).step
    else:
        _, sweep, data, optimizer = build(covariance, seeds, device)
        step = TensorStepper(sweep, data, optimizer, graph=True).step
    for _ in range(6):
        step()
    best = float("inf")
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            step()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / steps)
    return best


def kernel_profile(covariance: str, seeds: int, device, repeats: int = 5, rng: str = "torch"):
    """Per region: (kernel count per step, kernel microseconds per step), and the kernels by name."""
    if rng == "philox":
        counter = counter_step(covariance, seeds, device)

        def step():
            with record_function("step"):
                counter.step()
    else:
        _, sweep, data, optimizer = build(covariance, seeds, device)
        params = list(sweep.params.values())

    def torch_step():
        with record_function("data"):
            batch = data.batch()  # tokens, queries, targets, prepared (None here)
        with record_function("forward"):
            loss = 2 * sweep.risk(*batch).sum()
        with record_function("backward"):
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
        with record_function("optimiser"):
            for p in params:
                p.grad.nan_to_num_(0.0)
            optimizer.step()

    if rng != "philox":
        step = torch_step
    for _ in range(3):
        step()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(repeats):
            step()
        sync()
    events = prof.events()
    regions = {r: [0, 0.0] for r in (("step",) if rng == "philox" else REGIONS)}
    names = collections.defaultdict(lambda: [0, 0.0])
    # a kernel belongs to the region of the CPU op that launched it (walk up the CPU op's parents)
    for e in events:
        for k in e.kernels:
            region, node = "other", e
            while node is not None:
                if node.name in regions:
                    region = node.name
                    break
                node = node.cpu_parent
            regions.setdefault(region, [0, 0.0])
            regions[region][0] += 1
            regions[region][1] += k.duration
            names[k.name][0] += 1
            names[k.name][1] += k.duration
    per_step = {r: (c / repeats, us / repeats) for r, (c, us) in regions.items()}
    kernels = sorted(((n, c / repeats, us / repeats) for n, (c, us) in names.items()), key=lambda x: -x[2])
    return per_step, kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--covariance", nargs="+", default=["isotropic", "kms"])
    parser.add_argument("--rng", nargs="+", default=["torch", "philox"], choices=["torch", "philox"])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("profile_step.py needs a CUDA device")
    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for covariance in args.covariance:
        for seeds in args.seeds:
            for rng in args.rng:
                try:
                    graph = graphed_ms(covariance, seeds, args.steps, device, rng)
                    per_step, kernels = kernel_profile(covariance, seeds, device, rng=rng)
                except Exception as error:  # report and go on with the other settings
                    print(f"\n== {covariance}, {seeds} seeds, rng {rng}: FAILED ({type(error).__name__}: {error})")
                    continue
                total_n = sum(c for c, _ in per_step.values())
                total_us = sum(us for _, us in per_step.values())
                print(f"\n== {covariance}, {seeds} seeds, rng {rng}: graphed step {graph * 1000:.0f} us; "
                      f"op by op {total_n:.0f} kernels, {total_us:.0f} us of kernel time per step")
                for region, (count, us) in per_step.items():
                    print(f"   {region:<10} {count:5.0f} kernels {us:8.1f} us")
                for name, count, us in kernels[: args.top]:
                    print(f"   {us:8.1f} us {count:4.0f}x  {name[:110]}")


if __name__ == "__main__":
    main()
