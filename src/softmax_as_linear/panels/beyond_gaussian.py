"""The live panel of Chapter 6: choose the covariate law and the prompt length, train softmax and linear
attention and their infinite-prompt limits from the same start on the same batches, and see how far each
finite-prompt run stays from its limit (and the two limits from each other).

Training runs in the background (:func:`~softmax_as_linear.panels.training.training_panel`): a progress bar,
*Stop*, and messages instead of tracebacks for settings that cannot be computed.
"""
from __future__ import annotations

import ipywidgets as W

from ..engine.sweep import TrainConfig, TrainResult
from ..experiments.beyond_gaussian import limit_tracking
from ..experiments.presets import beyond_config
from ..figures.beyond_gaussian import tracking_time_figure
from ..registry import COVARIATE_NAMES, COVARIATES, PAPER_SEED
from . import widgets
from .training import training_panel

#: The first click: uniform covariates at L = 100 for the lecture preset's flow time (seconds on a CPU).
BEYOND_PANEL = dict(covariates="uniform", L=100, lr=0.02, steps=1250)


def beyond_controls() -> dict[str, W.Widget]:
    """The controls of :func:`beyond_panel`, set to :data:`BEYOND_PANEL`."""
    style = {"description_width": "initial"}
    return {
        "covariates": W.Dropdown(options=[(COVARIATE_NAMES[name], name) for name in COVARIATES],
                                 value=BEYOND_PANEL["covariates"],
                                 description="covariate law", style=style),
        "L": W.SelectionSlider(options=[10, 30, 100, 300, 1000, 3000], value=BEYOND_PANEL["L"],
                               description="prompt length L", continuous_update=False, style=style),
        "seed": W.BoundedIntText(value=PAPER_SEED, min=0, max=9_999, description="seed", style=style),
        "lr": widgets.log_slider("learning rate", BEYOND_PANEL["lr"], 1e-3, 0.1),
        "steps": W.SelectionSlider(options=[250, 500, 1_250, 2_500, 5_000], value=BEYOND_PANEL["steps"],
                                   description="steps", continuous_update=False, style=style),
    }


def beyond_panel_config(covariates: str, L: int, seed: int, lr: float, steps: int) -> TrainConfig:
    """One click of the panel: the lecture preset of Chapter 6 at one ``L`` and one seed (a ``ValueError``
    names a setting that cannot be used)."""
    return beyond_config("lecture", covariates, lengths=(int(L),), seeds=(int(seed),), lr=float(lr), steps=int(steps),
                         record_every=max(1, int(steps) // 50), eval_prompts=512)


def beyond_panel_figure(result: TrainResult):
    """The distances along training of one click
    (:func:`~softmax_as_linear.figures.beyond_gaussian.tracking_time_figure`)."""
    stopped = "" if result.complete else f", stopped at step {int(result.steps[-1]):,}"
    tracking = limit_tracking(result)
    L = result.config.lengths[0]
    title = (f"{COVARIATE_NAMES[result.config.covariates]} covariates, L = {L}, seed {result.config.seeds[0]}{stopped}")
    fig = tracking_time_figure(tracking, title=title)
    fig.update_layout(sliders=[], margin=dict(b=60))
    return fig


def beyond_panel() -> widgets.Panel:
    """The live panel of Chapter 6 (see :func:`beyond_controls`)."""
    return training_panel(beyond_controls(), beyond_panel_config, beyond_panel_figure, columns=3,
                          title="Finite prompts against their infinite-prompt limit, for a covariate law")
