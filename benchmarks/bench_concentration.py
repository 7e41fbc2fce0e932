"""Time and memory of the concentration estimators (a benchmark, not a test).

    python benchmarks/bench_concentration.py            # the L-grid cases and Figure 1 (lecture)
    python benchmarks/bench_concentration.py --paper    # also Figure 1 at the paper preset (minutes)

Each case runs in a fresh process so that its peak resident memory is its own; the table gives
wall-clock seconds and the peak resident set size (which includes about 0.3 GB for Python and torch).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

GRID = [10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000]
CASES = {
    "baseline": "import torch and the library, nothing computed",
    "grid-output": "E_L on the grid 10..10^6 (11 lengths), 64 prompts x 16 queries, Gaussian tokens, D = 3, float64",
    "grid-output-f32": "the same with float32 chunks (dtype=torch.float32)",
    "grid-output-f32-q4": "the same with 4 queries per prompt (the chapter's setting), float32",
    "grid-gradients-f32": "the same with the U and V gradient gaps, float32 chunks",
    "single-1e6": "E_L at L = 10^6 alone, 64 prompts x 16 queries, float64",
    "figure1-lecture": "figure1('lecture'): 6 lengths up to 3000, 1024 prompts, D = 6, float64",
    "figure1-paper": "figure1('paper'): 24 lengths up to 5 x 10^4, 2048 prompts, D = 6, float64",
}


def run_case(name: str) -> dict:
    import torch

    from softmax_as_linear.theory import concentration as conc
    from softmax_as_linear.theory.measures import TokenLaw

    g = torch.Generator().manual_seed(0)
    U, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    V = torch.eye(3, dtype=torch.float64)
    law = TokenLaw.standard("gaussian", 3, 1.0)
    start = time.perf_counter()
    if name.startswith("grid"):
        dtype = torch.float32 if "f32" in name else torch.float64
        conc.gap_curve(law, U, V, GRID, gradients="gradients" in name, dtype=dtype,
                       n_queries=4 if name.endswith("q4") else 16)
    elif name == "single-1e6":
        conc.gap_curve(law, U, V, [1_000_000])
    elif name.startswith("figure1"):
        from softmax_as_linear.experiments import concentration_figures

        concentration_figures.figure1(name.split("-")[1], device="cpu")
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"case": name, "seconds": seconds, "peak_mb": peak_mb, "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paper", action="store_true", help="also time Figure 1 at the paper preset")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    names = [n for n in CASES if args.paper or n != "figure1-paper"]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
          f"python {platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the start")
    print("| case | what | seconds | peak RSS (MB) | torch threads |")
    print("|---|---|---|---|---|")
    for name in names:
        out = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {name} | {CASES[name]} | {row['seconds']:.1f} | {row['peak_mb']:.0f} | {row['threads']} |", flush=True)


if __name__ == "__main__":
    main()
