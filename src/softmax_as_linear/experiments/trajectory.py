r"""When each recorded run stopped moving, and whether it still moves at the end: a recorded trajectory read as a
whole, in standard errors.

A trajectory file (Figures 4 and 8) holds, for every seed, length ``L`` and activation, the held-out risk
:math:`R_t` at every record :math:`t = 0, \dots, T-1` (steps :math:`k_t`). Each record has a standard error
:math:`s_t`, measured on the held-out prompts where the file records it and otherwise inferred from the same run's
final evaluation (:func:`~softmax_as_linear.experiments.uncertainty.held_out_se`). For one run, with a multiplier
:math:`k` (default 3):

- **settled at** :math:`k_{t^*}`, the first record of the longest final stretch in which the risk never changes by
  more than :math:`k` standard errors of a change: the smallest :math:`t^*` with
  :math:`|R_i - R_j| \le k\,(s_i + s_j)` for all :math:`t^* \le i < j \le T-1`. The bound
  :math:`s_i + s_j` on the standard error of :math:`R_i - R_j` holds whatever the correlation of the two records
  (they share their held-out prompts, whose per-prompt covariance is not recorded). Equivalently, the intervals
  :math:`[R_t - k s_t, R_t + k s_t]`, :math:`t \ge t^*`, have a common point (in one dimension, pairwise overlap
  is common overlap), which is how it is computed: a reversed running maximum of :math:`R - ks` against a
  reversed running minimum of :math:`R + ks`, :math:`O(T)` per run. It compares many pairs: for a run whose risk
  does not move and whose records carry independent Gaussian errors, the chance that it is not settled from its
  first record is at most :math:`T \cdot 2(1 - \Phi(k))` (:func:`settle_false_alarm`). Where a paired change over
  a window (below) exceeds :math:`k` of its standard errors, the run changed after the window's start record, so
  :math:`t^*` is moved after it: a run still moving at the end is not settled before its last tenth.
- **fall over the last tenth, quarter and half** of training: :math:`R_{start} - R_{T-1}`, with ``start`` the last
  record at or before the window's start (:func:`~softmax_as_linear.experiments.uncertainty.window_start`), and its
  standard error: the paired one where the file stores that change scored on fresh prompts (``"changes"``,
  :func:`~softmax_as_linear.experiments.uncertainty.change_between`), otherwise the bound
  :math:`s_{start} + s_{T-1}`.
- **still moving at the end** when the fall over the last tenth exceeds :math:`k` of its standard errors in either
  direction (``descending`` or ``rising``). For a run whose risk does not move, this happens with probability at
  most :math:`2(1 - \Phi(k))` (0.27 % at :math:`k = 3`) when the standard error is exact, less with the bound:
  :func:`moving_false_alarm`.

A run whose risk is not finite at some record (a diverged run) has NaN everywhere and ``diverged`` set.

:func:`read_risks` reads arrays ``(..., T)`` of any leading shape; :func:`read_trajectories` reads a trajectory
file for every (seed, ``L``, activation); both return a :class:`TrajectoryReading` whose arrays have the leading
shape (for a file: seed ``S``, length ``nL``, activation ``nA``); :meth:`~TrajectoryReading.summary` prints one
line per run, :meth:`~TrajectoryReading.table` one seed over ``L``. Risks are :math:`R = \tfrac12 \mathrm{MSE}`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import checks, stats
from ..registry import ACTIVATIONS
from . import uncertainty

#: Fractions of training over which the fall of the risk is read; ``"tenth"`` decides whether a run still moves.
WINDOWS = {"tenth": 0.1, "quarter": 0.25, "half": 0.5}


def moving_false_alarm(k: float) -> float:
    r""":math:`2(1 - \Phi(k))`: the largest chance that a run whose risk does not move is called moving (one
    two-sided test at :math:`k` standard errors; with the unpaired bound the chance is smaller)."""
    return float(2 * stats.scipy_stats().norm.sf(checks.positive_float("k", k)))


def settle_false_alarm(k: float, n_records: int) -> float:
    r"""Bound on the chance that a run whose risk does not move, with independent Gaussian record errors of
    standard errors :math:`s_t`, is not settled from its first record: :math:`\min(1, T \cdot 2(1 - \Phi(k)))`.
    (If every :math:`|R_t - \mu| \le k s_t`, every interval :math:`[R_t - k s_t, R_t + k s_t]` contains
    :math:`\mu`; a union bound over the :math:`T` records does the rest.)"""
    n_records = checks.positive_int("n_records", n_records)
    return min(1.0, n_records * moving_false_alarm(k))


def settled_index(risk, se, k: float = 3.0) -> np.ndarray:
    r"""Index :math:`t^*` of the first record of the final settled stretch, ``(...)`` from ``risk`` and ``se``
    ``(..., T)``: the smallest :math:`t^*` such that the intervals :math:`[R_t - k s_t, R_t + k s_t]`,
    :math:`t \ge t^*`, share a point (every change after it within :math:`k(s_i + s_j)`); ``-1`` where a record is
    not finite."""
    k = checks.positive_float("k", k)
    risk, se = np.asarray(risk, dtype=float), np.asarray(se, dtype=float)
    if risk.shape != se.shape or risk.ndim < 1 or risk.shape[-1] < 2:
        raise ValueError(f"risk and se must have one shape (..., T) with T >= 2, got {risk.shape} and {se.shape}")
    finite = np.isfinite(risk).all(-1) & np.isfinite(se).all(-1)
    if np.any(se[finite] < 0):
        raise ValueError("se: standard errors must be non-negative")
    low = np.maximum.accumulate((risk - k * se)[..., ::-1], axis=-1)[..., ::-1]   # max over t' >= t of R - ks
    high = np.minimum.accumulate((risk + k * se)[..., ::-1], axis=-1)[..., ::-1]  # min over t' >= t of R + ks
    overlap = low <= high                                                         # True on a final stretch
    T = risk.shape[-1]
    # overlap is monotone in t (a suffix of a suffix overlaps): t* = T - (length of the final True run)
    first = T - overlap[..., ::-1].cumprod(-1).sum(-1)
    return np.where(finite, first, -1).astype(int)


@dataclass(frozen=True)
class TrajectoryReading:
    r"""Each run of a trajectory read as a whole. Arrays have the leading shape ``shape`` (for a file: seed,
    ``L``, activation); windows are the keys of :data:`WINDOWS`.

    - ``steps`` ``(T,)``; ``k``; ``windows``: ``{window: start step}``;
    - ``settled_index`` (int, ``-1`` for a diverged run) and ``settled_at`` (step, NaN for a diverged run);
    - ``fall``, ``fall_se``: ``{window: array}``, :math:`R_{start} - R_{end}` and its standard error;
    - ``moving``, ``descending``, ``rising``, ``diverged``: booleans (the first three False for a diverged run);
    - ``final``, ``final_se``: the last record's risk and standard error;
    - ``method``: how the standard errors were had (records; each window's change).
    """

    steps: np.ndarray
    k: float
    windows: dict
    settled_index: np.ndarray
    settled_at: np.ndarray
    fall: dict
    fall_se: dict
    moving: np.ndarray
    descending: np.ndarray
    rising: np.ndarray
    diverged: np.ndarray
    final: np.ndarray
    final_se: np.ndarray
    method: dict
    seeds: list | None = None
    lengths: list | None = None
    activations: list | None = None

    @property
    def shape(self) -> tuple:
        """The shape of the runs read, ``(S, nL, nA)``."""
        return self.settled_index.shape

    def z(self, window: str = "tenth") -> np.ndarray:
        """The fall over ``window`` in its standard errors (NaN for a diverged run)."""
        checks.one_of("window", window, tuple(WINDOWS))
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.fall[window] / self.fall_se[window]

    def index(self, seed=None, L=None, activation=None) -> tuple:
        """The array index of one run of a file reading (seed, ``L``, activation), a ``ValueError`` naming a
        missing one."""
        if self.seeds is None:
            raise ValueError("this reading has no seeds, lengths and activations: index its arrays directly")
        out = []
        for name, value, values in (("seed", seed, self.seeds), ("L", L, self.lengths),
                                    ("activation", activation, self.activations)):
            if value not in values:
                raise ValueError(f"{name}={value!r} is not in the reading (it has {values})")
            out.append(values.index(value))
        return tuple(out)

    def run(self, seed, L, activation) -> dict:
        """One run's reading as plain numbers: ``settled_at``, ``fall`` and ``z`` per window, ``moving``, ``final``."""
        i = self.index(seed, L, activation)
        return {"seed": seed, "L": L, "activation": activation, "diverged": bool(self.diverged[i]),
                "settled_at": float(self.settled_at[i]), "moving": bool(self.moving[i]),
                "descending": bool(self.descending[i]), "rising": bool(self.rising[i]),
                "final": float(self.final[i]), "final_se": float(self.final_se[i]),
                "fall": {w: float(self.fall[w][i]) for w in WINDOWS}, "z": {w: float(self.z(w)[i]) for w in WINDOWS}}

    def line(self, index: tuple) -> str:
        """One run, in words: where it settled, its falls over the last tenth and quarter in standard errors."""
        name = (f"seed {self.seeds[index[0]]}, L = {self.lengths[index[1]]}, {self.activations[index[2]]}"
                if self.seeds is not None else f"run {index}")
        if self.diverged[index]:
            return f"{name}: diverged"
        state = "still descending" if self.descending[index] else "still rising" if self.rising[index] else "not moving"
        return (f"{name}: settled at step {self.settled_at[index]:,.0f}; fall over the last tenth"
                f" {self.z('tenth')[index]:+.1f} s.e., last quarter {self.z('quarter')[index]:+.1f}: {state}")

    def table(self, seed, activations=None) -> str:
        """One seed of a file reading as a table over ``L``: per activation, the step where each run settled, its falls over the last tenth and the last quarter in standard errors, and ``moving`` flags
        (``v`` descending, ``^`` rising, ``.`` not moving, ``x`` diverged)."""
        activations = self.activations if activations is None else list(activations)
        width = max(7, len(f"{self.steps[-1]:,.0f}") + 2)
        head = f"seed {seed}, k = {self.k:g}".ljust(34) + "".join(f"{L:>{width}}" for L in self.lengths)
        rows = [head]
        for a in activations:
            idx = [self.index(seed, L, a) for L in self.lengths]
            flag = lambda i: "x" if self.diverged[i] else "v" if self.descending[i] else "^" if self.rising[i] else "."  # noqa: E731
            rows += [f"  {a:8s} settled at step".ljust(34) + "".join(f"{self.settled_at[i]:{width},.0f}" for i in idx),
                     "           fall, last tenth (s.e.)".ljust(34) + "".join(f"{self.z('tenth')[i]:+{width}.1f}" for i in idx),
                     "           last quarter (s.e.)".ljust(34) + "".join(f"{self.z('quarter')[i]:+{width}.1f}" for i in idx),
                     "           moving at the end".ljust(34) + "".join(f"{flag(i):>{width}}" for i in idx)]
        return "\n".join(rows)

    def methods(self) -> str:
        """How the standard errors were had: of the records, and of the fall over the last tenth."""
        return (f"(record s.e.: {self.method['records']};\n fall over the last tenth:"
                f" {self.method['tenth']})")

    def summary(self, seeds=None, lengths=None, activations=None) -> str:
        """One :meth:`line` per run (of a file reading: the chosen seeds, lengths and activations), then how the
        standard errors were had."""
        if self.seeds is None:
            indices = list(np.ndindex(self.shape))
        else:
            pick = lambda chosen, values: values if chosen is None else list(chosen)  # noqa: E731
            indices = [self.index(s, L, a) for s in pick(seeds, self.seeds) for L in pick(lengths, self.lengths)
                       for a in pick(activations, self.activations)]
        lines = [self.line(i) for i in indices]
        lines.append(self.methods())
        return "\n".join(lines)


def read_risks(steps, risk, se, k: float = 3.0, paired: dict | None = None, methods: dict | None = None,
               **labels) -> TrajectoryReading:
    r"""Read trajectories ``risk`` with standard errors ``se``, both ``(..., T)``, recorded at ``steps`` ``(T,)``.

    ``paired`` (optional): ``{window: (fall, se)}`` with arrays of the leading shape, the paired changes over a
    window of :data:`WINDOWS` (from the window's start record to the last record) where they were measured; the
    other windows use :math:`s_{start} + s_{end}`. ``methods``: how the standard errors were had, for the summary.
    ``labels``: ``seeds``, ``lengths``, ``activations`` of a file's axes.
    """
    k = checks.positive_float("k", k)
    steps = np.asarray(steps, dtype=float)
    risk, se = np.asarray(risk, dtype=float), np.asarray(se, dtype=float)
    if steps.ndim != 1 or risk.shape[-1:] != steps.shape or np.any(np.diff(steps) <= 0):
        raise ValueError(f"steps must be increasing with one entry per record, got {steps.shape} for risk {risk.shape}")
    first = settled_index(risk, se, k)
    diverged = first < 0
    paired = paired or {}
    windows, fall, fall_se, how = {}, {}, {}, {"records": (methods or {}).get("records", "given")}
    for name, fraction in WINDOWS.items():
        start = uncertainty.window_start(steps, fraction)
        windows[name] = int(start)
        t0 = int(np.flatnonzero(steps == start)[0])
        if name in paired:
            fall[name], fall_se[name] = (np.asarray(a, dtype=float) for a in paired[name])
            how[name] = (methods or {}).get(name, "paired")
        else:
            fall[name], fall_se[name] = risk[..., t0] - risk[..., -1], se[..., t0] + se[..., -1]
            how[name] = "unpaired bound se(start) + se(end)"
        fall[name] = np.where(diverged, np.nan, fall[name])
        fall_se[name] = np.where(diverged, np.nan, fall_se[name])
    with np.errstate(invalid="ignore"):
        for name, start in windows.items():   # a resolved change over a window: not settled before its start
            resolved = ~diverged & (np.abs(fall[name]) > k * fall_se[name])
            first = np.where(resolved, np.maximum(first, int(np.flatnonzero(steps == start)[0]) + 1), first)
        safe = np.where(diverged, 0, first)
        descending = ~diverged & (fall["tenth"] > k * fall_se["tenth"])
        rising = ~diverged & (fall["tenth"] < -k * fall_se["tenth"])
    return TrajectoryReading(
        steps=steps, k=k, windows=windows, settled_index=first,
        settled_at=np.where(diverged, np.nan, steps[safe]), fall=fall, fall_se=fall_se,
        moving=descending | rising, descending=descending, rising=rising, diverged=diverged,
        final=np.where(diverged, np.nan, risk[..., -1]),
        final_se=np.where(diverged, np.nan, se[..., -1]), method=how, **labels)


def read_trajectories(trajectories: dict, final: dict | None = None, k: float = 3.0,
                      activations=None) -> TrajectoryReading:
    r"""Read every run of a trajectory file (Figures 4 and 8): arrays ``(S, nL, nA)`` over its seeds, its lengths
    and ``activations`` (default: those the file holds, softmax first).

    ``final``: the same sweep's final-risk file (Figures 2 and 6), needed when the trajectory file does not record
    its standard errors (they are then inferred, :func:`~softmax_as_linear.experiments.uncertainty.held_out_se`).
    Paired changes stored in the file (``"changes"``) are used for the windows they cover.
    """
    if activations is None:
        activations = [a for a in ACTIVATIONS if f"{a}_per_seed" in trajectories]
    activations = [checks.one_of("activations", a, ACTIVATIONS) for a in activations]
    if not activations:
        raise ValueError("trajectories: the file holds no '<activation>_per_seed' risks")
    steps = [int(s) for s in trajectories["steps"]]
    risks, ses, paired, methods = [], [], {}, {}
    for activation in activations:
        risks.append(np.asarray(trajectories[f"{activation}_per_seed"], dtype=float))
        se, methods["records"] = uncertainty.held_out_se(trajectories, activation, final)
        ses.append(se)
    stored = {(c["from_step"], c["to_step"]) for c in (trajectories.get("changes") or {}).values()}
    for name, fraction in WINDOWS.items():
        start = uncertainty.window_start(steps, fraction)
        if (start, steps[-1]) in stored:
            changes = [uncertainty.change_between(trajectories, a, start, steps[-1], final) for a in activations]
            paired[name] = (np.stack([c["fall"] for c in changes], -1), np.stack([c["se"] for c in changes], -1))
            methods[name] = changes[0]["method"]
    return read_risks(steps, np.stack(risks, 2), np.stack(ses, 2), k, paired, methods,
                      seeds=list(trajectories["seeds"]), lengths=list(trajectories["lengths"]),
                      activations=activations)
