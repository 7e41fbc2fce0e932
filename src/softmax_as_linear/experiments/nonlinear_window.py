r"""Chapter 8's softmax layer trained with its window on a log scale, against the layer's own
optimal windows (what ``python -m softmax_as_linear reproduce nonlinear_window`` runs).

Chapter 8's sweep (:mod:`~softmax_as_linear.experiments.nonlinear`) trains the four-matrix layer, whose window, a
product of weights, grows by additive steps that slow down: its windows stop where the budget stops them. Here the same
task is trained in the weights of :mod:`~softmax_as_linear.theory.attention_optimum` (:math:`\log w`, :math:`B`,
:math:`u_y`, :math:`v`: every weight that reaches the prediction) by
:class:`~softmax_as_linear.engine.window_step.WindowStepper`, Adam at ``lr`` with a tenfold decay at three quarters of
training, from :math:`w = 1` and the zero predictor. Two stages, each trained or resumed by
:func:`~softmax_as_linear.experiments.pipeline.train_stage` with a checkpoint of its own:

- the sweep over the preset's lengths (the runs of one seed read prefixes of the same prompts);
- the window's dependence: one run per seed at
  :data:`~softmax_as_linear.experiments.presets.NONLINEAR_DEPENDENCE_LENGTH` for each (frequency scale
  :math:`\gamma`, label noise :math:`s^2`) of :data:`~softmax_as_linear.experiments.presets.NONLINEAR_DEPENDENCE`.

The result file ``nonlinear_window_<preset>.json`` holds, per seed (seed axis first, so shards join by
concatenation): the window :math:`w(t)` and the held-out risk at every record, the final weights, and the final risk
on fresh prompts (stream ``"evaluation"``) with its standard error, for both stages; and the provenance. The
readings (:func:`window_levels`, :func:`against_optima`, :func:`dependence_directions`) are computed from it:
whether each window is stationary before the decay, how its level moves after it, where it sits over the last
quarter (whether it has stopped moving there is :func:`~softmax_as_linear.experiments.window_reach.last_phase_trend`),
and how far that is from :math:`w^*(L)` of :mod:`~softmax_as_linear.experiments.nonlinear_optima`, each with a
standard error over seeds.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ..core import checks, seeding, stats
from ..engine.deep_schedule import DecaySchedule
from ..engine.train import run
from ..engine.window_step import WindowStepper, check_settings
from ..registry import PRESETS
from . import presets

#: Prompts per chunk of the final evaluation.
_EVAL_CHUNK = 256


@dataclasses.dataclass(frozen=True)
class WindowSettings(DecaySchedule):
    """One stage's settings: lengths, seeds, steps (Adam at ``lr``, divided by ``decay_factor`` at ``decay_at`` of
    training), batch size, records, held-out and final prompts, the starting window and the task (Chapter 8's,
    :data:`~softmax_as_linear.experiments.presets.NONLINEAR_TASK`, with its frequency scale and label noise)."""

    lengths: tuple[int, ...]
    seeds: tuple[int, ...]
    steps: int
    batch_size: int
    record_every: int
    held_out_prompts: int
    final_prompts: int
    lr: float = 0.05
    decay_at: float = 0.75
    decay_factor: float = 0.1
    init_window: float = 1.0
    frequency: float = presets.NONLINEAR_TASK["frequency"]
    noise_var: float = presets.NONLINEAR_TASK["noise_var"]

    def __post_init__(self):
        checks.positive_int("steps", self.steps)
        checks.positive_int("record_every", self.record_every)
        checks.int_at_least("final_prompts", self.final_prompts, 2)
        if not 0 < self.decay_at <= 1:
            raise ValueError(f"decay_at must be in (0, 1], got {self.decay_at}")
        check_settings(self.seeds, self.lengths, self.batch_size, self.lr, self.decay_factor, self.init_window,
                       self.held_out_prompts, 1e3)  # the rest, without building the stepper
        checks.positive_float("frequency", self.frequency, allow_zero=True)
        checks.positive_float("noise_var", self.noise_var, allow_zero=True)

    def task(self):
        """Chapter 8's task at this frequency scale and noise (the task of its sweep and of its optima)."""
        from .nonlinear import nonlinear_config

        return nonlinear_config("lecture", frequency=self.frequency, noise_var=self.noise_var).task()

    def stepper(self, device="cpu") -> WindowStepper:
        return WindowStepper(self.task(), self.seeds, self.lengths, self.batch_size, self.lr, self.decay_step,
                             self.decay_factor, self.init_window, self.held_out_prompts, device=device)

    def as_dict(self) -> dict:
        """Every setting, JSON-ready, with the fields a training checkpoint compares."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
        return {**out, **{k: presets.NONLINEAR_TASK[k] for k in ("d", "features", "task_var")},
                "labels": "cosine", "parametrisation": "log_window", "optimizer": "adam", "rng": "torch",
                "covariates": "sphere"}


def window_settings(preset: str = "lecture", **overrides) -> WindowSettings:
    """The sweep of ``preset`` (:data:`~softmax_as_linear.experiments.presets.NONLINEAR_WINDOW_SETTINGS`), fields
    overridden by ``overrides``."""
    checks.one_of("preset", preset, PRESETS)
    fields = {k: v for k, v in presets.NONLINEAR_WINDOW_SETTINGS[preset].items() if k != "dependence_steps"}
    return WindowSettings(**{**fields, **overrides})


def dependence_settings(preset: str = "lecture", seeds: tuple[int, ...] | None = None) -> list[WindowSettings]:
    """The dependence stage's settings, one per (frequency scale, noise) of
    :data:`~softmax_as_linear.experiments.presets.NONLINEAR_DEPENDENCE`, at one length."""
    L = presets.NONLINEAR_DEPENDENCE_LENGTH[preset]
    steps = presets.NONLINEAR_WINDOW_SETTINGS[preset]["dependence_steps"]
    extra = {} if seeds is None else {"seeds": tuple(seeds)}
    return [window_settings(preset, lengths=(L,), steps=steps, frequency=gamma, noise_var=s2, **extra)
            for gamma, s2 in presets.NONLINEAR_DEPENDENCE]


def train_windows(settings: WindowSettings, device="cpu", checkpoint=None, should_stop=None, progress: bool = False,
                  checkpoint_every: int = 1000, checkpoint_seconds: float = 0.0):
    """Train one stage with the engine's loop; returns ``(stepper, records)`` (the stepper holds the last weights)."""
    stepper = settings.stepper(device)
    records = run(stepper, settings.steps, settings.record_steps(), config=settings, checkpoint=checkpoint,
                  checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds, progress=progress,
                  should_stop=should_stop)
    return stepper, records


def stage_readings(stepper: WindowStepper, records, settings: WindowSettings) -> dict:
    """One trained stage, per seed (seed axis first): ``w`` and ``held_out`` ``(S, nL, T)`` at the records
    ``steps`` ``(T,)``, ``held_out_se``, the final ``theta`` ``(S, nL, p)``, ``risk`` and ``risk_se`` ``(S, nL)`` on
    ``final_prompts`` fresh prompts of each seed's stream ``"evaluation"`` (the run of length :math:`L` reads the
    first :math:`L` tokens), ``diverged_at`` ``(S, nL)``; a diverged run is NaN in every reading."""
    kept = records.up_to(records.last_step)
    theta = kept["params"]["theta"][:, :, 0]  # (S, nL, T, p)
    generators = [seeding.generator(seed, "evaluation", max(settings.lengths)) for seed in settings.seeds]
    losses, remaining = [], settings.final_prompts
    with torch.no_grad():
        while remaining > 0:
            n = min(_EVAL_CHUNK, remaining)
            batch = stepper.prompts(n, generators)
            losses.append(stepper.losses(*batch).double()[:, :, 0])
            remaining -= n
    losses = torch.cat(losses, -1).cpu().numpy()  # (S, nL, n)
    diverged_at = stepper.diverged_at[..., 0].cpu().numpy()
    diverged = diverged_at >= 0  # its final risk is NaN, as its records are (not the risk of the weights it stopped at)
    return {"steps": [int(s) for s in kept["steps"]], "w": np.exp(theta[..., 0]),
            "held_out": kept["eval_risk"][:, :, 0],
            "held_out_se": kept["eval_sd"][:, :, 0] / math.sqrt(settings.held_out_prompts),
            "theta": theta[:, :, -1], "risk": np.where(diverged, np.nan, losses.mean(-1)),
            "risk_se": np.where(diverged, np.nan, losses.std(-1, ddof=1) / math.sqrt(losses.shape[-1])),
            "diverged_at": diverged_at}


# Readings ----------------------------------------------------------------------------------------------------------

def window_levels(w: np.ndarray, steps, total: int) -> dict:
    r"""Where each run's window sits in the three phases after the first quarter of training: the geometric means of
    :math:`w` over the records in :math:`(T/4, T/2]` and :math:`(T/2, 3T/4]` (both at the full learning rate) and
    :math:`(3T/4, T]` (after the decay), for ``w`` ``(S, n, T)`` recorded at ``steps``; ``drift`` :math:`= \log`
    (second / first), the change of the level at the full rate (near 0 for a stationary window), and ``settle``
    :math:`= \log` (third / second). Each ``(S, n)``, with ``*_mean`` and ``*_se`` over seeds ``(n,)``."""
    steps, log_w = np.asarray(steps), np.log(np.asarray(w, dtype=float))
    phases = [(steps > a * total) & (steps <= b * total) for a, b in ((0.25, 0.5), (0.5, 0.75), (0.75, 1.0))]
    if not all(p.any() for p in phases):
        raise ValueError("steps must hold records in each quarter after the first (record more often)")
    early, late, final = (log_w[..., p].mean(-1) for p in phases)
    out = {"w_early": np.exp(early), "w_late": np.exp(late), "w_final": np.exp(final), "drift": late - early,
           "settle": final - late, "log_w_final": final}
    for key in ("drift", "settle", "log_w_final"):
        out[key + "_mean"], out[key + "_se"] = stats.mean_se_along(out[key], axis=0)
    return out


def against_optima(data: dict, optima: dict) -> dict:
    r"""The last-quarter windows and final risks of the sweep against the layer's optimum at every length both files
    hold: per length, the trained :math:`\overline{\log w}` over seeds and its standard error, :math:`\log w^*` and its
    standard error over replicates, their difference, its standard error and z; the trained final risk (mean over
    seeds) minus the optimum's held-out risk, with the standard error of the difference (seeds and replicates)."""
    per = data["per_seed"]
    levels = window_levels(per["w"], data["steps"], data["steps"][-1])
    summary = optima["summary"]["softmax"]
    rows = []
    for i, L in enumerate(data["lengths"]):
        if L not in optima["lengths"]:
            continue
        j = optima["lengths"].index(L)
        trained, trained_se = levels["log_w_final_mean"][i], levels["log_w_final_se"][i]
        best, best_se = summary["log_w"][j], summary["log_w_se"][j]
        risk, risk_se = stats.mean_se_along(np.asarray(per["risk"], dtype=float)[:, i], axis=0)
        diff_se = math.hypot(trained_se, best_se)
        rows.append({"L": L, "w_trained": math.exp(trained), "log_w_trained": trained, "log_w_trained_se": trained_se,
                     "w_optimum": math.exp(best), "log_w_optimum": best, "log_w_optimum_se": best_se,
                     "log_ratio": trained - best, "log_ratio_se": diff_se, "z": (trained - best) / diff_se,
                     "risk_trained": float(risk), "risk_optimum": summary["held_out"][j],
                     "excess_risk": float(risk) - summary["held_out"][j],
                     "excess_risk_se": math.hypot(float(risk_se), summary["held_out_se"][j])})
    return {"rows": rows, "drift": levels["drift"], "drift_mean": levels["drift_mean"], "drift_se": levels["drift_se"],
            "settle_mean": levels["settle_mean"], "settle_se": levels["settle_se"]}


def dependence_directions(data: dict) -> dict:
    r"""Collins et al.'s directions on the trained dependence runs: the last-quarter :math:`\log w` per setting (mean
    and standard error over seeds), and the paired change between settings that differ in one of :math:`\gamma` or
    :math:`s^2` (the same seed's runs share nothing but the seed's streams, so the change's standard error is over
    seeds), signed so that a positive z is the expected direction (narrower, larger :math:`w`, for a larger
    :math:`\gamma`; wider for more noise)."""
    dep = data["dependence"]
    levels = window_levels(data["per_seed"]["dependence"]["w"], dep["steps"], dep["steps"][-1])
    settings = [tuple(s) for s in dep["settings"]]
    base_gamma, base_s2 = presets.NONLINEAR_TASK["frequency"], presets.NONLINEAR_TASK["noise_var"]
    table = [{"frequency": g, "noise_var": s2, "w": math.exp(levels["log_w_final_mean"][k]),
              "log_w": float(levels["log_w_final_mean"][k]), "log_w_se": float(levels["log_w_final_se"][k]),
              "drift": float(levels["drift_mean"][k]), "drift_se": float(levels["drift_se"][k])}
             for k, (g, s2) in enumerate(settings)]
    directions = []
    for name, sign, fixed in (("frequency", +1, ("noise_var", base_s2)), ("noise_var", -1, ("frequency", base_gamma))):
        idx = sorted((k for k, row in enumerate(table) if row[fixed[0]] == fixed[1]), key=lambda k: table[k][name])
        for a, b in zip(idx, idx[1:]):
            change = levels["log_w_final"][:, b] - levels["log_w_final"][:, a]
            mean, se = stats.mean_se_along(change, axis=0)
            directions.append({"setting": name, "from": table[a][name], "to": table[b][name], "expected_sign": sign,
                               "log_change": float(mean), "se": float(se), "z": float(sign * mean / se)})
    return {"length": dep["length"], "table": table, "directions": directions}


__all__ = ["WindowSettings", "against_optima", "dependence_directions", "dependence_settings",
           "stage_readings", "train_windows", "window_levels", "window_settings"]
