r"""Stability of concentration along training (paper, Section 4): finite-prompt softmax attention against its
infinite-prompt limit on regression prompts, at every point of a parameter trajectory.

Theorem 4.3's proof (Lemma E.1) needs the gaps of :mod:`~softmax_as_linear.theory.concentration` small
uniformly over the parameters the training flow visits, not only at the initialisation:
:func:`regression_gaps` measures them per prompt at one parameter, :func:`trajectory_gaps` along a
trajectory. The limit is exact (Lemma 2.1).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..core import checks, seeding
from ..core.stats import mean_interval
from .concentration import _lengths, squared_gaps, stream_moments
from .limit_model import tilted_moments
from .regression import RegressionTask


def regression_gaps(task: RegressionTask, U, V, L: int, n_prompts: int,
                    generator: torch.Generator | None = None) -> dict[str, Tensor]:
    r"""Finite-``L`` softmax attention against its infinite-prompt limit on regression prompts, per prompt.

    Each of the ``n_prompts`` prompts has its own task :math:`w`, ``L`` tokens i.i.d. from
    :math:`N(0, \Gamma_w)`, a query :math:`z_q = (x_q, 0)` and a target :math:`y_q`, drawn by the task's sampler
    (:meth:`~softmax_as_linear.theory.regression.RegressionTask.stream`). The limit is exact
    (Lemma 2.1): :math:`T[N(0, \Gamma_w)](z_q) = V \Gamma_w U z_q`, with tilted covariance :math:`\Gamma_w`; for a
    non-Gaussian covariate law, the tilted moments of
    :func:`~softmax_as_linear.theory.limit_model.tilted_moments`.
    Returns, each of shape ``(n_prompts,)`` in float64,

    - ``output``: :math:`\|T[\hat\mu_L](z_q) - V\Gamma_w U z_q\|^2` (the quantity of Proposition 3.1);
    - ``gradient``:
      :math:`\|\nabla_U \ell_L - \nabla_U \ell_\infty\|_F^2 + \|\nabla_V \ell_L - \nabla_V \ell_\infty\|_F^2` for the
      loss :math:`\ell = \tfrac12 (\hat y - y_q)^2` of the prediction (the last output coordinate) on that prompt
      (Proposition 3.4 for the in-context loss).

    Averaged over prompts they bound the gaps of the risk and of its gradient,
    :math:`|R_L - R_\infty|` and :math:`\|\nabla R_L - \nabla R_\infty\|^2` (Cauchy-Schwarz and Jensen),
    which the proof of Theorem 4.3 (Lemma E.1) needs small uniformly along the training trajectory.
    U, V: ``(D, D)``.
    """
    L = checks.positive_int("L", L)
    P = checks.int_at_least("n_prompts", n_prompts, 2)
    D = task.D
    U = checks.square("U", checks.as_float_tensor("U", U).to(torch.float64), D)
    V = checks.square("V", checks.as_float_tensor("V", V).to(torch.float64), D)
    stream = task.stream(P, generator)
    w, targets = stream.w, stream.target
    queries = stream.query.unsqueeze(1)  # (P, 1, D)
    moments = stream_moments(stream.tokens, L, queries, U, second_order=True)
    if task.covariates == "gaussian":
        gamma = task.token_covariance(w).unsqueeze(1)  # (P, 1, D, D)
        limit = (gamma @ (queries @ U.T).unsqueeze(-1)).squeeze(-1)  # Gamma_w U z_q, (P, 1, D)
    else:  # the tilted moments of the token law of each task (Chapter 6)
        limit, gamma = tilted_moments(task, queries @ U.T, w.unsqueeze(1), covariance=True)

    def loss(output: Tensor) -> Tensor:
        return 0.5 * (output[..., -1] - targets.unsqueeze(-1)) ** 2

    gaps = squared_gaps(moments.tilted_mean, moments.tilted_cov, limit, gamma, queries, V, loss)
    return {"output": gaps["output"][:, 0], "gradient": (gaps["grad_U"] + gaps["grad_V"])[:, 0]}


def trajectory_gaps(task: RegressionTask, U, V, lengths, *, n_prompts: int = 512, seed: int = 0,
                    level: float = 0.95) -> dict:
    r"""The gaps of :func:`regression_gaps` at every point of a parameter trajectory, for every ``L``.

    Theorem 4.3 needs the output and gradient gaps between finite-``L`` softmax attention and its
    infinite-prompt limit to be small *uniformly* over the parameters the training flow visits (in
    the proof, over a ball that contains the trajectory), not only at the initialisation. This
    evaluates them along a given trajectory ``U, V`` ``(T, D, D)``. The prompts of length ``L`` are
    the same at every point of the trajectory (stream ``"prompts"`` of ``seed`` at ``L``,
    :mod:`~softmax_as_linear.core.seeding`), so the curves in :math:`t` carry no independent noise from point to point.

    Returns ``{"lengths", "norm_U" (T,), "output", "gradient"}`` where ``output`` and ``gradient`` map
    ``"mean"``, ``"low"``, ``"high"`` to ``(nL, T)`` lists: the mean over ``n_prompts`` prompts and its
    Student-t interval at ``level`` (:func:`~softmax_as_linear.core.stats.mean_interval`); and ``"sup"``:
    for each ``L``, the largest mean along the trajectory with the interval at that point
    (``{"mean", "low", "high", "index"}``, each ``(nL,)``).
    """
    U = checks.as_float_tensor("U", U).to(torch.float64)
    V = checks.as_float_tensor("V", V).to(torch.float64)
    if U.ndim != 3 or U.shape[1:] != (task.D, task.D) or V.shape != U.shape:
        raise ValueError(f"U and V must have the same shape (T, {task.D}, {task.D}), got {tuple(U.shape)} and "
                         f"{tuple(V.shape)}")
    lengths = _lengths(lengths)
    seed = seeding.check_seed("seed", seed)
    out = {"lengths": lengths, "norm_U": torch.linalg.matrix_norm(U).tolist(), "level": level,
           "n_prompts": int(n_prompts), "seed": int(seed)}
    for name in ("output", "gradient"):
        out[name] = {"mean": [], "low": [], "high": []}
    for L in lengths:
        rows = {"output": [], "gradient": []}
        for U_t, V_t in zip(U, V):
            g = torch.Generator().manual_seed(seeding.stream_seed(seed, "prompts", L))
            gaps = regression_gaps(task, U_t, V_t, L, n_prompts, g)
            for name in rows:
                rows[name].append(mean_interval(gaps[name].numpy(), level))
        for name, values in rows.items():
            mean, low, high = (list(v) for v in zip(*values))
            out[name]["mean"].append(mean)
            out[name]["low"].append(low)
            out[name]["high"].append(high)
    for name in ("output", "gradient"):
        mean = np.array(out[name]["mean"])
        index = mean.argmax(1)
        pick = lambda key: np.array(out[name][key])[np.arange(len(lengths)), index].tolist()  # noqa: E731
        out[name]["sup"] = {"mean": pick("mean"), "low": pick("low"), "high": pick("high"), "index": index.tolist()}
    return out
