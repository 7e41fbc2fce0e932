r"""Chapter 6's sweeps read run by run: when each (seed, ``L``, model) stopped moving, and whether it still moves
at the end of training; and a paper-scale sweep read as a whole for the chapter's claims (:func:`paper_reading`).

A sweep of :func:`~softmax_as_linear.experiments.beyond_gaussian.beyond_experiment` (run in the chapter or read from
its saved file) records, for every seed, length ``L`` and model of
:data:`~softmax_as_linear.experiments.presets.BEYOND_MODELS` (softmax and linear attention at
``L``, and the two infinite-prompt models, the same run at every ``L``), the held-out risk :math:`R_t` at every
record. Where the sweep does not store the records' standard errors (``"eval_se"``), they are inferred from the
relative spread of the per-prompt losses that the sweep's final evaluation measured for the same run,

.. math:: s_t = R_t \,\frac{\mathrm{se}_{\mathrm{final}}}{R_{\mathrm{final}}}\,\sqrt{n_{\mathrm{final}} /
   n_{\mathrm{eval}}},

which assumes that the relative spread at a record is that of the final parameters (close for the records of a run
that has settled, a guess for early ones), as
:func:`~softmax_as_linear.experiments.uncertainty.held_out_se` does for the paper's figures. These standard errors are
reported, not tested: whether a run still moves is read from its own scatter over the last half of training (41 records
of the 81 a paper-scale sweep keeps, cut into 8 batches of 5; the last quarter's 21 records are too few),
:func:`~softmax_as_linear.experiments.trajectory.read_risks` with ``fraction=0.5``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core import checks, stats
from .false_alarms import false_alarms
from .presets import BEYOND_MODELS
from .trajectory import TrajectoryReading, read_risks

#: The models of a Chapter 6 sweep, in the order of the reading's last axis.


def record_risks(run: dict) -> tuple[np.ndarray, np.ndarray, str]:
    """Held-out risks ``(S, nL, 4, T)`` of a sweep's records (models in the order of
    :data:`~softmax_as_linear.experiments.presets.BEYOND_MODELS`), their standard
    errors, and how those were had."""
    for key in ("eval_risk", "final", "steps", "provenance"):
        if key not in run:
            raise ValueError(f"run: not a Chapter 6 sweep (no {key!r})")
    risk = np.stack([np.asarray(run["eval_risk"][m], dtype=float) for m in BEYOND_MODELS], 2)
    if "eval_se" in run:
        se = np.stack([np.asarray(run["eval_se"][m], dtype=float) for m in BEYOND_MODELS], 2)
        return risk, se, "measured on the held-out prompts"
    final = run["final"]
    n_eval = checks.positive_int("eval_prompts", run["provenance"]["settings"]["eval_prompts"])
    n_final = checks.positive_int("final_prompts", final["final_prompts"])
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.stack([np.asarray(final["risk_se"][m], dtype=float) / np.asarray(final["risk"][m], dtype=float)
                        for m in BEYOND_MODELS], 2)
    se = risk * (rel * math.sqrt(n_final / n_eval))[..., None]
    return risk, se, "inferred: the relative spread of the per-prompt losses measured by the final evaluation"


#: The window of the trend test on a Chapter 6 sweep: its last half (its records are fewer than the paper's figures').
FRACTION = 0.5


def read_sweep(run: dict, level: float = 0.01, fraction: float = FRACTION) -> TrajectoryReading:
    """Every (seed, ``L``, model) run of a Chapter 6 sweep read as a whole
    (:func:`~softmax_as_linear.experiments.trajectory.read_risks`): arrays ``(S, nL, 4)``, models in the order of
    :data:`~softmax_as_linear.experiments.presets.BEYOND_MODELS` (``activations`` of the reading)."""
    risk, se, how = record_risks(run)
    return read_risks(run["steps"], risk, se, level, fraction, method=how, seeds=list(run["final"]["seeds"]),
                      lengths=list(run["final"]["lengths"]), activations=list(BEYOND_MODELS))


__all__ = ["BEYOND_MODELS", "FRACTION", "PaperReading", "paper_reading", "read_sweep", "record_risks"]


@dataclass(frozen=True)
class PaperReading:
    """What Chapter 6 checks on a paper-scale sweep (:func:`paper_reading`); ``text`` says it, line by line.

    ``tracking_intervals``: each seed's interval of the exponent of L of the softmax run's distance to its limit;
    ``moving``: how many runs (finite-L and infinite-prompt) still move at the end, of ``runs``, by the stationarity
    test of :func:`read_sweep`; ``false_alarm_chance``: the largest probability of at least as many by chance alone at
    the test's simulated false-alarm rates for this design (:func:`~.false_alarms.false_alarms`: independent records or
    records correlated as SGD's are); ``above_share``: interval of the share of seeds where softmax minus linear
    attention (paired) exceeds 3 standard errors at the largest L; ``above_up_to_1000``: whether it does at every L <=
    1000 in every seed; ``outlasts``: per L, how many seeds' surplus exceeds its fall over the last half plus the test's
    resolution by 3 standard errors; ``excess_slope_highs``: each seed's upper end of the interval of the log-log slope
    of softmax minus the L-Bayes risk over L >= 100."""

    text: str
    tracking_intervals: list
    moving: int
    runs: int
    false_alarm_chance: float
    above_share: tuple
    above_up_to_1000: bool
    outlasts: list
    excess_slope_highs: list


def paper_reading(data: dict, covariate: str) -> PaperReading:
    """A paper-scale Chapter 6 sweep (its saved file, :func:`~softmax_as_linear.experiments.file_names.saved_beyond`)
    read as a whole for the chapter: the tracking exponents, every run read by :func:`read_sweep` (a trend over the
    last half of training against the run's own jitter; null hypothesis: a stationary run), the paired surplus of
    softmax over linear attention and its own trend, softmax minus the L-Bayes risk, and the distances to the two
    infinite-prompt limits."""
    tracking, final, where = data["tracking"], data["final"], data["provenance"]
    lengths, seeds, n = np.array(final["lengths"]), tracking["seeds"], len(tracking["seeds"])
    soft = tracking["slopes"]["softmax"]
    mean, low, high = stats.mean_interval(soft["per_seed"])                     # spread between the seeds
    lines = [f"{covariate}: {n} seeds, L up to {lengths[-1]}, {where['settings']['steps']:,} steps, on "
             f"{where['device_name']};",
             f"  softmax distance to its limit: exponent, mean of the seeds' {mean:.2f} [{low:.2f}, {high:.2f}]"]
    # every run read as a whole; the infinite-prompt models are one run per seed (the same at every L)
    reading = read_sweep(data)
    finite, limit = reading.moving[:, :, :2], reading.moving[:, 0, 2:]
    flagged, runs = int(finite.sum() + limit.sum()), finite.size + limit.size
    alarms = false_alarms(reading, np.concatenate([finite.ravel(), limit.ravel()]))
    chance = alarms.largest_chance
    lines += [f"  read as a whole: {int(finite.sum())} of {finite.size} finite-L runs (softmax "
              f"{int(finite[..., 0].sum())}, linear {int(finite[..., 1].sum())}) and {int(limit.sum())} of "
              f"{limit.size} infinite-prompt runs still move at the end;",
              f"  {alarms.text()};",
              f"  median resolution {np.median(reading.resolution[:, :, :2]):.0e} (finite L),"
              f" {np.median(reading.resolution[:, 0, 2:]):.0e} (limits)",
              "  infinite-prompt softmax model, fall over the last half per seed: "
              + ", ".join(f"{f:.0e}" + ("*" if m else "") for f,
                          m in zip(reading.fall[:, 0, 2], reading.moving[:, 0, 2]))
              + " (* still moving)"]
    # softmax above linear attention, paired on the same prompts
    difference, difference_se = np.array(final["paired_difference"]), np.array(final["paired_difference_se"])
    above = difference[:, -1] > 3 * difference_se[:, -1]
    share = stats.proportion_interval(int(above.sum()), n)
    up_to_1000 = bool((difference > 3 * difference_se)[:, lengths <= 1000].all())
    lines.append(f"  softmax - linear at L = {lengths[-1]}: {np.median(difference[:, -1]):+.4f} (median s.e."
                 f" {np.median(difference_se[:, -1]):.4f}), above 3 s.e. in {int(above.sum())} of {n} seeds"
                 f" [{share[0]:.2f}, {share[1]:.2f}]; at every L <= 1000 in every seed: {up_to_1000}")
    # is the surplus itself still shrinking? Its held-out records (softmax minus linear, on the same prompts) read
    # with the same test; it outlasts another half of training at its present rate where the surplus exceeds its
    # fall over the last half plus the test's resolution by 3 standard errors
    surplus = np.array(data["eval_risk"]["softmax"]) - np.array(data["eval_risk"]["linear"])
    trend = read_risks(data["steps"], surplus, fraction=FRACTION)
    outlasts = difference - np.maximum(trend.fall, 0) - trend.resolution > 3 * difference_se
    lines += ["  the surplus still shrinks at the end in " + ", ".join(f"{int(c)}" for c in trend.descending.sum(0))
              + f" of {n} seeds (L = {', '.join(str(L) for L in lengths)});",
              "  it outlasts another half of training at its present rate in "
              + ", ".join(f"{int(c)}" for c in outlasts.sum(0)) + f" of {n} seeds"]
    # softmax minus the L-Bayes risk, seed by seed
    excess = np.array(final["risk"]["softmax"]) - np.array(final["bayes"])
    tail = lengths >= 100
    fits = [stats.loglog_slope(lengths[tail], row[tail]) for row in excess]
    median_fit = stats.loglog_slope(lengths[tail], np.median(excess, 0)[tail])
    to_optimum = np.array(final["risk"]["linear"]) / np.array(final["linear_exact"]) - 1
    lines += [f"  softmax - L-Bayes (median): {np.median(excess[:, lengths == 100]):.4f} (L = 100),"
              f" {np.median(excess[:, -1]):.4f} (L = {lengths[-1]}); exponent over L >= 100 of the median over seeds"
              f" {median_fit.slope:.2f}, per seed {min(f.slope for f in fits):.2f} to"
              f" {max(f.slope for f in fits):.2f};",
              f"  trained linear attention within {np.abs(to_optimum).max():.1%} of R*_lin(L)"]
    # the question of Section 6.6: closer to its own limit than the two limits are apart?
    sup, apart = np.array(tracking["sup"]["softmax"]), np.array(tracking["limits_sup"])   # (seeds, lengths), (seeds,)
    closer = sup < apart[:, None]
    lines += ["  softmax run closer to its own limit than the two limits are apart: in "
              + ", ".join(f"{int(closer[:, j].sum())} (L = {L})" for j, L in enumerate(lengths) if L >= 300)
              + f" of {n} seeds;",
              f"  at L = {lengths[-1]} the median distance to its limit {np.median(sup[:, -1]):.1e}, the median"
              f" distance between the limits {np.median(apart):.1e} (seeds "
              + ", ".join(f"{seeds[s]}: {apart[s]:.1e}" for s in np.argsort(apart)[-4:]) + ")"]
    limits, floor = data["limits"], where["settings"]["noise_var"] / 2             # s^2/2, the risk's floor
    lines += ["  infinite-prompt models, R_inf - s^2/2: softmax limit "
              + ", ".join(f"{r - floor:.1e}" for r in limits["risk"]["softmax_limit"]) + ";",
              "  linear limit " + ", ".join(f"{r - floor:.1e}" for r in limits["risk"]["linear_limit"])]
    return PaperReading(text="\n".join(lines), tracking_intervals=[tuple(i) for i in soft["per_seed_interval"]],
                        moving=flagged, runs=runs, false_alarm_chance=chance, above_share=tuple(share),
                        above_up_to_1000=up_to_1000, outlasts=[int(c) for c in outlasts.sum(0)],
                        excess_slope_highs=[f.interval()[1] for f in fits])
