r"""Softmax attention on the sphere as a Nadaraya-Watson kernel smoother (Chapter 8; Collins et al., 2024).

For inputs on the unit sphere, :math:`\|x_i\| = \|x_q\| = 1`, so
:math:`w\, x_i^\top x_q = w - \tfrac{w}{2}\|x_i - x_q\|^2` and

.. math:: \frac{e^{w x_i^\top x_q}}{\sum_j e^{w x_j^\top x_q}} = \frac{e^{-w\|x_i - x_q\|^2/2}}{\sum_j e^{-w\|x_j - x_q\|^2/2}}:

softmax attention whose score reads the inputs through :math:`M = wI` and whose value reads the label is the
Nadaraya-Watson estimator :math:`\hat y = \sum_i k_w(x_i, x_q) y_i / \sum_j k_w(x_j, x_q)` with the Gaussian kernel of
bandwidth :math:`w^{-1/2}` (:func:`nadaraya_watson`). Its window narrows as :math:`w` grows. The best :math:`w` at each
prompt length (:func:`best_bandwidth`) is the reference a trained softmax layer is compared with.

Shapes: tokens ``(..., L, D)`` with the label last, query ``(..., D)``; results ``(...)``.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ..core import checks


def kernel_weights(tokens: Tensor, query: Tensor, w: float | Tensor) -> Tensor:
    r"""The Gaussian-kernel weights :math:`e^{-w\|x_i - x_q\|^2/2} / \sum_j e^{-w\|x_j - x_q\|^2/2}`, ``(..., L)``."""
    x, x_q = tokens[..., :-1], query[..., :-1]
    return torch.softmax(-0.5 * torch.as_tensor(w).to(x).unsqueeze(-1) * ((x - x_q.unsqueeze(-2)) ** 2).sum(-1), -1)


def softmax_weights(tokens: Tensor, query: Tensor, w: float | Tensor) -> Tensor:
    r"""Softmax attention's weights with the score :math:`w\, x_i^\top x_q`, ``(..., L)``: :func:`kernel_weights` when
    every input lies on the unit sphere."""
    x, x_q = tokens[..., :-1], query[..., :-1]
    return torch.softmax(torch.as_tensor(w).to(x).unsqueeze(-1) * (x @ x_q.unsqueeze(-1)).squeeze(-1), -1)


def nadaraya_watson(tokens: Tensor, query: Tensor, w: float | Tensor) -> Tensor:
    r""":math:`\hat y = \sum_i \mathrm{softmax}_i(w\, x_i^\top x_q)\, y_i`, ``(...)`` (``w`` broadcasts against the
    leading dimensions)."""
    return (softmax_weights(tokens, query, w) * tokens[..., -1]).sum(-1)


def effective_sample_size(tokens: Tensor, query: Tensor, w: float | Tensor) -> Tensor:
    r""":math:`(\sum_i a_i)^2 / \sum_i a_i^2 = 1 / \sum_i a_i^2` of the softmax weights, ``(...)``: how many tokens the
    window holds."""
    return 1.0 / (softmax_weights(tokens, query, w) ** 2).sum(-1)


def bandwidth_risks(task, L: int, grid, n_prompts: int = 2048, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r"""The risk :math:`\tfrac12\mathbb{E}(\hat y_w - y_q)^2` of :func:`nadaraya_watson` at every :math:`w` of ``grid``
    on the same ``n_prompts`` prompts of length ``L`` of ``task`` (common random numbers): (risks, standard errors),
    each ``(len(grid),)``."""
    grid = torch.as_tensor(np.asarray(grid, dtype=float), dtype=torch.float64)
    batch = task.sample(checks.positive_int("n_prompts", n_prompts), checks.positive_int("L", L),
                        torch.Generator().manual_seed(checks.int_at_least("seed", seed, 0)), torch.float64)
    losses = torch.stack([0.5 * (nadaraya_watson(batch.tokens, batch.query, w) - batch.target) ** 2 for w in grid])
    return losses.mean(-1).numpy(), (losses.std(-1) / math.sqrt(n_prompts)).numpy()


def best_bandwidth(task, L: int, grid=None, n_prompts: int = 2048, seed: int = 0) -> dict:
    r"""Nadaraya-Watson with its best :math:`w` at length ``L``: :math:`w^*` minimises the risk on a log grid
    (``grid``, default 97 points from :math:`10^{-1}` to :math:`10^{4}`) over ``n_prompts`` prompts (stream ``seed``),
    and its risk is then measured on as many *fresh* prompts (stream ``seed + 1``), so the minimum over the grid does
    not bias it down. Returns ``{"w": w*, "risk": ..., "se": ...}``."""
    grid = np.logspace(-1, 4, 97) if grid is None else np.asarray(grid, dtype=float)
    risks, _ = bandwidth_risks(task, L, grid, n_prompts, seed)
    w = float(grid[int(np.argmin(risks))])
    risk, se = bandwidth_risks(task, L, [w], n_prompts, seed + 1)
    return {"w": w, "risk": float(risk[0]), "se": float(se[0])}
