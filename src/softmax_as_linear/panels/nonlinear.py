"""The live panels of Chapter 8: the tilted limit against finite prompts, and training on a nonlinear task.

:func:`limit_panel` draws the closed-form limit of softmax attention for nonlinear labels against finite prompts;
:func:`nonlinear_training_panel` trains softmax and linear attention on a nonlinear task at one prompt length, in the
background with *Stop*, as in Chapters 4-6.
"""
from __future__ import annotations

import math

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import torch

from ..core import checks
from ..engine.sweep import TrainConfig, TrainResult
from ..experiments.nonlinear import nonlinear_config, window_readings
from ..figures import style
from ..figures.nonlinear import limit_figure
from ..theory import tilted_limit
from ..theory.cosine_task import CosineTask
from . import widgets
from .training import record_every, training_panel

#: The limit panel's first view: a smooth function, a moderate window, prompts of 100 and 3000 tokens.
LIMIT_PANEL = dict(family="cosine", frequency=1.0, window=0.5, noise_var=0.05, L=1000, seed=0)
#: The task families of the limit panel.
FAMILIES = (("cosine features", "cosine"), ("quadratic", "quadratic"))
#: The training panel's first click (about a minute of one CPU core).
TRAINING_PANEL = dict(frequency=2.0, noise_var=0.05, L=100, steps=500, seed=0)


def limit_controls() -> dict[str, W.Widget]:
    """The controls of :func:`limit_panel`."""
    style_ = {"description_width": "initial"}
    return {
        "family": W.Dropdown(options=FAMILIES, value=LIMIT_PANEL["family"], description="task family", style=style_),
        "frequency": widgets.log_slider("frequency scale γ", LIMIT_PANEL["frequency"], 0.25, 4.0),
        "window": widgets.log_slider("score scale w (M = w I)", LIMIT_PANEL["window"], 0.05, 2.0),
        "noise_var": widgets.log_slider("label noise s²", LIMIT_PANEL["noise_var"], 1e-3, 1.0),
        "L": W.SelectionSlider(options=[10, 100, 1000, 10000], value=LIMIT_PANEL["L"],
                               description="prompt length L", continuous_update=False, style=style_),
        "seed": W.BoundedIntText(value=LIMIT_PANEL["seed"], min=0, max=9_999, description="task seed", style=style_),
    }


def limit_view(frequency: float, window: float, noise_var: float, L: int, seed: int, n_prompts: int = 64,
               n_points: int = 25, family: str = "cosine") -> go.Figure:
    r"""One Gaussian-input task (:math:`d = 2`, one function drawn from ``seed``): a cosine-feature function (16
    features, frequency scale :math:`\gamma`) or a quadratic :math:`x^\top Bx + \beta^\top x` (entries of :math:`B`
    and :math:`\beta` of scale :math:`\gamma/2`); attention with :math:`M = wI` and :math:`v = (0.3, 0, 1)`: the two
    infinite-prompt limits along :math:`x_q = t e_1` and softmax attention on ``n_prompts`` prompts of length ``L`` at
    each query (their mean)."""
    if not 0 < window <= 5:
        raise ValueError(f"window: choose a score scale w in (0, 5], got {window!r}")
    checks.one_of("family", family, [value for _, value in FAMILIES])
    seed = checks.int_at_least("seed", seed, 0)
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(-2.5, 2.5, n_points, dtype=torch.float64)
    query = torch.stack([t, torch.zeros_like(t), torch.zeros_like(t)], -1)
    U = torch.zeros(3, 3, dtype=torch.float64)
    U[:2, :2] = window * torch.eye(2, dtype=torch.float64)
    V = torch.zeros(3, 3, dtype=torch.float64)
    V[2] = torch.tensor([0.3, 0.0, 1.0], dtype=torch.float64)
    if family == "cosine":
        task = CosineTask(d=2, features=16, frequency=frequency, noise_var=noise_var, inputs="gaussian",
                          feature_seed=int(seed))
        a = torch.randn(1, task.features, generator=g, dtype=torch.float64)
        coef = tilted_limit.cosine_coefficients(task, a)
        cov = torch.eye(2, dtype=torch.float64)
        soft = tilted_limit.softmax_limit(U, V, task.omega, task.phase, coef, cov, query)
        lin = tilted_limit.linear_limit(U, V, task.omega, task.phase, coef, cov, noise_var, query)
    else:
        B = 0.5 * frequency * torch.randn(2, 2, generator=g, dtype=torch.float64)
        task = tilted_limit.QuadraticLabels(0.5 * (B + B.T), 0.5 * frequency * torch.randn(2, generator=g,
                                                                                            dtype=torch.float64),
                                            noise_var=noise_var)
        a = torch.zeros(1, 1, dtype=torch.float64)
        soft, lin = tilted_limit.quadratic_limits(U, V, task, query)
    target = task.function(a, query[:, :2].unsqueeze(0))[0]
    repeated = query.repeat_interleave(n_prompts, 0)
    finite = tilted_limit.finite_prompt_predictions(task, U, V, a.expand(repeated.shape[0], -1), repeated, int(L), g)
    finite = finite.view(n_points, n_prompts).mean(-1)
    fig = limit_figure(t.numpy(), target.numpy(), soft.numpy(), lin.numpy(), {int(L): finite.numpy()})
    fig.update_layout(title=f"{dict((v, k) for k, v in FAMILIES)[family]}, γ = {frequency:.2g}, w = {window:.2g}, "
                            f"s² = {noise_var:.2g}: the L = ∞ limit against {n_prompts} prompts of L = {int(L):,}")
    return fig


def limit_panel() -> widgets.Panel:
    """The live panel of the tilted limit (see :func:`limit_controls`)."""
    return widgets.panel(limit_controls(), limit_view, columns=3,
                         title="The infinite-prompt limit for a nonlinear function of Gaussian inputs")


def training_controls() -> dict[str, W.Widget]:
    """The controls of :func:`nonlinear_training_panel`."""
    style_ = {"description_width": "initial"}
    return {
        "frequency": widgets.log_slider("frequency scale γ", TRAINING_PANEL["frequency"], 0.5, 4.0),
        "noise_var": widgets.log_slider("label noise s²", TRAINING_PANEL["noise_var"], 1e-3, 1.0),
        "L": W.SelectionSlider(options=[10, 32, 100, 316, 1000], value=TRAINING_PANEL["L"],
                               description="prompt length L", continuous_update=False, style=style_),
        "steps": W.SelectionSlider(options=[100, 250, 500, 1000, 1500], value=TRAINING_PANEL["steps"],
                                   description="steps", continuous_update=False, style=style_),
        "seed": W.BoundedIntText(value=TRAINING_PANEL["seed"], min=0, max=9_999, description="seed", style=style_),
    }


def training_config(frequency: float, noise_var: float, L: int, steps: int, seed: int) -> TrainConfig:
    """One click: the lecture sweep of Chapter 8 at one ``L`` and one seed, with the task's frequency and noise."""
    return nonlinear_config("lecture", frequency=float(frequency), noise_var=float(noise_var), lengths=(int(L),),
                            seeds=(int(seed),), steps=int(steps), record_every=record_every(int(steps)))


def training_figure(result: TrainResult) -> go.Figure:
    """The held-out risk of both activations along training, each with a band of :math:`\\pm 2` standard errors over
    the held-out prompts (their Monte Carlo noise: a curve may dip below the :math:`L`-Bayes risk within it), with the
    :math:`L`-Bayes risk and the best affine predictor that knows :math:`f`; the title gives softmax's final window
    :math:`w`."""
    cfg = result.config
    task = cfg.task()
    L = cfg.lengths[0]
    bayes, _ = task.bayes_risk(L, 512)
    affine, _ = task.best_affine_risk()
    U, V = result.uv()
    w = window_readings(np.asarray(U), np.asarray(V), cfg.d)["w"][0, 0, cfg.models.index("softmax"), -1]
    stopped = "" if result.complete else f", stopped at step {int(result.steps[-1]):,}"
    fig = style.new_figure(f"γ = {cfg.frequency:.2g}, s² = {cfg.noise_var:.2g}, L = {L}: softmax's window w = {w:.3g}"
                           f"{stopped}", "step",
                           f"held-out risk R = MSE/2 (band: ±2 s.e., {cfg.eval_prompts} prompts)",
                           logy=True)
    for a, model in enumerate(cfg.models):
        risk, se = result.eval_risk[0, 0, a], result.eval_se[0, 0, a]
        fig.add_trace(style.band(result.steps, np.clip(risk - 2 * se, 1e-6, None), risk + 2 * se,
                                 style.COLORS[model], name=f"{model}: ±2 s.e. over the held-out prompts"))
        fig.add_trace(go.Scatter(x=result.steps, y=risk, mode="lines",
                                 name=f"{model} attention", line=dict(color=style.COLORS[model])))
    for y, label, color, dash in ((affine, "best affine predictor that knows f", "optimal_linear", "dash"),
                                  (bayes, "L-Bayes", "bayes", "dot")):
        fig.add_hline(y=y, line=dict(color=style.COLORS[color], dash=dash))
        fig.add_trace(go.Scatter(x=[result.steps[0]], y=[y], mode="lines", name=label,
                                 line=dict(color=style.COLORS[color], dash=dash)))
    if not math.isfinite(float(np.nanmin(result.eval_risk))):
        fig.update_layout(title="every run diverged")
    return fig


def nonlinear_training_panel() -> widgets.Panel:
    """The live training panel of Chapter 8 (see :func:`training_controls`)."""
    return training_panel(training_controls(), training_config, training_figure, columns=3,
                          title="Train softmax and linear attention on a nonlinear task")
