"""Two sets of paper-figure files side by side: are their final risks equal within what the seeds allow?

    python benchmarks/compare_results.py NEW_FOLDER [OLD_FOLDER] [--preset paper]

For each training sweep present in both folders (Figures 2-4 isotropic, 6-8 KMS, 6-8 with the published
sampler) it compares, length by length and for each activation, the seed means of the final risks, of the
exact risks of linear attention and of the final parameter gaps. The two sets may come from different
random streams (torch's generators and the counter-based stream draw different prompts for the same seed),
so their seeds are independent replicates: the difference of two seed means is judged against
``sqrt(sd_new^2 / n_new + sd_old^2 / n_old)`` (seed-to-seed standard deviations). With 19 lengths x 2
activations about 5 % of the cells should lie beyond 2 standard errors by chance alone.
Exit code 0 whatever the outcome: it reports, the reader judges.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib

import numpy as np

SWEEPS = {"isotropic": ("fig2", "fig3", "fig4", ""), "KMS, paper's sampler": ("fig6", "fig7", "fig8", ""),
          "KMS, published sampler": ("fig6", "fig7", "fig8", "_published")}


def _load(folder: pathlib.Path, name: str, preset: str, suffix: str):
    path = folder / f"{name}_{preset}{suffix}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _z(new: np.ndarray, old: np.ndarray) -> tuple[float, float, float]:
    """Difference of seed means, its standard error and z (NaN-robust over seeds)."""
    new, old = new[np.isfinite(new)], old[np.isfinite(old)]
    if new.size < 2 or old.size < 2:
        return math.nan, math.nan, math.nan
    diff = new.mean() - old.mean()
    se = math.sqrt(new.var(ddof=1) / new.size + old.var(ddof=1) / old.size)
    return diff, se, diff / se if se > 0 else math.nan


def compare(new_dir: pathlib.Path, old_dir: pathlib.Path, preset: str) -> None:
    for label, (final, gap, trajectory, suffix) in SWEEPS.items():
        a, b = _load(new_dir, final, preset, suffix), _load(old_dir, final, preset, suffix)
        if a is None or b is None:
            print(f"== {label}: not in both folders")
            continue
        if a["lengths"] != b["lengths"]:
            print(f"== {label}: different lengths")
            continue
        pa, pb = a.get("provenance", {}), b.get("provenance", {})
        print(f"== {label} ({final}{suffix}): new {len(a['seeds'])} seeds, step {a['steps']}, "
              f"{'complete' if a['complete'] else 'PARTIAL'}, rng {pa.get('settings', {}).get('rng', '?')}, "
              f"{pa.get('training_seconds', '?')} s of training on {pa.get('device_name', '?')}; "
              f"old {len(b['seeds'])} seeds, rng {pb.get('settings', {}).get('rng', 'torch')}, "
              f"{pb.get('training_seconds', '?')} s on {pb.get('device_name', '?')}")
        rows, beyond, cells = [], 0, 0
        for key in ("softmax", "linear", "linear_exact"):
            name = f"{key}_per_seed"
            if name not in a or name not in b:
                continue
            x, y = np.asarray(a[name], dtype=float), np.asarray(b[name], dtype=float)
            for l, L in enumerate(a["lengths"]):
                diff, se, z = _z(x[:, l], y[:, l])
                cells += key != "linear_exact"
                beyond += key != "linear_exact" and abs(z) > 2
                rows.append((key, L, np.nanmean(x[:, l]), np.nanmean(y[:, l]), diff, se, z))
        print(f"   {'quantity':<13}{'L':>5}{'new mean':>11}{'old mean':>11}{'diff':>11}{'se':>10}{'z':>7}")
        for key, L, m_new, m_old, diff, se, z in rows:
            if L in (10, 20, 50, 100, 200, 500, 1000):
                print(f"   {key:<13}{L:>5}{m_new:>11.5f}{m_old:>11.5f}{diff:>+11.5f}{se:>10.5f}{z:>+7.2f}")
        zs = np.array([abs(r[6]) for r in rows if r[0] != "linear_exact" and np.isfinite(r[6])])
        print(f"   final risks: {beyond} of {cells} (length, activation) cells beyond 2 standard errors "
              f"(about {0.05 * cells:.1f} expected by chance); largest |z| {zs.max() if zs.size else math.nan:.2f}")
        ga, gb = _load(new_dir, gap, preset, suffix), _load(old_dir, gap, preset, suffix)
        if ga and gb and ga["lengths"] == gb["lengths"]:
            parts = []
            for i, L in enumerate(ga["lengths"]):
                x = np.asarray(ga["gap_per_seed"], dtype=float)[:, i, -1]
                y = np.asarray(gb["gap_per_seed"], dtype=float)[:, i, -1]
                diff, se, z = _z(x, y)
                parts.append(f"L={L}: {np.nanmean(x):.4f} vs {np.nanmean(y):.4f} (z {z:+.1f})")
            print("   final parameter gap: " + "; ".join(parts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("new", type=pathlib.Path)
    parser.add_argument("old", type=pathlib.Path, nargs="?", default=pathlib.Path("results"))
    parser.add_argument("--preset", default="paper")
    args = parser.parse_args()
    compare(args.new, args.old, args.preset)


if __name__ == "__main__":
    main()
