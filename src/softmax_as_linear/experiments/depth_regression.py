r"""Chapter 7's experiment: in-context regression with one and two attention layers, against the references.

One sweep (:class:`DepthSettings`, presets in :data:`~softmax_as_linear.experiments.presets.DEPTH_SETTINGS`) trains,
for every seed and prompt length :math:`L`, one- and two-layer softmax and normalised linear attention
(:class:`~softmax_as_linear.engine.deep.DeepStepper` columns ``(activation, K)``) from the same block start and on the
same batches, through the engine's loop (:func:`~softmax_as_linear.engine.train.run`), with a late step decay
(:class:`~softmax_as_linear.engine.deep_schedule.DecayedDeepStepper`). Read from it (:func:`depth_readings`):

- final risks of the four models on fresh prompts (the same prompts for the four, so differences are paired), with
  per-seed standard errors, and the paired differences that answer the chapter's questions: the second layer's
  effect for each activation, softmax minus linear at each depth;
- convergence over the whole run: the held-out risk at every record, and the paired fall of the risk over the last
  half, quarter and tenth of training (earlier records scored on the same fresh prompts as the final weights); whether
  a run still moves at the end is read from its records after the step decay by the stationarity test of
  :mod:`~softmax_as_linear.experiments.trajectory` (:func:`read_stages`);
- the toolkit at the trained weights (:func:`cross_evaluation`): each trained linear model's weights run through
  the softmax network, its excess risk and the mean-square output gap between the two networks;
- the warm stage (:func:`train_warm`, :func:`warm_readings`): two-layer softmax attention trained again from the
  trained two-layer linear weights (the same network at infinite prompt), scored on the same fresh prompts; and its
  equal-budget control, the same stage from the block-start two-layer softmax weights (``source="softmax_2"``);
- references that know nothing of the trainer: the best one-layer linear attention :math:`R^*_{\mathrm{lin}}(L)`,
  the :math:`L`-Bayes (ridge) risk, and two steps of preconditioned gradient descent with the best preconditioners
  (:mod:`~softmax_as_linear.theory.preconditioned_gd`).

Arrays with a seed axis are under ``"per_seed"`` (so shards merge by concatenation); :func:`depth_summary` turns a
result into means over seeds with standard errors over seeds and log-log slopes in :math:`L`. Risks are
:math:`R = \tfrac12\mathrm{MSE}`.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ..core import checks, seeding
from ..core.artifacts import jsonable
from ..core.stats import loglog_slope, mean_se_along
from ..engine.deep_schedule import (
    DECAY_AT,
    DECAY_FACTOR,
    DEPTH_MODELS,
    FALL_FRACTIONS,
    DecayedDeepStepper,
    DecaySchedule,
    DeepSweepSettings,
)
from ..engine.train import run
from ..registry import PRESETS
from ..theory.preconditioned_gd import best_preconditioners
from ..theory.regression import RegressionTask
from ..theory.risks import bayes_risk, optimal_linear_risk

#: The names in result files of the four models of the sweep
#: (:data:`~softmax_as_linear.engine.deep_schedule.DEPTH_MODELS`, one column each).
MODEL_NAMES = ("softmax_1", "linear_1", "softmax_2", "linear_2")
#: Paired differences read from the final evaluation: name -> (model, minus model).
DIFFERENCES = {"second_layer_softmax": ("softmax_2", "softmax_1"), "second_layer_linear": ("linear_2", "linear_1"),
               "softmax_minus_linear_1": ("softmax_1", "linear_1"), "softmax_minus_linear_2": ("softmax_2", "linear_2")}
_PROMPTS_PER_CHUNK = 1024


@dataclasses.dataclass(frozen=True)
class DepthSettings(DeepSweepSettings):
    """Every setting of a Chapter 7 regression sweep (the task is Chapter 4's, isotropic, ``d = 5``, ``s^2 = 0.1``);
    checks, training configuration and checkpoint fields shared with Chapter 8's second layer
    (:class:`~softmax_as_linear.engine.deep_schedule.DeepSweepSettings`)."""

    lengths: tuple[int, ...]
    seeds: tuple[int, ...]
    steps: int
    batch_size: int
    lr: float
    record_every: int
    held_out_prompts: int
    final_prompts: int
    pgd_samples: int
    bayes_samples: int
    d: int = 5
    noise_var: float = 0.1
    alpha: float = 0.3
    optimizer: str = "adam"
    decay_at: float = DECAY_AT
    decay_factor: float = DECAY_FACTOR

    RECORDED = {"rng": "torch", "covariates": "gaussian"}

    def check_own(self) -> None:
        checks.int_at_least("pgd_samples", self.pgd_samples, 2)
        checks.int_at_least("bayes_samples", self.bayes_samples, 2)
        if sorted(set(self.lengths)) != list(self.lengths):
            raise ValueError(f"lengths must be increasing, got {self.lengths}")

    def task(self) -> RegressionTask:
        return RegressionTask.isotropic(d=self.d, noise_var=self.noise_var)


def depth_settings(preset: str, **overrides) -> DepthSettings:
    """The :class:`DepthSettings` of a preset (``"paper"`` for a GPU, ``"lecture"`` for a 2-core CPU, ``"smoke"``),
    with ``overrides`` (for example ``seeds=(327, 0)``)."""
    from .presets import DEPTH_SETTINGS

    checks.one_of("preset", preset, PRESETS)
    return DepthSettings(**{**DEPTH_SETTINGS[preset], **overrides})


def train_depth(settings: DepthSettings, device="cpu", checkpoint=None, should_stop=None, progress: bool = False,
                checkpoint_every: int = 1000, checkpoint_seconds: float = 0.0):
    """Train the sweep with the engine's loop; returns ``(stepper, records)`` (the stepper holds the last weights)."""
    stepper = DecayedDeepStepper(settings.deep_config(), settings.decay_step, settings.decay_factor, device)
    records = run(stepper, settings.steps, settings.record_steps(), config=settings, checkpoint=checkpoint,
                  checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds, progress=progress,
                  should_stop=should_stop)
    return stepper, records


def _losses_with(stepper, U, v, batch) -> torch.Tensor:
    """Per-prompt losses ``(S, nL, nA, B)`` of the stepper's model with the weights ``U``, ``v``, in float64. A diverged
    run's weights are NaN (:func:`final_weights`, the records), and so are its losses."""
    with torch.no_grad():
        return stepper.losses(*batch, U=U, v=v).double()


def final_weights(stepper) -> tuple[torch.Tensor, torch.Tensor]:
    """The stepper's last ``U`` ``(S, nL, nA, K, D, D)`` and ``v`` ``(S, nL, nA, K, D)``, NaN for a diverged run (as its
    records are): a diverged run stays diverged in every reading."""
    dead = ~stepper.alive
    U = stepper.U.detach().masked_fill(dead[..., None, None, None], float("nan"))
    v = stepper.v.detach().masked_fill(dead[..., None, None], float("nan"))
    return U, v


def deep_final_evaluation(stepper, records, settings: DepthSettings) -> dict:
    r"""Risks of the last weights and of the records at the fall fractions, on ``final_prompts`` fresh prompts per
    seed (the ``"evaluation"`` stream of the seed at the longest length; the run of length ``L`` reads their first
    ``L`` tokens), every model and record on the same prompts.

    Returns ``risk``, ``risk_se`` ``{model: (S, nL)}``; ``difference``, ``difference_se`` ``{name: (S, nL)}`` for
    :data:`DIFFERENCES`; ``fall``, ``fall_se`` ``{fraction: {model: (S, nL)}}``, the risk at the record of
    ``DepthSettings.fall_step`` minus the final risk (positive: still descending).
    """
    cfg = stepper.cfg
    last = records.last_step
    weights = {"final": final_weights(stepper)}
    history_U, history_v = (torch.as_tensor(records.history[k]) for k in ("U", "v"))
    for fraction in FALL_FRACTIONS:
        step = (settings.fall_step(fraction) * last // settings.steps if last < settings.steps
                else settings.fall_step(fraction))
        k = min(range(len(records.steps)), key=lambda i: abs(records.steps[i] - step))
        weights[fraction] = history_U[:, :, :, k], history_v[:, :, :, k]
    generators = [seeding.generator(seed, "evaluation", max(cfg.lengths)) for seed in cfg.seeds]
    losses = {key: [] for key in weights}
    remaining = settings.final_prompts
    while remaining > 0:
        n = min(_PROMPTS_PER_CHUNK, remaining)
        batch = stepper.prompts(n, generators)
        for key, (U, v) in weights.items():
            losses[key].append(_losses_with(stepper, U, v, batch))
        remaining -= n
    losses = {key: torch.cat(parts, dim=-1) for key, parts in losses.items()}  # (S, nL, nA, n)
    final = losses["final"]
    n = final.shape[-1]

    out = {"n_prompts": n, "risk": {}, "risk_se": {}, "difference": {}, "difference_se": {}, "fall": {},
           "fall_se": {}}
    index = {name: a for a, name in enumerate(MODEL_NAMES)}
    for name, a in index.items():
        out["risk"][name], out["risk_se"][name] = mean_se_along(final[:, :, a])
    for name, (first, second) in DIFFERENCES.items():
        out["difference"][name], out["difference_se"][name] = mean_se_along(
            final[:, :, index[first]] - final[:, :, index[second]])
    for fraction in FALL_FRACTIONS:
        key = str(fraction)
        out["fall"][key], out["fall_se"][key] = {}, {}
        for name, a in index.items():
            out["fall"][key][name], out["fall_se"][key][name] = mean_se_along(
                losses[fraction][:, :, a] - final[:, :, a])
    return out


def cross_evaluation(stepper, settings: DepthSettings, n_prompts: int | None = None) -> dict:
    r"""The toolkit at the trained weights: each trained *linear* model's weights :math:`\theta` run through the
    softmax network of the same depth, on fresh prompts (the ``"analysis"`` stream of the seed at the longest length).

    Chapters 2 and 3 say that at fixed weights the finite-:math:`L` softmax network approaches the linear one as
    :math:`L` grows (centred tokens, Exercise 7.2), with a mean-square output gap
    :math:`E_L = \mathbb{E}(\hat y_{\mathrm{soft}}
    - \hat y_{\mathrm{lin}})^2` of order :math:`1/L` in the light regime. Returns, for ``K = 1, 2`` (``{"1": ..., "2":
    ...}``, arrays ``(S, nL)``): ``softmax_risk`` (the softmax network at :math:`\theta`), ``linear_risk``,
    ``excess`` (their paired difference) with standard errors, and ``output_gap`` :math:`E_L` with its standard
    error. ``n_prompts`` defaults to a quarter of ``final_prompts``.
    """
    from ..theory.depth import deep_forward_unchecked

    cfg = stepper.cfg
    n_prompts = (max(2, settings.final_prompts // 4) if n_prompts is None
                 else checks.int_at_least("n_prompts", n_prompts, 2))
    U, v = final_weights(stepper)
    V = torch.zeros_like(U)
    V[..., -1, :] = v
    index = {name: a for a, name in enumerate(MODEL_NAMES)}
    generators = [seeding.generator(seed, "analysis", max(cfg.lengths)) for seed in cfg.seeds]
    pieces = {K: {"soft": [], "lin": [], "gap": []} for K in (1, 2)}
    remaining = n_prompts
    with torch.no_grad():
        while remaining > 0:
            n = min(_PROMPTS_PER_CHUNK, remaining)
            tokens, query, target = stepper.prompts(n, generators)
            for K in (1, 2):
                a = index[f"linear_{K}"]
                rows = {"soft": [], "lin": [], "gap": []}
                for i, L in enumerate(cfg.lengths):
                    U_K, V_K = U[:, i, a, :K].unsqueeze(1), V[:, i, a, :K].unsqueeze(1)  # (S, 1, K, D, D)
                    soft = deep_forward_unchecked(tokens[:, :, :L], query, U_K, V_K, "softmax")[..., -1].double()
                    lin = deep_forward_unchecked(tokens[:, :, :L], query, U_K, V_K, "linear")[..., -1].double()
                    rows["soft"].append(0.5 * (soft - target.double()) ** 2)
                    rows["lin"].append(0.5 * (lin - target.double()) ** 2)
                    rows["gap"].append((soft - lin) ** 2)
                for key, value in rows.items():
                    pieces[K][key].append(torch.stack(value, dim=1))  # (S, nL, n)
            remaining -= n
    out = {}
    for K in (1, 2):
        soft, lin, gap = (torch.cat(pieces[K][key], dim=-1) for key in ("soft", "lin", "gap"))
        out[str(K)] = {}
        for name, values in (("softmax_risk", soft), ("linear_risk", lin), ("excess", soft - lin),
                             ("output_gap", gap)):
            out[str(K)][name], out[str(K)][f"{name}_se"] = mean_se_along(values)
    out["n_prompts"] = n_prompts
    return out


def depth_references(settings: DepthSettings) -> dict:
    r"""The references at every length, computed without the trainer: :math:`R^*_{\mathrm{lin}}(L)`, the
    :math:`L`-Bayes risk (with its Monte Carlo standard error), one and two steps of preconditioned gradient descent
    with the best scalar preconditioners :math:`\Gamma_k = c_k I` (for isotropic inputs the best full matrices are
    scalar up to sampling error, ``tests/theory/test_preconditioned_gd.py``), scored on independent samples."""
    task = settings.task()
    out = {"lengths": list(settings.lengths), "noise_floor": task.noise_floor(), "zero_risk": task.zero_risk(),
           "optimal_linear": [], "bayes": [], "bayes_se": [], "pgd_1": [], "pgd_1_se": [], "pgd_2": [], "pgd_2_se": [],
           "pgd_2_steps": [], "pgd_samples": settings.pgd_samples}
    for L in settings.lengths:
        out["optimal_linear"].append(optimal_linear_risk(L, task))
        b = bayes_risk(L, task, n_samples=settings.bayes_samples,
                       seed=seeding.stream_seed(seeding.REFERENCE_SEED, "bayes", L))
        out["bayes"].append(b[0])
        out["bayes_se"].append(b[1])
        for steps in (1, 2):
            best = best_preconditioners(L, task, steps, settings.pgd_samples, full=False)
            out[f"pgd_{steps}"].append(best.risk)
            out[f"pgd_{steps}_se"].append(best.risk_se)
            if steps == 2:
                out["pgd_2_steps"].append(best.preconditioners.diagonal(dim1=-2, dim2=-1).mean(-1).tolist())
    return out


def depth_readings(stepper, records, settings: DepthSettings, refs: dict | None = None) -> dict:
    """What Chapter 7 reads from a trained sweep, JSON-ready, without provenance: ``per_seed`` arrays (final
    evaluation, held-out trajectories, final weights, divergences), ``references``, ``complete``."""
    evaluation = deep_final_evaluation(stepper, records, settings)
    kept = records.up_to(records.last_step)
    per_seed = {"seeds": list(settings.seeds),
                "risk": evaluation["risk"], "risk_se": evaluation["risk_se"],
                "difference": evaluation["difference"], "difference_se": evaluation["difference_se"],
                "fall": evaluation["fall"], "fall_se": evaluation["fall_se"],
                "trajectory": {name: kept["eval_risk"][:, :, a] for a, name in enumerate(MODEL_NAMES)},
                "trajectory_se": {name: kept["eval_sd"][:, :, a] / math.sqrt(settings.held_out_prompts)
                                  for a, name in enumerate(MODEL_NAMES)},
                "U": final_weights(stepper)[0].double().cpu().numpy(),
                "v": final_weights(stepper)[1].double().cpu().numpy(),
                "diverged_at": stepper.diverged_at.cpu().numpy(), "cross": cross_evaluation(stepper, settings)}
    return {"experiment": "depth_regression", "complete": bool(records.complete), "models": list(MODEL_NAMES),
            "lengths": list(settings.lengths), "steps": [int(s) for s in kept["steps"]],
            "decay_step": settings.decay_step, "final_prompts": evaluation["n_prompts"],
            "fall_fractions": list(FALL_FRACTIONS), "per_seed": jsonable(per_seed),
            "references": refs if refs is not None else depth_references(settings)}


# Reading a result -------------------------------------------------------------------------------------------------

def depth_summary(data: dict, level: float = 0.95) -> dict:
    r"""Means over seeds with standard errors over seeds (``"mean"``, ``"se"`` ``{name: (nL,)}`` for every model and
    difference), over the seeds whose runs did not diverge (a diverged run's readings are NaN; ``"diverged"``
    ``{model: (nL,)}`` counts them; a mean of one seed has no standard error: NaN), the paired falls in standard errors
    (``"fall_z"``: ``{fraction: {model: (S, nL)}}``, NaN for a diverged run), and log-log slopes in :math:`L` of the
    softmax-minus-linear gaps at each depth, per seed and for
    the mean over seeds, with ``level`` intervals from the spread of the seeds' slopes (``"gap_slopes"``)."""
    per = data["per_seed"]
    lengths = np.asarray(data["lengths"], dtype=float)
    diverged = np.asarray(per["diverged_at"]) >= 0  # (S, nL, nA)
    out = {"lengths": data["lengths"], "seeds": per["seeds"], "mean": {}, "se": {}, "fall_z": {}, "gap_slopes": {},
           "diverged": {name: diverged[:, :, a].sum(0) for a, name in enumerate(MODEL_NAMES)}}
    for group in ("risk", "difference"):
        for name, values in per[group].items():
            out["mean"][name], out["se"][name] = mean_se_along(values, axis=0, skip_nan=True)
    for fraction, falls in per["fall"].items():
        out["fall_z"][fraction] = {name: np.asarray(f) / np.asarray(per["fall_se"][fraction][name])
                                   for name, f in falls.items()}
    for K in (1, 2):
        out["gap_slopes"][K] = seed_slopes(lengths, per["difference"][f"softmax_minus_linear_{K}"], level)
    if "warm" in data:
        out["gap_slopes"]["warm"] = seed_slopes(lengths, data["warm"]["minus"]["linear_2"], level)
    return out


def seed_slopes(lengths, values, level: float = 0.95) -> dict | None:
    """Log-log slope in ``lengths`` of every seed's row of positive ``values (S, nL)``, their mean with a Student-t
    interval at ``level`` from the spread of the seeds' slopes, and the slope of the mean over seeds; the seeds with a
    NaN (a diverged run) left out; None with fewer than three lengths, no seed left or a value that is not positive."""
    from scipy import stats as scipy_stats

    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values).all(1)]  # seeds with a diverged run left out
    if len(lengths) < 3 or len(values) == 0 or not (values > 0).all():
        return None
    S = values.shape[0]
    slopes = np.array([loglog_slope(lengths, row).slope for row in values])
    half = (scipy_stats.t.ppf(0.5 + level / 2, S - 1) * slopes.std(ddof=1) / math.sqrt(S)) if S > 1 else np.nan
    return {"per_seed": slopes, "mean": float(slopes.mean()),
            "interval": (float(slopes.mean() - half), float(slopes.mean() + half)),
            "of_mean": float(loglog_slope(lengths, values.mean(0)).slope)}



# Still moving at the end? ----------------------------------------------------------------------------------------

#: The most batch means of the stationarity test on a stage of the sweep (:func:`read_stages`).
STAGE_BATCHES = 8


def stage_window(steps, decay_step: int, batches: int = STAGE_BATCHES) -> tuple[int, int]:
    r"""How :func:`read_stages` cuts one stage's records after its step decay at ``decay_step``: the test window is
    the last :math:`1 - \mathrm{decay\_at}` of training, from the record taken at the decay (the last one at the
    full step, which :func:`~softmax_as_linear.experiments.trajectory.trend` must leave out), cut into the largest
    number of batches, at most ``batches`` and at least 4, of at least two records each, that leaves it out.
    Returns ``(batches, first step kept)``; a ``ValueError`` when the stage has too few records after its decay."""
    steps = np.asarray(steps)
    at = np.flatnonzero(steps == decay_step)
    if at.size != 1:
        raise ValueError(f"decay_step: {decay_step} is not a record step of the stage")
    n = steps.size - int(at[0])
    for m in range(checks.positive_int("batches", batches), 3, -1):
        size = n // m
        if size >= 2 and n - m * size >= 1:
            return m, int(steps[at[0] + n - m * size])
    raise ValueError(f"the stage has {n - 1} records after its decay at step {decay_step}: too few for 4 batches of 2")


def read_stages(data: dict, level: float = 0.01) -> dict:
    r"""Every run of a Chapter 7 sweep read as a whole after its step decay, by the stationarity test of
    :func:`~softmax_as_linear.experiments.trajectory.read_risks` (null hypothesis: a stationary run; error from the
    run's own scatter) over the records after the decay, batched by :func:`stage_window`: ``{"main": reading}``
    with arrays ``(S, nL, 4)`` (``activations`` the ``MODEL_NAMES``), and ``"warm"`` and ``"control"``,
    ``(S, nL, 1)``, when the sweep has its warm stage and its equal-budget control. The records' standard errors (the
    shared held-out prompts) do not enter the test."""
    from .trajectory import read_risks

    per = data["per_seed"]
    seeds, lengths = list(per["seeds"]), list(data["lengths"])
    steps = np.asarray(data["steps"])
    risk = np.stack([np.asarray(per["trajectory"][m], dtype=float) for m in MODEL_NAMES], 2)
    se = np.stack([np.asarray(per["trajectory_se"][m], dtype=float) for m in MODEL_NAMES], 2)
    batches, _ = stage_window(steps, data["decay_step"])
    out = {"main": read_risks(steps, risk, se, level, 1 - data["decay_step"] / steps[-1], batches,
                              "measured on the held-out prompts", seeds=seeds, lengths=lengths,
                              activations=list(MODEL_NAMES))}
    for name in ("warm", "control"):
        if name not in data:
            continue
        stage = data[name]
        steps = np.asarray(stage["steps"])
        decay = WarmSettings(**stage["settings"]).decay_step
        batches, _ = stage_window(steps, decay)
        out[name] = read_risks(steps, np.asarray(stage["trajectory"], dtype=float)[:, :, None], None, level,
                               1 - decay / steps[-1], batches, seeds=seeds, lengths=lengths,
                               activations=[f"softmax_2_{name}"])
    return out



# The warm start --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class WarmSettings(DecaySchedule):
    r"""A second stage of the sweep: two-layer *softmax* attention trained from the trained two-layer *linear* weights
    of each seed and length (at infinite prompt the two networks are one, Exercise 7.2), with its own step."""

    steps: int
    lr: float
    record_every: int
    decay_at: float = DECAY_AT
    decay_factor: float = DECAY_FACTOR

    def __post_init__(self):
        checks.positive_int("steps", self.steps)
        checks.positive_float("lr", self.lr)
        checks.positive_int("record_every", self.record_every)


def warm_settings(preset: str, **overrides) -> WarmSettings:
    """The :class:`WarmSettings` of a preset (:data:`~softmax_as_linear.experiments.presets.DEPTH_WARM`)."""
    from .presets import DEPTH_WARM

    checks.one_of("preset", preset, PRESETS)
    return WarmSettings(**{**DEPTH_WARM[preset], **overrides})


#: The trained models a second stage may start from: the two-layer linear weights (the warm start), or the two-layer
#: softmax weights of the block start (the equal-budget control: the same 4,000 + further steps, the same schedules).
STAGE_SOURCES = ("linear_2", "softmax_2")


class WarmCheckpointKey:
    """What a second-stage checkpoint is written for: the sweep's settings, the stage's, and the model it starts from
    (recorded only when it is not the warm start's ``linear_2``); ``seeds`` and ``steps`` (the stage's)."""

    def __init__(self, settings: DepthSettings, warm: WarmSettings, source: str = "linear_2"):
        self.settings, self.warm, self.source = settings, warm, source
        self.seeds, self.steps = settings.seeds, warm.steps

    def as_dict(self) -> dict:
        out = {**self.settings.as_dict(), "warm": dataclasses.asdict(self.warm)}
        return out if self.source == "linear_2" else {**out, "source": self.source}


def train_warm(settings: DepthSettings, warm: WarmSettings, U, v, device="cpu", checkpoint=None, should_stop=None,
               progress: bool = False, checkpoint_every: int = 1000, checkpoint_seconds: float = 0.0,
               source: str = "linear_2"):
    """Train two-layer softmax attention from the trained weights ``U (S, nL, 4, K, D, D)``, ``v (S, nL, 4, K, D)`` of
    a finished sweep's model ``source`` (:data:`STAGE_SOURCES`: ``linear_2`` for the warm start, ``softmax_2`` for the
    equal-budget control, which continues the block-start softmax runs with the warm stage's steps and schedule);
    returns ``(stepper, records)``."""
    checks.one_of("source", source, STAGE_SOURCES)
    cfg = dataclasses.replace(settings.deep_config(), models=(("softmax", 2),), lr=warm.lr)
    stepper = DecayedDeepStepper(cfg, warm.decay_step, warm.decay_factor, device)
    a = MODEL_NAMES.index(source)
    with torch.no_grad():
        stepper.U.copy_(torch.as_tensor(np.asarray(U))[:, :, a:a + 1].to(stepper.U))
        stepper.v.copy_(torch.as_tensor(np.asarray(v))[:, :, a:a + 1].to(stepper.v))
    records = run(stepper, warm.steps, warm.record_steps(), config=WarmCheckpointKey(settings, warm, source),
                  checkpoint=checkpoint, checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds,
                  progress=progress, should_stop=should_stop)
    return stepper, records


def warm_readings(stepper, records, settings: DepthSettings, warm: WarmSettings, U, v) -> dict:
    """The warm stage read on the sweep's own fresh prompts (the same as :func:`deep_final_evaluation`'s, so paired with
    the four models, whose final weights ``U``, ``v`` are the sweep's): ``risk``, ``risk_se`` ``(S, nL)``; ``minus``,
    ``minus_se`` ``{model: (S, nL)}`` (warm start minus each model); ``fall``, ``fall_se`` over the last half,
    quarter, tenth; the held-out ``trajectory``; ``complete``, ``steps``; the settings."""
    from ..engine.deep import DeepStepper

    main = DeepStepper(settings.deep_config(), stepper.device)
    weights = {"final": final_weights(stepper)}  # a diverged run: NaN, as read_stages calls it
    history_U, history_v = (torch.as_tensor(records.history[k]) for k in ("U", "v"))
    last = records.last_step
    for fraction in FALL_FRACTIONS:
        step = warm.fall_step(fraction) * last // warm.steps
        k = min(range(len(records.steps)), key=lambda i: abs(records.steps[i] - step))
        weights[fraction] = history_U[:, :, :, k], history_v[:, :, :, k]
    cfg = main.cfg
    generators = [seeding.generator(seed, "evaluation", max(cfg.lengths)) for seed in cfg.seeds]
    parts = {key: [] for key in weights}
    parts["main"] = []
    remaining = settings.final_prompts
    while remaining > 0:
        n = min(_PROMPTS_PER_CHUNK, remaining)
        batch = main.prompts(n, generators)
        parts["main"].append(_losses_with(main, torch.as_tensor(np.asarray(U)), torch.as_tensor(np.asarray(v)), batch))
        for key, (U_k, v_k) in weights.items():
            parts[key].append(_losses_with(stepper, U_k, v_k, batch))
        remaining -= n
    losses = {key: torch.cat(p, dim=-1) for key, p in parts.items()}
    final = losses["final"][:, :, 0]
    n = final.shape[-1]

    out = {"settings": dataclasses.asdict(warm), "complete": bool(records.complete),
           "steps": [int(s) for s in records.up_to(last)["steps"]], "minus": {}, "minus_se": {}, "fall": {},
           "fall_se": {}, "training_seconds": round(float(records.seconds), 1)}
    out["risk"], out["risk_se"] = mean_se_along(final)
    for a, name in enumerate(MODEL_NAMES):
        out["minus"][name], out["minus_se"][name] = mean_se_along(final - losses["main"][:, :, a])
    for fraction in FALL_FRACTIONS:
        out["fall"][str(fraction)], out["fall_se"][str(fraction)] = mean_se_along(losses[fraction][:, :, 0] - final)
    kept = records.up_to(last)
    out["trajectory"] = kept["eval_risk"][:, :, 0]
    return jsonable(out)


__all__ = ["DEPTH_MODELS", "DIFFERENCES", "DepthSettings", "MODEL_NAMES", "STAGE_BATCHES", "STAGE_SOURCES",
           "WarmCheckpointKey", "WarmSettings", "cross_evaluation", "depth_readings",
           "depth_settings", "depth_summary", "deep_final_evaluation", "read_stages",
           "depth_references", "seed_slopes", "stage_window", "train_depth", "train_warm", "warm_readings",
           "warm_settings"]
