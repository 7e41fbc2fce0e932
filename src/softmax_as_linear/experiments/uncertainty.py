r"""Standard errors of the risks recorded along training, and of their changes: measured, inferred from the
run's own final evaluation, or paired on fresh prompts.

A held-out risk is a mean of ``n`` per-prompt losses :math:`\ell_i = \tfrac12(\hat y_i - y_i)^2`; its standard
error is :math:`\mathrm{sd}(\ell)/\sqrt n`. The per-prompt losses of a trained run are far from the
:math:`\tfrac12\chi^2_1`-like spread of Gaussian residuals (relative standard deviation :math:`\sqrt2`): their
relative standard deviation is measured, never assumed.

- :func:`relative_sd`: :math:`\mathrm{sd}(\ell)/R` of each run's final risk, from its final evaluation
  (``risk_se * sqrt(final_prompts) / risk``);
- :func:`held_out_se`: the standard error of every held-out risk of a trajectory file, measured when the file
  records it, otherwise inferred from the relative standard deviation of the same run's final evaluation;
- :func:`record_change`: how much a run's risk fell between two records, both parameter sets scored on the same
  fresh prompts (stream ``"analysis"`` of :mod:`~softmax_as_linear.core.seeding`), with its paired standard error;
- :func:`trajectory_changes`: those changes over the last half, quarter and tenth of training, as stored in
  the trajectory figures' files;
- :func:`change_between`: the fall of the held-out risk between two records of a trajectory file, paired when the
  file stores it, otherwise with the bound :math:`\mathrm{se}_1 + \mathrm{se}_2`, valid whatever the correlation.

Risks are :math:`R = \tfrac12 \mathrm{MSE}`. Arrays have axes seed ``S``, length ``nL``, (activation ``nA``), record
``T``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core import checks, seeding
from ..core.devices import resolve_device
from ..engine.sweep import TrainResult
from ..registry import ACTIVATIONS
from ..theory.models import predict_model

#: Fractions of training over which :func:`trajectory_changes` measures the fall of the risk.
WINDOWS = {"half": 0.5, "quarter": 0.25, "tenth": 0.1}


def _rows(data: dict, key: str, seeds, lengths) -> np.ndarray:
    """``data[key]`` ``(S, nL, ...)`` reordered to ``seeds`` and ``lengths`` (a ``ValueError`` if one is missing)."""
    missing = [s for s in seeds if s not in data["seeds"]] + [L for L in lengths if L not in data["lengths"]]
    if missing:
        raise ValueError(f"{key}: seeds or lengths {missing} are not in the file")
    values = np.asarray(data[key], dtype=float)
    values = values[[data["seeds"].index(s) for s in seeds]]
    return values[:, [data["lengths"].index(L) for L in lengths]]


def relative_sd(final: dict, activation: str) -> np.ndarray:
    r"""``(S, nL)`` relative standard deviation :math:`\mathrm{sd}(\ell)/R` of the per-prompt losses of each run's final
    risk, ``risk_se * sqrt(final_prompts) / risk``, from a final-risk file (Figures 2 and 6 with a final evaluation)."""
    checks.one_of("activation", activation, ACTIVATIONS)
    key = f"{activation}_se_per_seed"
    if key not in final or "final_prompts" not in final:
        raise ValueError(f"final must be a final-risk file with a final evaluation ({key!r} and 'final_prompts')")
    risk = np.asarray(final[f"{activation}_per_seed"], dtype=float)
    return np.asarray(final[key], dtype=float) * math.sqrt(final["final_prompts"]) / risk


def eval_prompts_of(trajectories: dict) -> int:
    """Size of the held-out set behind a trajectory file's risks."""
    if "eval_prompts" in trajectories:
        return int(trajectories["eval_prompts"])
    try:
        return int(trajectories["provenance"]["settings"]["eval_prompts"])
    except (KeyError, TypeError):
        raise ValueError("trajectories: the file says neither 'eval_prompts' nor its provenance settings") from None


def held_out_se(trajectories: dict, activation: str, final: dict | None = None) -> tuple[np.ndarray, str]:
    r"""Standard error ``(S, nL, T)`` of every held-out risk of a trajectory file (Figures 4 and 8), and how it was had.

    When the file records ``<activation>_se_per_seed`` (the measured :math:`\mathrm{sd}(\ell)/\sqrt n` of each
    record), that. Otherwise, from ``final`` (the same sweep's final-risk file): the record's risk times the relative
    standard deviation that the final evaluation measured for the same run, over :math:`\sqrt n`. The latter assumes
    that the relative spread of the per-prompt losses at a record is that of the final parameters: close for the
    records of a run that has settled, a guess for the early ones.
    """
    checks.one_of("activation", activation, ACTIVATIONS)
    risk = np.asarray(trajectories[f"{activation}_per_seed"], dtype=float)
    key = f"{activation}_se_per_seed"
    if key in trajectories and np.isfinite(np.asarray(trajectories[key], dtype=float)).any():
        return np.asarray(trajectories[key], dtype=float), "measured on the held-out prompts"
    if final is None:
        raise ValueError(f"trajectories has no {key!r}: pass final, the same sweep's final-risk file")
    rel = _rows({**final, f"{activation}_rel": relative_sd(final, activation)}, f"{activation}_rel",
                trajectories["seeds"], trajectories["lengths"])
    n = eval_prompts_of(trajectories)
    return (risk * rel[:, :, None] / math.sqrt(n),
            "inferred: the relative spread of the per-prompt losses measured by the final evaluation")


def record_change(result: TrainResult, start_step: int, end_step: int, n_prompts: int = 20_000, lengths=None,
                  device="cpu", dtype=torch.float32) -> dict:
    r"""Fall of every run's risk from record ``start_step`` to record ``end_step``, paired on fresh prompts.

    For each seed and ``L``, ``n_prompts`` fresh prompts (stream ``"analysis"`` of
    :mod:`~softmax_as_linear.core.seeding` at ``(seed, L)``) score the run's parameters at both records, for both
    activations; the fall :math:`\overline{\ell(\theta_{start}) - \ell(\theta_{end})}` and its standard error are
    those of the per-prompt differences, so the noise shared by the two records cancels.

    Returns ``{"from_step", "to_step", "n_prompts", "lengths", "seeds", "<activation>" (S, nL),
    "<activation>_se" (S, nL)}`` as lists (NaN where the run diverged before ``end_step``).
    """
    cfg = result.config
    steps = [int(s) for s in result.steps]
    for name, step in (("start_step", start_step), ("end_step", end_step)):
        if step not in steps:
            raise ValueError(f"{name}={step!r} is not a record step of the sweep")
    if not start_step < end_step:
        raise ValueError(f"start_step must come before end_step, got {start_step} and {end_step}")
    n_prompts = checks.int_at_least("n_prompts", n_prompts, 2)
    lengths = list(cfg.lengths) if lengths is None else list(lengths)
    for L in lengths:
        if L not in cfg.lengths:
            raise ValueError(f"lengths: L={L} is not among the sweep's lengths {cfg.lengths}")
    device = resolve_device(device)
    task = cfg.task()
    k0, k1 = steps.index(start_step), steps.index(end_step)
    U_all, V_all = result.uv()
    out = {"from_step": int(start_step), "to_step": int(end_step), "n_prompts": n_prompts, "lengths": lengths,
           "seeds": list(cfg.seeds)}
    fall = np.full((len(cfg.seeds), len(lengths), len(cfg.models)), np.nan)
    fall_se = np.full_like(fall, np.nan)
    for s, seed in enumerate(cfg.seeds):
        for j, L in enumerate(lengths):
            l = cfg.lengths.index(L)
            generator = seeding.generator(seed, "analysis", L, device=device)
            batch = task.sample(n_prompts, L, generator, dtype=dtype, device=device)
            for a, activation in enumerate(cfg.models):
                if result.diverged[s, l, a] and result.diverged_at[s, l, a] <= end_step:
                    continue
                losses = []
                for k in (k0, k1):
                    U = torch.as_tensor(np.asarray(U_all[s, l, a, k]), dtype=dtype, device=device)
                    V = torch.as_tensor(np.asarray(V_all[s, l, a, k]), dtype=dtype, device=device)
                    prediction = predict_model(activation, batch, task, U, V)
                    losses.append(0.5 * (prediction - batch.target).double() ** 2)
                difference = (losses[0] - losses[1]).cpu().numpy()
                fall[s, j, a] = difference.mean()
                fall_se[s, j, a] = difference.std(ddof=1) / math.sqrt(n_prompts)
    for a, activation in enumerate(cfg.models):
        out[activation] = fall[:, :, a].tolist()
        out[f"{activation}_se"] = fall_se[:, :, a].tolist()
    return out


def window_start(steps, fraction: float) -> int:
    """The last record step at or before the start of the last ``fraction`` of training (so that the window from
    it to the end covers at least that fraction)."""
    steps = np.asarray(steps)
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
    if steps.size < 2:
        raise ValueError("steps: at least two records are needed")
    return int(steps[np.searchsorted(steps, steps[-1] * (1 - fraction) + 1e-9, side="right") - 1])


def trajectory_changes(result: TrainResult, lengths=None, n_prompts: int = 20_000, device="cpu") -> dict:
    """:func:`record_change` over the last half, quarter and tenth of training (:data:`WINDOWS`), keyed by window."""
    end = int(result.steps[-1])
    return {name: record_change(result, window_start(result.steps, fraction), end, n_prompts, lengths, device)
            for name, fraction in WINDOWS.items()}


def change_between(trajectories: dict, activation: str, start_step: int, end_step: int,
                   final: dict | None = None) -> dict:
    r"""Fall of the risk of every run of a trajectory file from ``start_step`` to ``end_step``, with a standard error.

    If the file stores a paired change for these two records (``trajectories["changes"]``, written by the
    reproduction from :func:`trajectory_changes`), that: fresh prompts, paired. Otherwise the held-out risks'
    difference :math:`R_{start} - R_{end}`, whose two terms share their prompts but whose per-prompt covariance was
    not recorded; its standard error is then bounded by :math:`\mathrm{se}_{start} + \mathrm{se}_{end}` (valid
    for any correlation; :func:`held_out_se` for the two terms).

    Returns ``{"fall" (S, nL), "se" (S, nL), "method", "from_step", "to_step"}``.
    """
    checks.one_of("activation", activation, ACTIVATIONS)
    steps = [int(s) for s in trajectories["steps"]]
    for name, step in (("start_step", start_step), ("end_step", end_step)):
        if step not in steps:
            raise ValueError(f"{name}={step!r} is not a record step of the file")
    for change in (trajectories.get("changes") or {}).values():
        if change["from_step"] == start_step and change["to_step"] == end_step:
            fall = _rows(change, activation, trajectories["seeds"], trajectories["lengths"])
            se = _rows(change, f"{activation}_se", trajectories["seeds"], trajectories["lengths"])
            return {"fall": fall, "se": se, "from_step": start_step, "to_step": end_step,
                    "method": f"paired: both records scored on {change['n_prompts']:,} fresh prompts"}
    risk = np.asarray(trajectories[f"{activation}_per_seed"], dtype=float)
    se, how = held_out_se(trajectories, activation, final)
    k0, k1 = steps.index(start_step), steps.index(end_step)
    return {"fall": risk[:, :, k0] - risk[:, :, k1], "se": se[:, :, k0] + se[:, :, k1],
            "from_step": start_step, "to_step": end_step,
            "method": f"unpaired bound se(start) + se(end) on the held-out prompts; standard errors {how}"}
