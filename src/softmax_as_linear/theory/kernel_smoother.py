r"""Softmax attention on the sphere as a Nadaraya-Watson kernel smoother (Chapter 8; Collins et al., 2024).

For inputs on the unit sphere, :math:`\|x_i\| = \|x_q\| = 1`, so
:math:`w\, x_i^\top x_q = w - \tfrac{w}{2}\|x_i - x_q\|^2` and

.. math::

    \frac{e^{w x_i^\top x_q}}{\sum_j e^{w x_j^\top x_q}}
    = \frac{e^{-w\|x_i - x_q\|^2/2}}{\sum_j e^{-w\|x_j - x_q\|^2/2}}:

softmax attention whose score reads the inputs through :math:`M = wI` and whose value reads the label is the
Nadaraya-Watson estimator :math:`\hat y = \sum_i k_w(x_i, x_q) y_i / \sum_j k_w(x_j, x_q)` with the Gaussian kernel of
bandwidth :math:`w^{-1/2}` (:func:`nadaraya_watson`). Its window narrows as :math:`w` grows. The best :math:`w` at each
prompt length (:func:`best_bandwidth`) is the reference a trained softmax layer is compared with.

Shapes: tokens ``(..., L, D)`` with the label last, query ``(..., D)``; results ``(...)``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import Tensor

from ..core import checks


def _prompt(tokens, query, w) -> tuple[Tensor, Tensor, Tensor]:
    """``tokens (..., L, D)``, ``query (..., D)`` and ``w`` (``>= 0``) as finite float tensors (NumPy arrays
    accepted; ``query`` and ``w`` in the tokens' dtype), their shapes checked; a ``ValueError`` names the first that
    is not right."""
    tokens = checks.finite("tokens", checks.as_float_tensor("tokens", tokens))
    if tokens.ndim < 2 or tokens.shape[-1] < 2 or tokens.shape[-2] < 1:
        raise ValueError(f"tokens must have shape (..., L, D) with L >= 1 and D >= 2, got {tuple(tokens.shape)}")
    query = checks.finite("query", checks.as_float_tensor("query", query, like=tokens))
    if query.ndim == 0 or query.shape[-1] != tokens.shape[-1]:
        raise ValueError(f"query must have shape (..., {tokens.shape[-1]}) as the tokens, got {tuple(query.shape)}")
    try:
        leading = torch.broadcast_shapes(tokens.shape[:-2], query.shape[:-1])
    except RuntimeError:
        raise ValueError(f"query's leading dimensions {tuple(query.shape[:-1])} must broadcast against the tokens' "
                         f"{tuple(tokens.shape[:-2])} (one query per prompt)") from None
    w = _windows(w, like=tokens)
    try:
        torch.broadcast_shapes(w.shape, leading)
    except RuntimeError:
        raise ValueError(f"w must broadcast against the prompts' leading dimensions {tuple(leading)}, got shape "
                         f"{tuple(w.shape)}") from None
    return tokens, query, w


def _windows(w, like: Tensor | None = None, name: str = "w") -> Tensor:
    """``w`` as a float tensor (any shape) of finite values ``>= 0``, or a ``ValueError`` naming ``name``."""
    if isinstance(w, str):
        raise ValueError(f"{name} must be a number or an array of numbers, got {w!r}")
    w = checks.finite(name, checks.as_float_tensor(name, w, like=like))
    if bool((w < 0).any()):
        raise ValueError(f"{name} must hold windows >= 0 (a window is an inverse squared width), got "
                         f"{w.min().item():g}")
    return w


def _grid(name: str, grid) -> Tensor:
    """``grid`` (a sequence or array of windows) as a float64 tensor ``(n,)``, ``n >= 1``, finite and ``>= 0``."""
    if isinstance(grid, (list, tuple)):
        try:
            grid = np.asarray(grid, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a sequence of numbers, got {grid!r}") from None
    return _windows(checks.shaped(name, grid, "(n,)"), name=name)


def _sphere_task(task):
    checks.has_attributes("task", task, "d", "inputs", "features", "task_var", "noise_var", "sample", "feature_map",
                          kind="CosineTask")


def kernel_weights(tokens: Tensor, query: Tensor, w: float | Tensor) -> Tensor:
    r"""The Gaussian-kernel weights :math:`e^{-w\|x_i - x_q\|^2/2} / \sum_j e^{-w\|x_j - x_q\|^2/2}`, ``(..., L)``."""
    tokens, query, w = _prompt(tokens, query, w)
    x, x_q = tokens[..., :-1], query[..., :-1]
    return torch.softmax(-0.5 * torch.as_tensor(w).to(x).unsqueeze(-1) * ((x - x_q.unsqueeze(-2)) ** 2).sum(-1), -1)


def softmax_weights(tokens: Tensor, query: Tensor, w: float | Tensor) -> Tensor:
    r"""Softmax attention's weights with the score :math:`w\, x_i^\top x_q`, ``(..., L)``: :func:`kernel_weights` when
    every input lies on the unit sphere."""
    return _softmax_weights(*_prompt(tokens, query, w))


def _softmax_weights(tokens: Tensor, query: Tensor, w: Tensor) -> Tensor:
    x, x_q = tokens[..., :-1], query[..., :-1]
    return torch.softmax(torch.as_tensor(w).to(x).unsqueeze(-1) * (x @ x_q.unsqueeze(-1)).squeeze(-1), -1)


def nadaraya_watson(tokens: Tensor, query: Tensor, w: float | Tensor) -> Tensor:
    r""":math:`\hat y = \sum_i \mathrm{softmax}_i(w\, x_i^\top x_q)\, y_i`, ``(...)`` (``w`` broadcasts against the
    leading dimensions)."""
    return _nadaraya_watson(*_prompt(tokens, query, w))


def _nadaraya_watson(tokens: Tensor, query: Tensor, w: Tensor) -> Tensor:
    """:func:`nadaraya_watson` on checked arguments (:func:`_prompt`), or on a task's own prompts."""
    return (_softmax_weights(tokens, query, w) * tokens[..., -1]).sum(-1)


def effective_sample_size(tokens: Tensor, query: Tensor, w: float | Tensor) -> Tensor:
    r""":math:`(\sum_i a_i)^2 / \sum_i a_i^2 = 1 / \sum_i a_i^2` of the softmax weights, ``(...)``: how many tokens the
    window holds."""
    return 1.0 / (softmax_weights(tokens, query, w) ** 2).sum(-1)


def bandwidth_risks(task, L: int, grid, n_prompts: int = 2048, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r"""The risk :math:`\tfrac12\mathbb{E}(\hat y_w - y_q)^2` of :func:`nadaraya_watson` at every :math:`w` of ``grid``
    on the same ``n_prompts`` prompts of length ``L`` of ``task`` (common random numbers): (risks, standard errors),
    each ``(len(grid),)``."""
    _sphere_task(task)
    grid = _grid("grid", grid)
    batch = task.sample(checks.positive_int("n_prompts", n_prompts), checks.positive_int("L", L),
                        torch.Generator().manual_seed(checks.int_at_least("seed", seed, 0)), torch.float64)
    losses = torch.stack([0.5 * (_nadaraya_watson(batch.tokens, batch.query, w) - batch.target) ** 2 for w in grid])
    return losses.mean(-1).numpy(), (losses.std(-1) / math.sqrt(n_prompts)).numpy()


def best_bandwidth(task, L: int, grid=None, n_prompts: int = 2048, seed: int = 0) -> dict:
    r"""Nadaraya-Watson with its best :math:`w` at length ``L``: :math:`w^*` minimises the risk on a log grid
    (``grid``, default 97 points from :math:`10^{-1}` to :math:`10^{4}`) over ``n_prompts`` prompts (stream ``seed``),
    and its risk is then measured on as many *fresh* prompts (stream ``seed + 1``), so the minimum over the grid does
    not bias it down. Returns ``{"w": w*, "risk": ..., "se": ...}``."""
    _sphere_task(task)
    grid = np.logspace(-1, 4, 97) if grid is None else _grid("grid", grid).numpy()
    risks, _ = bandwidth_risks(task, L, grid, n_prompts, seed)
    w = float(grid[int(np.argmin(risks))])
    risk, se = bandwidth_risks(task, L, [w], n_prompts, seed + 1)
    return {"w": w, "risk": float(risk[0]), "se": float(se[0])}


def circle_limit_losses(task, w, n_samples: int = 4096, seed: int = 0, nodes: int = 2048) -> Tensor:
    r"""Per-sample losses of the *infinite-prompt* Nadaraya-Watson predictor on the circle (:math:`d = 2`, inputs
    uniform on :math:`S^1`): :math:`\hat y_\infty(x_q) = \mathbb{E}_{\nu}[f]` under the tilted law
    :math:`d\nu(x) \propto e^{w x^\top x_q} dx` (a von Mises law around :math:`x_q`), computed by the trapezoid rule on
    ``nodes`` equally spaced angles (exponentially accurate for these periodic analytic integrands), and
    :math:`\ell = \tfrac12(\hat y_\infty - f(x_q))^2 + \tfrac{s^2}{2}` (the query's noise integrated). ``w`` a sequence
    of windows; ``n_samples`` draws of :math:`(a, x_q)` shared by every ``w`` (paired) -> ``(len(w), n_samples)``."""
    _sphere_task(task)
    if task.d != 2 or task.inputs != "sphere":
        raise ValueError("task: the quadrature is on the circle; give a task with d = 2 and inputs 'sphere'")
    g = torch.Generator().manual_seed(checks.int_at_least("seed", seed, 0))
    n = checks.positive_int("n_samples", n_samples)
    a = torch.randn(n, task.features, generator=g, dtype=torch.float64) * math.sqrt(task.task_var)
    x_q = task.draw_inputs((n,), g)
    angles = 2 * math.pi * torch.arange(checks.int_at_least("nodes", nodes, 3), dtype=torch.float64) / nodes
    grid = torch.stack([torch.cos(angles), torch.sin(angles)], -1)  # (nodes, 2)
    f_grid = task.feature_map(grid) @ a.T  # (nodes, n)
    f_q = (task.feature_map(x_q) * a).sum(-1)
    cosines = x_q @ grid.T  # (n, nodes)
    out = []
    single = isinstance(w, numbers.Real) or isinstance(w, (torch.Tensor, np.ndarray)) and w.ndim == 0
    for value in _grid("w", [w] if single else w):
        weights = torch.softmax(value * cosines, -1)
        out.append(0.5 * ((weights * f_grid.T).sum(-1) - f_q) ** 2 + 0.5 * task.noise_var)
    return torch.stack(out)
