r"""The infinite-prompt gradient flow, live: Chapter 4's for :math:`\Sigma = I` and Chapter 5's for any :math:`\Sigma`.

Both draw :func:`~softmax_as_linear.figures.paper.flow_convergence_figure` for the flow of
:func:`~softmax_as_linear.theory.flow.infinite_prompt_flow` from Assumption 5.1 (scale :math:`\alpha`)
up to a horizon :math:`t`. For any :math:`\Sigma` the limit is Remark 5.3's when :math:`\Sigma` is
invertible and Appendix F.3's (:func:`~softmax_as_linear.theory.flow_limits.degenerate_limit_parameters`)
when it is singular (:math:`\Sigma` from :func:`~softmax_as_linear.theory.regression.covariance_of`), and the
Runge-Kutta step is :func:`~softmax_as_linear.theory.flow.stable_step`, inside the stability limit of the flow
linearised at that limit (Exercise "the rate of the flow near its limit" of Chapter 5):

.. math:: h \le \big(\tau^2 (c^2 \lambda_{\max}^3 + \operatorname{tr}\Sigma / c^2)\big)^{-1},
    \qquad c = v_y^* .

A setting the panel cannot integrate (too stiff for the horizon, not a covariance) gets a message that
says which of its controls to change.
"""
from __future__ import annotations

import ipywidgets as W
import numpy as np
import torch

from ..core import checks
from ..figures import paper
from ..theory.flow import infinite_prompt_flow, stable_step
from ..theory.flow_limits import block_init, degenerate_limit_parameters
from ..theory.regression import RegressionTask, covariance_of
from . import widgets

#: Runge-Kutta steps one redraw may take (a few seconds on a CPU).
MAX_STEPS = 20_000


def flow_panel(task: RegressionTask, *, title: str = "Infinite-prompt gradient flow, Σ = I") -> widgets.Panel:
    """Chapter 4's panel: the flow of ``task`` from Assumption 5.1, for the scale α and the horizon t."""
    def draw(alpha, horizon):
        return covariance_flow(task, alpha, horizon, label=f"α = {alpha:.3g}", max_dt=0.1)[0]

    return widgets.panel({"alpha": widgets.log_slider("α", 0.3, 0.001, 2.0),
                          "horizon": W.IntSlider(value=30, min=5, max=200, step=5, description="horizon t",
                                                 continuous_update=False)},
                         draw, title=title)


def covariance_flow(task: RegressionTask, alpha: float, horizon: float, *, label: str = "",
                    max_dt: float | None = None, min_horizon: float = 10.0):
    """The flow of ``task`` from Assumption 5.1 up to ``horizon`` and its figure: ``(figure, flow)``.

    The limit is Appendix F.3's (Remark 5.3's when :math:`\\Sigma` is invertible). Without ``max_dt``
    the step follows the stability limit of the module docstring; a ``ValueError`` says which
    control to change when that needs more than :data:`MAX_STEPS` steps (``min_horizon``: the
    shortest horizon the panel offers).
    """
    limit = degenerate_limit_parameters(task, alpha)
    if max_dt is None:
        max_dt = stable_step(task, alpha)
        if horizon / max_dt > MAX_STEPS:
            reach = MAX_STEPS * max_dt
            if reach >= min_horizon:
                raise ValueError(f"this Σ makes the flow stiff (Runge-Kutta steps of {max_dt:.1g}): "
                                 f"choose a horizon t up to {int(reach // 10 * 10)}")
            eigenvalues = torch.linalg.eigvalsh(task.covariance)
            largest, smallest = float(eigenvalues[-1]), float(eigenvalues[eigenvalues > 0].min())
            raise ValueError(f"this Σ is too stiff for the flow to be integrated here: the step shrinks like "
                             f"λ_max³/λ_min over the positive eigenvalues, here {largest:.3g}³/{smallest:.3g} "
                             f"(steps of {max_dt:.1g}). Change the eigenvalues: a smaller largest one, a larger "
                             "smallest one, or 0 for a tiny one (a singular Σ, Appendix F.3).")
    times = np.linspace(0, horizon, 101)
    flow = infinite_prompt_flow(*block_init(task, alpha), task, times, max_dt=max_dt)
    if not np.isfinite(flow["risk"]).all():
        raise ValueError("the integration of the flow became unstable: choose a smaller α or horizon t")
    figure = paper.flow_convergence_figure({label or "flow": (flow, limit, task.noise_floor())})
    return figure, flow


def covariance_flow_panel(d: int = 5, *, title: str = "Infinite-prompt gradient flow for any Σ") -> widgets.Panel:
    """Chapter 5's panel: Σ (identity, KMS with ρ, or any eigenvalues, singular ones included), the
    scale α of Assumption 5.1 and the horizon t; ρ counts only for KMS, the eigenvalues only for their choice."""
    controls = {
        "kind": W.Dropdown(options=[("Σ = I", "isotropic"), ("KMS ρ^|i-j|", "kms"), ("eigenvalues", "eigenvalues")],
                           value="kms", description="Σ"),
        "rho": W.FloatSlider(value=0.5, min=-0.95, max=0.95, step=0.05, description="ρ", continuous_update=False),
        "spectrum": W.Text(value="1, 1, 1, 1, 0.2", description="eigenvalues", continuous_update=False),
        "alpha": widgets.log_slider("α", 0.3, 0.001, 2.0),
        "horizon": W.IntSlider(value=60, min=10, max=400, step=10, description="horizon t", continuous_update=False),
    }

    def enable(_=None):
        controls["rho"].disabled = controls["kind"].value != "kms"
        controls["spectrum"].disabled = controls["kind"].value != "eigenvalues"

    controls["kind"].observe(enable, names="value")
    enable()

    def draw(kind, rho, spectrum, alpha, horizon):
        eigenvalues = checks.number_list("eigenvalues", spectrum) if kind == "eigenvalues" else None
        task = RegressionTask(d, covariance_of(kind, d, rho, eigenvalues))
        return covariance_flow(task, alpha, horizon, label=kind, min_horizon=controls["horizon"].min)[0]

    return widgets.panel(controls, draw, title=title)
