r"""Final risks of a trained sweep: measured on a large fresh set of prompts, and exact for linear attention.

The held-out set recorded along training (``eval_prompts`` per seed, one set shared by every ``L``) is
small: its sampling error is a few per cent of the risk and the same at every ``L`` of a seed. The final
parameters of each run are therefore scored again here on ``n_prompts`` fresh prompts per seed and
``L`` (stream ``"evaluation"`` of :mod:`~softmax_as_linear.core.seeding`), the same prompts for the softmax
and the linear run of that seed and ``L``, so that their difference is paired. Linear attention also gets
its exact risk :math:`R_L(U, V)` (:func:`~softmax_as_linear.theory.risks.linear_attention_risk`), free of sampling
noise. Standard error of a mean of ``n`` per-prompt losses: sample standard deviation over :math:`\sqrt n`.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core import checks, seeding
from ..core.devices import resolve_device
from ..theory.limit_model import infinite_prompt_prediction
from ..theory.models import predict_unchecked
from ..theory.risks import linear_attention_risk
from .moments import Moments
from .sweep import TrainResult

#: Per-chunk budget of prompt entries (``prompts x L x D``), about 64 MB in float32.
CHUNK_ENTRIES = 1 << 24


def final_evaluation(result: TrainResult, n_prompts: int = 100_000, device="auto", dtype=torch.float32) -> dict:
    r"""Score the final parameters of every run of ``result`` on fresh prompts; exact risk of the linear runs.

    Returns a dict of arrays (axes seed ``S``, length ``nL``, activation ``nA`` as in the sweep):
    ``risk`` and ``risk_se`` ``(S, nL, nA)`` (R = MSE/2 and its standard error; NaN for diverged runs),
    ``paired_difference`` and ``paired_difference_se`` ``(S, nL)`` (softmax minus linear on the same
    prompts; NaN without both activations), ``linear_exact`` ``(S, nL)`` (NaN without a linear run),
    and ``n_prompts``. The infinite-prompt models of a sweep (``"softmax_limit"``, ``"linear_limit"``) are
    scored on the same prompts' tasks, queries and targets: their risk estimates :math:`R_\infty`.
    """
    n_prompts = checks.int_at_least("n_prompts", n_prompts, 2)
    device = resolve_device(device)
    cfg = result.config
    if cfg.labels != "linear":
        raise ValueError(f"result: its labels are {cfg.labels!r}; the exact linear risks here are those of linear "
                         "labels (Chapter 8's sweeps are measured by experiments.nonlinear.nonlinear_final_risks)")
    task = cfg.task()
    S, nL, nA = len(cfg.seeds), len(cfg.lengths), len(cfg.models)
    U_all, V_all = (torch.as_tensor(np.asarray(m)[:, :, :, -1], dtype=torch.float64) for m in result.uv())
    risk = np.full((S, nL, nA), np.nan)
    risk_se = np.full((S, nL, nA), np.nan)
    difference = np.full((S, nL), np.nan)
    difference_se = np.full((S, nL), np.nan)
    exact = np.full((S, nL), np.nan)
    both = {"softmax", "linear"} <= set(cfg.models)
    pair = (cfg.models.index("softmax"), cfg.models.index("linear")) if both else None
    for s, seed in enumerate(cfg.seeds):
        for l, L in enumerate(cfg.lengths):
            alive = [a for a in range(nA) if not result.diverged[s, l, a]]
            if "linear" in cfg.models:
                a = cfg.models.index("linear")
                if a in alive:
                    exact[s, l] = float(linear_attention_risk(U_all[s, l, a], V_all[s, l, a], L, task))
            if not alive:
                continue
            params = {a: (U_all[s, l, a].to(device, dtype), V_all[s, l, a].to(device, dtype)) for a in alive}
            generator = seeding.generator(seed, "evaluation", L, device=device)
            chunk = max(1, min(n_prompts, CHUNK_ENTRIES // (L * cfg.D)))
            moments = {a: Moments() for a in alive}
            difference_moments = Moments()
            done = 0
            while done < n_prompts:
                n = min(chunk, n_prompts - done)
                batch = task.sample(n, L, generator, dtype=dtype, device=device)
                losses = {}
                for a, (U, V) in params.items():
                    model = cfg.models[a]
                    if model.endswith("_limit"):
                        pred = infinite_prompt_prediction(U, V, task, batch.w, batch.query,
                                                          model.removesuffix("_limit"))
                    else:
                        pred = predict_unchecked(batch.tokens, batch.query, U, V, model)
                    losses[a] = (0.5 * (pred - batch.target) ** 2).double()
                    moments[a].add(losses[a])
                if both and pair[0] in losses and pair[1] in losses:
                    difference_moments.add(losses[pair[0]] - losses[pair[1]])
                done += n
            for a in alive:
                risk[s, l, a] = float(moments[a].mean)
                risk_se[s, l, a] = float(moments[a].sd) / math.sqrt(n_prompts)
            if both and pair[0] in alive and pair[1] in alive:
                difference[s, l] = float(difference_moments.mean)
                difference_se[s, l] = float(difference_moments.sd) / math.sqrt(n_prompts)
    return {"risk": risk, "risk_se": risk_se, "paired_difference": difference,
            "paired_difference_se": difference_se, "linear_exact": exact, "n_prompts": np.array(n_prompts)}
