r"""Softmax against normalised linear attention on regression prompts at given weights: Figures 1 and 5 (at
the initialisation of the training experiments) and the gaps to the infinite-prompt limit along a trained run.

- :func:`icl_batch_gaps`: one batch of prompts, both activations at shared weights: prediction gap,
  gradient gaps, effective sample size;
- :func:`concentration_figure` (:func:`figure1`, :func:`figure5`): those gaps against ``L`` at the
  paper's initialisation, with intervals and provenance, the data of Figures 1 and 5;
- :func:`concentration_along_training`: the gaps of :func:`~softmax_as_linear.theory.stability.trajectory_gaps`
  along a run of a sweep (Section 4: stability of concentration along training).
"""
from __future__ import annotations

import time

import numpy as np
import torch
from torch import Tensor

from ..core import checks, seeding
from ..core.devices import resolve_device
from ..core.provenance import provenance
from ..core.stats import estimate, ratio_interval
from ..engine.sweep import TrainResult
from ..registry import ACTIVATIONS, CONCENTRATION_FIGURES
from ..theory.concentration import Draw, gap_moments, stream_moments
from ..theory.models import AttentionModel
from ..theory.regression import RegressionTask
from ..theory.stability import trajectory_gaps
from .presets import CONCENTRATION_PRESETS, CONCENTRATION_SEED


def icl_batch_gaps(model: AttentionModel, task: RegressionTask, L: int, batch: int,
                   generator: torch.Generator | None = None, draw: Draw | None = None,
                   queries: Tensor | None = None, targets: Tensor | None = None) -> dict[str, Tensor]:
    r"""Softmax against normalised linear attention on one batch of regression prompts, at shared weights.

    Both models have the weights of ``model``; each sees the same ``batch`` prompts of length ``L``.
    Returns per prompt the squared prediction gap :math:`(\hat y_{\mathrm{soft}} - \hat y_{\mathrm{lin}})^2`
    ``(batch,)``, and for the batch the squared norms of the gradient gap of the batch MSE
    :math:`\frac1B \sum_b (\hat y_b - y_b)^2` (torch's ``MSELoss``, i.e. :math:`2\hat R`) with respect to the
    four matrices (``grad_weights``) and to :math:`(U, V)` (``grad_uv``), the squared norm of the linear
    model's four-matrix gradient (``grad_norm_linear``), and the ESS of the softmax weights ``(batch,)``.

    Prompts come from ``task`` with ``generator`` unless ``draw``, ``queries (batch, D)`` and
    ``targets (batch,)`` are given (for checks against direct code).
    """
    weights = list(model.weights().values())
    U, V = model.uv()
    Ud, Vd = U.detach().double(), V.detach().double()
    D = task.D
    if draw is None:
        stream = task.stream(batch, generator)
        queries, targets, draw = stream.query, stream.target, stream.tokens
    z = queries.double().unsqueeze(1)  # (B, 1, D)
    moments = stream_moments(draw, L, z, Ud, second_order=True)
    v = Vd[D - 1]  # only the last row of V reaches the prediction
    grads = {}
    predictions = {}
    for activation in ACTIVATIONS:
        first, second = gap_moments(moments, activation)
        first, second = first[:, 0], second[:, 0]  # (B, D), (B, D, D)
        y_hat = first @ v
        residual = 2 * (y_hat - targets.double()) / batch  # d MSE / d y_hat
        grad_U = ((residual.unsqueeze(-1) * (second @ v)).unsqueeze(-1) * z[:, 0].unsqueeze(-2)).sum(0)
        grad_V = torch.zeros_like(Vd)
        grad_V[D - 1] = (residual.unsqueeze(-1) * first).sum(0)
        grads[activation], predictions[activation] = (grad_U, grad_V), y_hat
    dU, dV = (a - b for a, b in zip(grads["softmax"], grads["linear"]))
    with torch.enable_grad():
        gap_weights = torch.autograd.grad((U, V), weights, grad_outputs=(dU.to(U), dV.to(V)), retain_graph=True)
        linear_weights = torch.autograd.grad((U, V), weights, grad_outputs=tuple(g.to(U) for g in grads["linear"]))
    sq = lambda tensors: sum(t.double().square().sum() for t in tensors).reshape(1)  # noqa: E731
    return {"output": (predictions["softmax"] - predictions["linear"]).square(),
            "grad_weights": sq(gap_weights), "grad_uv": sq((dU, dV)), "grad_norm_linear": sq(linear_weights),
            "ess": moments.ess[:, 0]}


def concentration_figure(name: str = "fig1", preset: str = "lecture", device="auto", progress: bool = False,
                         covariance: str | None = None) -> dict:
    r"""Figure 1 (isotropic inputs) or Figure 5 (KMS inputs, :math:`\rho = 0.5`): softmax against
    normalised linear attention at the random initialisation of the training experiments.

    Setting of Section 6 / Appendix A.2.2: the four-matrix model with PyTorch's default initialisation
    (stream ``"init"`` of seed 327, :mod:`~softmax_as_linear.core.seeding`; the same weights for both
    activations), regression task with :math:`d = 5`, :math:`\tau^2 = 1/d`, :math:`s^2 = 0.1`, and
    :math:`\Sigma = I` (``"isotropic"``) or the KMS matrix (``"kms"``; prompt and query inputs
    :math:`N(0, \Sigma)`). ``covariance`` defaults to the one of ``name``
    (:data:`~softmax_as_linear.registry.CONCENTRATION_FIGURES`). For every prompt length, ``n_batches`` batches of
    ``batch`` fresh prompts (stream ``"prompts"`` at (327, L)) give, through
    :func:`~softmax_as_linear.experiments.concentration_figures.icl_batch_gaps`,

    - ``output``: mean over prompts of :math:`(\hat y_{\mathrm{soft}} - \hat y_{\mathrm{lin}})^2`;
    - ``grad_weights`` / ``grad_uv``: mean over batches of the squared norm of the difference of the
      batch-MSE gradients (torch's ``MSELoss`` = :math:`2\hat R`) with respect to the four matrices /
      to :math:`(U, V)`;
    - ``grad_norm_linear``: mean squared norm of the linear model's four-matrix gradient;
    - ``relative_grad``: ``grad_weights / grad_norm_linear``, the ratio of the two means over batches
      (the gradient gap relative to the size of the gradient), with a delta-method interval
      (:func:`~softmax_as_linear.core.stats.ratio_interval`);
    - ``ess``: mean effective sample size of the softmax weights;

    each as ``{"mean", "low", "high", "level"}`` lists (95% Student-t intervals over prompts or
    batches), with the settings and :func:`~softmax_as_linear.core.provenance.provenance` (device, torch, commit, wall
    time). Presets: :data:`~softmax_as_linear.experiments.presets.CONCENTRATION_PRESETS`.
    """
    checks.one_of("name", name, tuple(CONCENTRATION_FIGURES))
    checks.one_of("preset", preset, tuple(CONCENTRATION_PRESETS))
    covariance = CONCENTRATION_FIGURES[name] if covariance is None else covariance
    checks.one_of("covariance", covariance, ("isotropic", "kms"))
    config = CONCENTRATION_PRESETS[preset]
    dev = resolve_device(device)
    started = time.perf_counter()
    task = RegressionTask.isotropic(5) if covariance == "isotropic" else RegressionTask.kms(5, 0.5)
    init_seed = seeding.stream_seed(CONCENTRATION_SEED, "init")
    model = AttentionModel(task.D, "softmax", seed=init_seed).to(device=dev, dtype=torch.float64)
    names = ("output", "grad_weights", "grad_uv", "grad_norm_linear", "ess")
    rows = {name_: [] for name_ in names}
    relative = []
    lengths = list(config["lengths"])
    loop = lengths
    if progress:
        from tqdm.auto import tqdm
        loop = tqdm(lengths, desc=f"{name} ({preset}, {covariance})")
    for L in loop:
        g = seeding.generator(CONCENTRATION_SEED, "prompts", L, device=dev)
        per_batch = [icl_batch_gaps(model, task, L, config["batch"], g) for _ in range(config["n_batches"])]
        for key in names:
            rows[key].append(torch.cat([b[key].reshape(-1) for b in per_batch]).cpu().numpy())
        relative.append(ratio_interval(rows["grad_weights"][-1], rows["grad_norm_linear"][-1], 0.95))
    U, _ = model.uv()
    result = {key: estimate(rows[key], 0.95).as_dict() for key in rows}
    mean, low, high = (list(v) for v in zip(*relative))
    result["relative_grad"] = {"mean": mean, "low": low, "high": high, "level": 0.95}
    result.update(
        figure=name, preset=preset, lengths=lengths,
        settings=dict(d=task.d, D=task.D, task_var=task.task_var, noise_var=task.noise_var, covariance=covariance,
                      rho=0.5 if covariance == "kms" else None, sampler=task.sampler,
                      model=f"AttentionModel(6, activation, seed={init_seed}), PyTorch default init",
                      seed=CONCENTRATION_SEED, init_seed=init_seed,
                      data_seed="stream 'prompts' of seeding at (327, L) for each length", batch=config["batch"],
                      n_batches=config["n_batches"], n_prompts=config["batch"] * config["n_batches"],
                      loss="batch MSE (torch MSELoss) = 2 x the theory's risk R",
                      gradients="four matrices (W_Q, W_K, W_V, W_O) and (U, V) with U = W_K^T W_Q / sqrt(D)",
                      norm_U=float(torch.linalg.matrix_norm(U.detach(), ord=2)), dtype="float64"),
        provenance=provenance(dev, time.perf_counter() - started))
    if name == "fig5":
        result["identification"] = ("inferred: the paper's text (Appendix A.2.2) describes Figures 6-8 as the KMS "
                                    "versions of Figures 2-4 and never describes Figure 5; this is Figure 1 with KMS "
                                    "inputs")
    return result


def figure1(preset: str = "lecture", device="auto", progress: bool = False) -> dict:
    """Figure 1: :func:`concentration_figure` with isotropic inputs."""
    return concentration_figure("fig1", preset, device, progress)


def figure5(preset: str = "lecture", device="auto", progress: bool = False) -> dict:
    """Figure 5 (inferred to be the KMS counterpart of Figure 1): :func:`concentration_figure` with KMS inputs."""
    return concentration_figure("fig5", preset, device, progress)


def concentration_along_training(result: TrainResult, activation: str = "softmax", L: int | None = None,
                                 seed: int | None = None, lengths=(10, 40, 160, 640), every: int = 1,
                                 n_prompts: int = 512, data_seed: int = 0) -> dict:
    r"""Stability of concentration along training (paper, Section 4): the gaps between finite-``L``
    softmax attention and its infinite-prompt limit at the parameters one run visits.

    Takes the recorded trajectory :math:`(U(t), V(t))` of the run (``activation``, trained at ``L``,
    default the longest prompts of the sweep; ``seed``) every ``every`` records (and the last), and
    estimates there, for each evaluation length in ``lengths``, the mean squared output gap and
    gradient gap of :func:`~softmax_as_linear.theory.stability.trajectory_gaps` on ``n_prompts``
    prompts of the run's task (drawn with ``data_seed``).

    Returns a JSON-ready dict: ``times``, ``steps`` of the records used, ``norm_U``
    (:math:`\|U(t)\|_F`), ``lengths``, ``output`` and ``gradient`` (``mean``/``low``/``high`` as
    ``(nL, T)`` lists, and ``sup``: the largest mean along the trajectory for each ``L``), and the settings.
    """
    cfg = result.config
    L = cfg.lengths[-1] if L is None else L
    s, l, a = result.index(activation, L, seed)
    every = checks.positive_int("every", every)
    if result.diverged[s, l, a]:
        raise ValueError(f"the {activation} run at L = {L} diverged; choose another run")
    picked = sorted(set(range(0, result.steps.size, every)) | {result.steps.size - 1})
    U, V = (np.asarray(m[s, l, a])[picked] for m in result.uv())
    gaps = trajectory_gaps(cfg.task(), U, V, lengths, n_prompts=n_prompts, seed=data_seed)
    return {"figure": "concentration along training", "activation": activation, "trained_length": L,
            "seed": cfg.seeds[s], "parametrisation": cfg.parametrisation, "init": cfg.init,
            "covariance": cfg.covariance, "steps": result.steps[picked].tolist(),
            "times": result.times[picked].tolist(), **gaps}
