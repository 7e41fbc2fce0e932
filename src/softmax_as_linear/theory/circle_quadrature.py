r"""Moments of the cosine task's features over the uniform law on the circle, and the infinite-prompt risks they give
(Chapter 8's references for linear attention).

On :math:`S^1` every moment below is the mean of a smooth periodic function of the angle, so the trapezoid rule on
``nodes`` equally spaced angles is exact up to terms of order :math:`J_{\text{nodes}}(2|\omega|_{\max})`, far below
double precision once ``nodes`` exceeds a few times the largest frequency :math:`|\omega_j|`. With
:math:`\varphi` the task's features (``(m,)``), :math:`x` uniform on the circle and :math:`a \sim N(0, \tau^2 I_m)`:

.. math::

    \mu = \mathbb{E}\varphi(x), \qquad G = \mathbb{E}[x\, \varphi(x)^\top] \ (d \times m), \qquad
    q = \mathbb{E}\|\varphi(x)\|^2 .

Because :math:`\mathbb{E}x = 0` and :math:`\mathbb{E}xx^\top = I/d`, the best predictor of :math:`f_a(x_q)` linear in
:math:`x_q` (no intercept) that knows :math:`a` is :math:`\beta^\top x_q` with :math:`\beta = d\, G a`, and

.. math::

    R^*_{\mathrm{lin}} = \tfrac{\tau^2}{2}\,(q - d \operatorname{tr} G G^\top) + \tfrac{s^2}{2}, \qquad
    R^*_{\mathrm{aff}} = R^*_{\mathrm{lin}} - \tfrac{\tau^2}{2}\|\mu\|^2 .

Normalised linear attention predicts :math:`v^\top \hat M W x_q` with :math:`\hat M = \tfrac1L\sum_i z_i z_i^\top`
(:math:`W` the first :math:`d` columns of :math:`U`), linear in :math:`x_q` given the prompt, so its risk is at least
:math:`R^*_{\mathrm{lin}}` at every :math:`L` and every weight; as :math:`L \to \infty` the weights
:math:`W = (d I; 0)`, :math:`v = e_{d+1}` reach it. The gap :math:`\tfrac{\tau^2}{2}\|\mu\|^2` to the best affine
predictor is the *intercept share*: what a predictor that can add the prompt's mean label gains over linear attention
without any locality. (Risks are :math:`\tfrac12` squared error, the course's convention.)
"""
from __future__ import annotations

import math

import torch

from ..core import checks

#: Trapezoid nodes of the references: exact to rounding for the lecture task's frequencies (:math:`|\omega|` up to about
# 8).
NODES = 512


def _check_circle(task) -> None:
    checks.has_attributes("task", task, "d", "inputs", "features", "task_var", "noise_var", "feature_map",
                          kind="CosineTask")
    if task.d != 2 or task.inputs != "sphere":
        raise ValueError("task: the quadrature is on the circle; give a task with d = 2 and inputs 'sphere'")


def circle_nodes(nodes: int = NODES) -> torch.Tensor:
    r"""``nodes`` equally spaced points :math:`(\cos\theta_k, \sin\theta_k)`, :math:`\theta_k = 2\pi k/n`:
    ``(n, 2)``."""
    angles = 2 * math.pi * torch.arange(checks.int_at_least("nodes", nodes, 3), dtype=torch.float64) / nodes
    return torch.stack([torch.cos(angles), torch.sin(angles)], -1)


def feature_moments(task, nodes: int = NODES) -> dict:
    r"""The feature moments of ``task`` (a :class:`~softmax_as_linear.theory.cosine_task.CosineTask` on the circle)
    by the trapezoid rule: ``{"mean": mu (m,), "cross": G (2, m), "second": q}``, float64."""
    _check_circle(task)
    x = circle_nodes(nodes)
    phi = task.feature_map(x)  # (n, m)
    return {"mean": phi.mean(0), "cross": x.T @ phi / nodes, "second": float((phi ** 2).sum(-1).mean())}


def linear_limit_risk(task, nodes: int = NODES) -> float:
    r""":math:`R^*_{\mathrm{lin}} = \tfrac{\tau^2}{2}(q - d\operatorname{tr}GG^\top) + \tfrac{s^2}{2}`: the
    infinite-prompt optimum of normalised linear attention on ``task``, and a lower bound on its risk at every prompt
    length."""
    _check_circle(task)
    m = feature_moments(task, nodes)
    return 0.5 * task.task_var * (m["second"] - task.d * float((m["cross"] ** 2).sum())) + 0.5 * task.noise_var


def intercept_share(task, nodes: int = NODES) -> float:
    r""":math:`\tfrac{\tau^2}{2}\|\mu\|^2 = \tfrac12\mathbb{E}_a[(\mathbb{E}_x f_a)^2]`: how much lower the best affine
    predictor's risk is than the best linear one's (both knowing :math:`f`)."""
    _check_circle(task)
    return 0.5 * task.task_var * float((feature_moments(task, nodes)["mean"] ** 2).sum())


def affine_limit_risk(task, nodes: int = NODES) -> float:
    r""":math:`R^*_{\mathrm{aff}} = R^*_{\mathrm{lin}} - \tfrac{\tau^2}{2}\|\mu\|^2`: the best predictor affine in
    :math:`x_q` that knows :math:`f` (the quadrature counterpart of
    :meth:`~softmax_as_linear.theory.cosine_task.CosineTask.best_affine_risk`)."""
    _check_circle(task)
    return linear_limit_risk(task, nodes) - intercept_share(task, nodes)


def zero_limit_risk(task, nodes: int = NODES) -> float:
    r"""The risk of :math:`\hat y = 0`, :math:`\tfrac{\tau^2}{2} q + \tfrac{s^2}{2}`."""
    _check_circle(task)
    return 0.5 * task.task_var * feature_moments(task, nodes)["second"] + 0.5 * task.noise_var


def limit_constants(task, nodes: int = NODES) -> dict:
    r"""The infinite-prompt constants of Chapter 8's answer for ``task``: ``linear`` :math:`R^*_{\mathrm{lin}}`,
    ``intercept`` :math:`\tfrac{\tau^2}{2}\|\mu\|^2`, ``affine`` :math:`R^*_{\mathrm{aff}}`, ``floor``
    :math:`s^2/2` (the infimum of the softmax layer's infinite-prompt risk, approached as its window narrows), ``gap``
    :math:`R^*_{\mathrm{lin}} - s^2/2` (between the best layers as :math:`L \to \infty`), ``locality``
    :math:`R^*_{\mathrm{aff}} - s^2/2` (the part of the gap no affine predictor has) and ``intercept_fraction``
    (``intercept / gap``)."""
    _check_circle(task)
    linear, intercept = linear_limit_risk(task, nodes), intercept_share(task, nodes)
    floor = 0.5 * task.noise_var
    gap = linear - floor
    return {"linear": linear, "intercept": intercept, "affine": linear - intercept, "floor": floor, "gap": gap,
            "locality": linear - intercept - floor, "intercept_fraction": intercept / gap}


def constants_over_draws(task, feature_seeds, nodes: int = NODES) -> dict:
    r""":func:`limit_constants` for the task family of ``task``: the same :math:`d`, :math:`m`, :math:`\gamma`,
    :math:`\tau^2`, :math:`s^2`, with its features drawn from each of ``feature_seeds``. Returns ``feature_seeds`` and,
    per constant, an array ``(n,)`` in that order."""
    from .cosine_task import CosineTask

    _check_circle(task)
    if isinstance(feature_seeds, (str, bytes)) or not hasattr(feature_seeds, "__iter__"):
        raise ValueError(f"feature_seeds must be a sequence of seeds, got {feature_seeds!r}")
    seeds = [checks.int_at_least("feature_seeds", s, 0) for s in feature_seeds]
    if not seeds:
        raise ValueError("feature_seeds must name at least one draw")
    rows = [limit_constants(CosineTask(d=task.d, features=task.features, frequency=task.frequency,
                                       task_var=task.task_var, noise_var=task.noise_var, inputs=task.inputs,
                                       feature_seed=s), nodes) for s in seeds]
    return {"feature_seeds": seeds, **{k: torch.tensor([r[k] for r in rows], dtype=torch.float64).numpy()
                                       for k in rows[0]}}
