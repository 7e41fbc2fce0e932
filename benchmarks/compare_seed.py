"""One seed's final risks (seed 327 of a one-seed sweep, e.g. on a CPU) against a ten-seed figure file: the same
seed there, and the spread over its seeds.

    python benchmarks/compare_seed.py NEW/fig2_paper.json [results/fig2_paper.json]

The per-seed standard errors cover the final evaluation's sampling (200,000 prompts per L) only: the CPU and the
GPU draw different training batches (different random number generators), so seed 327 is trained on different
data and its final parameters differ by SGD noise too. The spread over the committed ten seeds measures that.
"""
import json
import math
import sys

import numpy as np

cpu_path = sys.argv[1]
ref_path = sys.argv[2] if len(sys.argv) > 2 else "results/fig2_paper.json"
cpu, ref = json.load(open(cpu_path)), json.load(open(ref_path))
assert cpu["lengths"] == ref["lengths"]
i, j = cpu["seeds"].index(327), ref["seeds"].index(327)
print(f"CPU: {cpu_path} ({cpu['provenance'].get('device_name')}, training {cpu['provenance'].get('training_seconds')} s, "
      f"complete {cpu['complete']}); reference: {ref_path} ({ref['provenance'].get('device_name') or ref['provenance'].get('gpu')}, seeds {ref['seeds']})")
print(f"{'L':>5} {'act':>8} {'CPU 327':>9} {'ref 327':>9} {'z (eval SE)':>12} {'ref seeds mean':>15} {'sd':>8} {'z (seeds)':>10}")
worst = 0.0
for a in ("softmax", "linear"):
    for l, L in enumerate(cpu["lengths"]):
        x, se_x = cpu[f"{a}_per_seed"][i][l], cpu[f"{a}_se_per_seed"][i][l]
        y, se_y = ref[f"{a}_per_seed"][j][l], ref[f"{a}_se_per_seed"][j][l]
        z = (x - y) / math.hypot(se_x, se_y)
        seeds = np.array([row[l] for row in ref[f"{a}_per_seed"]], dtype=float)
        zs = (x - np.nanmean(seeds)) / np.nanstd(seeds, ddof=1)
        worst = max(worst, abs(zs))
        print(f"{L:5d} {a:>8} {x:9.5f} {y:9.5f} {z:12.1f} {np.nanmean(seeds):15.5f} {np.nanstd(seeds, ddof=1):8.5f} {zs:10.2f}")
for l, L in enumerate(cpu["lengths"]):
    x, y = cpu["linear_exact_per_seed"][i][l], ref["linear_exact_per_seed"][j][l]
    if L in (10, 100, 1000):
        print(f"exact linear risk at L = {L}: CPU {x:.5f}, reference seed 327 {y:.5f} (relative {abs(x - y) / y:.2%})")
print(f"largest |z| against the spread of the reference's ten seeds: {worst:.2f}")
