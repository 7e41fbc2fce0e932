r"""Chapter 7's tracking experiment: finite-prompt deep training against the trained infinite-prompt deep network.

For each depth :math:`K`, a :class:`~softmax_as_linear.engine.deep.DeepStepper` trains the K-layer network at every
prompt length :math:`L` and a :class:`~softmax_as_linear.engine.deep_limit.DeepLimitStepper` trains its infinite-prompt
limit (the Gaussian recursion, no prompt), from the same weights and on the same :math:`(w, x_q, y_q)` at every step,
both through the engine's loop :func:`~softmax_as_linear.engine.train.run`. Read along the whole trajectory
(:func:`tracking_readings`), at every record :math:`t` (flow time :math:`t = 2\,\mathrm{lr}\,k` with SGD):

- ``distance``: :math:`\delta_L(t) = \|\theta_L(t) - \theta_\infty(t)\|^2`, summed over every :math:`U_\ell` and
  :math:`v_\ell`;
- ``output_gap``: :math:`\mathbb{E}(\hat y_L(\theta_L(t)) - \hat y_\infty(\theta_\infty(t)))^2` on the held-out prompts,
  split into ``sampling`` :math:`\mathbb{E}(\hat y_L(\theta_L) - \hat y_\infty(\theta_L))^2` (the finite prompt at the
  finite run's own weights, Section 7.5's :math:`E_L`) and ``drift``
  :math:`\mathbb{E}(\hat y_\infty(\theta_L) - \hat y_\infty(\theta_\infty))^2` (how differently the two runs predict
  once the prompt is infinite: blind to the directions the infinite-prompt model does not see);
- ``risk_gap``: :math:`|R_L(\theta_L(t)) - R_\infty(\theta_\infty(t))|` on the same held-out prompts;

their suprema over the trajectory, and (:func:`tracking_slopes`) the log-log slope of each supremum in :math:`L`, per
seed with its own interval and as the mean of the seeds' slopes with a Student-t interval from their spread (as
Chapter 6 does for one layer). A diverged run gives NaN and is counted in ``diverged``.

The settings (:class:`TrackingSettings`, :data:`TRACKING_PRESETS`) keep the lecture preset to a few tens of seconds on a
2-core CPU; softmax costs :math:`O((K - 1) L^2 D)` per prompt, so the longest :math:`L` sets the time.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..core import checks
from ..core.devices import resolve_device
from ..core.provenance import device_name, provenance, utc_now
from ..core.stats import loglog_slope, mean_interval
from ..engine.deep import DeepConfig, DeepStepper
from ..engine.deep_limit import DeepLimitStepper
from ..engine.train import run
from ..registry import ACTIVATIONS
from ..theory.deep_limit import deep_limit_prediction
from ..theory.depth import deep_forward_unchecked
from ..theory.regression import RegressionTask


@dataclass(frozen=True)
class TrackingSettings:
    """Settings of the tracking experiment: task dimension ``d`` (isotropic, Gaussian), seeds, prompt lengths, depths,
    activations, SGD (``lr``, ``steps``, ``batch_size``), ``records`` records after step 0, the block start's scale
    ``alpha`` and the held-out prompts per seed."""

    d: int = 3
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    lengths: tuple[int, ...] = (8, 16, 32, 64)
    depths: tuple[int, ...] = (1, 2)
    activations: tuple[str, ...] = ("softmax", "linear")
    batch_size: int = 32
    lr: float = 0.025  # on the engine's objective MSE = 2R: SGD at 0.05 on R, as the chapter has always trained
    steps: int = 200
    records: int = 8
    alpha: float = 0.3
    held_out_prompts: int = 128
    noise_var: float = 0.1

    def __post_init__(self):
        checks.positive_int("d", self.d)
        if len(self.lengths) < 3 or len(set(self.lengths)) != len(self.lengths):
            raise ValueError("lengths must hold at least 3 different lengths (a slope with an error), got "
                             f"{self.lengths}")
        if len(self.seeds) < 2:
            raise ValueError(f"seeds must hold at least 2 seeds (an interval over seeds), got {self.seeds}")
        for K in self.depths:
            checks.positive_int("depths", K)
        for activation in self.activations:
            checks.one_of("activations", activation, ACTIVATIONS)
        checks.positive_int("steps", self.steps)
        checks.positive_int("records", self.records)
        if self.records > self.steps:
            raise ValueError(f"records must be at most steps ({self.steps}), got {self.records}")
        # the rest is checked by DeepConfig
        self.config(self.depths[0])

    def task(self) -> RegressionTask:
        return RegressionTask.isotropic(self.d, noise_var=self.noise_var)

    def config(self, K: int) -> DeepConfig:
        """The :class:`~softmax_as_linear.engine.deep.DeepConfig` of depth ``K``: one column ``(activation, K)`` per
        activation, plain SGD."""
        return DeepConfig(task=self.task(), seeds=tuple(self.seeds), lengths=tuple(self.lengths),
                          models=tuple((a, K) for a in self.activations), batch_size=self.batch_size, lr=self.lr,
                          optimizer="sgd", alpha=self.alpha, held_out_prompts=self.held_out_prompts)

    def record_steps(self) -> list[int]:
        return sorted({round(i * self.steps / self.records) for i in range(self.records + 1)})

    def as_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


#: The lecture preset (a few tens of seconds on a 2-core CPU) and a larger one for a GPU.
TRACKING_PRESETS = {
    "lecture": TrackingSettings(),
    "gpu": TrackingSettings(seeds=tuple(range(8)), lengths=(16, 32, 64, 128, 256, 512, 1024), batch_size=64,
                            steps=400, lr=0.0125, held_out_prompts=1024),
}


@dataclass
class TrackedDepth:
    """The two trainings of one depth: the finite sweep's and the infinite-prompt runs' records, and their steppers
    (kept for their held-out prompts)."""

    K: int
    config: DeepConfig
    finite: object
    limit: object
    finite_stepper: DeepStepper = field(repr=False)
    limit_stepper: DeepLimitStepper = field(repr=False)


def train_tracking(settings: TrackingSettings, device="auto", progress: bool = False) -> dict[int, TrackedDepth]:
    """Train, for every depth of ``settings``, the finite sweep and its infinite-prompt runs through the engine's loop
    (:func:`~softmax_as_linear.engine.train.run`), from the same start and on the same batches. Returns
    ``{K: TrackedDepth}``."""
    if not isinstance(settings, TrackingSettings):
        raise ValueError(f"settings must be a TrackingSettings, got {type(settings).__name__}")
    device = resolve_device(device)
    steps = settings.record_steps()
    out = {}
    for K in settings.depths:
        cfg = settings.config(K)
        finite_stepper, limit_stepper = DeepStepper(cfg, device), DeepLimitStepper(cfg, device)
        finite = run(finite_stepper, settings.steps, steps, progress=progress)
        limit = run(limit_stepper, settings.steps, steps, progress=progress)
        out[K] = TrackedDepth(K, cfg, finite, limit, finite_stepper, limit_stepper)
    return out


def _weights(history: dict, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """U ``(S, nL, nA, K, D, D)`` and V (last rows v) ``(S, nL, nA, K, D, D)`` at record ``k``, float64."""
    U = torch.as_tensor(history["U"][:, :, :, k])
    v = torch.as_tensor(history["v"][:, :, :, k])
    V = torch.zeros_like(U)
    V[..., -1, :] = v
    return U, V


def _output_gaps(tracked: TrackedDepth) -> dict[str, np.ndarray]:
    """``total``, ``sampling``, ``drift`` ``(S, nL, nA, T)``: mean squared prediction gaps on the held-out prompts."""
    cfg, task = tracked.config, tracked.config.task
    tokens, query, _ = (t.double() for t in tracked.finite_stepper._held_out)
    w = tracked.limit_stepper._held_out[3].double()
    T = len(tracked.finite.steps)
    shape = (len(cfg.seeds), len(cfg.lengths), len(cfg.models), T)
    gaps = {name: np.full(shape, np.nan) for name in ("total", "sampling", "drift")}
    with torch.no_grad():
        for k in range(T):
            U_L, V_L = _weights(tracked.finite.history, k)
            U_inf, V_inf = _weights(tracked.limit.history, k)
            limit_pred = torch.stack([deep_limit_prediction(U_inf[:, 0, a, None], V_inf[:, 0, a, None], task, w, query,
                                                            activation)
                                      for a, (activation, _) in enumerate(cfg.models)], dim=1)  # (S, nA, B)
            for i, L in enumerate(cfg.lengths):
                for a, (activation, _) in enumerate(cfg.models):
                    U, V = U_L[:, i, a, None], V_L[:, i, a, None]  # (S, 1, K, D, D) against the B prompts
                    finite = deep_forward_unchecked(tokens[:, :, :L], query, U, V, activation)[..., -1]
                    at_limit = deep_limit_prediction(U, V, task, w, query, activation)
                    gaps["total"][:, i, a, k] = ((finite - limit_pred[:, a]) ** 2).mean(-1).numpy()
                    gaps["sampling"][:, i, a, k] = ((finite - at_limit) ** 2).mean(-1).numpy()
                    gaps["drift"][:, i, a, k] = ((at_limit - limit_pred[:, a]) ** 2).mean(-1).numpy()
    return gaps


def tracking_slopes(lengths, sup: np.ndarray, level: float = 0.95) -> dict:
    r"""Log-log slope in :math:`L` of ``sup (S, nL)``, one row per seed: ``per_seed`` slopes with their own Student-t
    intervals (how far each seed's lengths are from a line), and the ``mean`` of the seeds' slopes with a Student-t
    interval from their spread (how the seeds differ). Rows with a NaN (a diverged run) are left out and counted."""
    sup = np.asarray(sup, dtype=float)
    rows = [row for row in sup if np.all(np.isfinite(row)) and np.all(row > 0)]
    fits = [loglog_slope(lengths, row) for row in rows]
    out = {"per_seed": [f.slope for f in fits], "per_seed_interval": [list(f.interval(level)) for f in fits],
           "seeds_left_out": int(len(sup) - len(rows)), "level": level}
    if len(fits) >= 2:
        mean, low, high = mean_interval([f.slope for f in fits], level)
        out.update(mean=mean, mean_interval=[low, high])
    else:
        out.update(mean=float("nan"), mean_interval=[float("nan"), float("nan")])
    return out


def tracking_readings(tracked: TrackedDepth, level: float = 0.95) -> dict:
    """What the chapter reads from one depth's two trainings (module docstring), JSON-ready: per activation
    ``distance``, ``output_gap`` (``total``, ``sampling``, ``drift``), ``risk_gap`` ``(S, nL, T)``, their suprema over
    the trajectory ``(S, nL)`` and the slopes of the suprema (:func:`tracking_slopes`); the infinite-prompt runs'
    held-out risk ``(S, T)``; ``diverged`` runs per activation and length."""
    cfg, finite, limit = tracked.config, tracked.finite, tracked.limit
    times = 2 * cfg.lr * np.asarray(finite.steps, dtype=float)  # SGD on MSE = 2R: step k is flow time 2 lr k on R
    distance = sum(((finite.history[n] - limit.history[n]) ** 2).reshape(*finite.history[n].shape[:4], -1).sum(-1)
                   for n in finite.history)  # (S, nL, nA, T); the limit's length axis (1) broadcasts
    gaps = _output_gaps(tracked)
    risk_gap = np.abs(finite.eval_risk - limit.eval_risk)
    out = {"K": tracked.K, "lengths": list(cfg.lengths), "seeds": list(cfg.seeds), "times": times.tolist(),
           "models": [list(m) for m in cfg.models], "by_activation": {}}
    for a, (activation, _) in enumerate(cfg.models):
        curves = {"distance": distance[:, :, a], "risk_gap": risk_gap[:, :, a],
                  **{f"output_{name}": g[:, :, a] for name, g in gaps.items()}}
        entry = {"diverged": (np.asarray(tracked.finite_stepper.diverged_at.cpu())[:, :, a] >= 0).sum(0).tolist(),
                 "limit_risk": limit.eval_risk[:, 0, a].tolist()}
        for name, curve in curves.items():
            sup = np.max(curve, axis=-1)  # NaN for a diverged run
            entry[name] = curve.tolist()
            entry[f"{name}_sup"] = sup.tolist()
            entry[f"{name}_slopes"] = tracking_slopes(cfg.lengths, sup, level)
        out["by_activation"][activation] = entry
    return out


def depth_tracking(settings: TrackingSettings | str = "lecture", device="auto", progress: bool = False,
                   level: float = 0.95, cpu_threads: int | None = 1) -> dict:
    """The whole experiment: :func:`train_tracking` then :func:`tracking_readings` for every depth, with provenance
    (device, torch version, commit, settings, seeds, wall time), JSON-ready. ``settings``: a :class:`TrackingSettings`
    or the name of a preset (:data:`TRACKING_PRESETS`).

    ``cpu_threads``: on a CPU, the torch threads while it runs (restored after; None leaves them). A step is many
    products of 4 x 4 matrices, which a second thread does not speed up: on the 2-core machine under load, one thread
    took 0.05 s a step of the two-layer sweep and two threads 0.66 s (they wait on each other)."""
    if isinstance(settings, str):
        settings = TRACKING_PRESETS[checks.one_of("settings", settings, tuple(TRACKING_PRESETS))]
    device = resolve_device(device)
    before = torch.get_num_threads()
    if cpu_threads is not None and device.type == "cpu":
        torch.set_num_threads(checks.positive_int("cpu_threads", cpu_threads))
    clock = time.perf_counter()
    try:
        tracked = train_tracking(settings, device, progress)
        readings = {str(K): tracking_readings(t, level) for K, t in tracked.items()}
        seconds = time.perf_counter() - clock
        where = provenance(device, seconds)
    finally:
        torch.set_num_threads(before)
    return {"experiment": "depth_tracking", "settings": settings.as_dict(), "depths": readings,
            "provenance": {**where, "device_name": device_name(device), "finished": utc_now(),
                           "engine_paths": [DeepStepper.path, DeepLimitStepper.path]}}

