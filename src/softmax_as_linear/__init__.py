"""Softmax as linear attention: the library of the executable course on Boyer & Boursier (arXiv 2512.11784).

Modules, one idea each:

- :mod:`~softmax_as_linear.attention`: softmax and normalised linear attention of a prompt, and
  their Gaussian infinite-prompt limits (Lemma 2.1).
- :mod:`~softmax_as_linear.icl`: in-context linear regression, its closed-form risks and reference solutions.
- :mod:`~softmax_as_linear.models`: the paper's four-matrix attention model and its (U, V) view.
- :mod:`~softmax_as_linear.measures`: token laws (Gaussian and non-Gaussian) with known moments.
- :mod:`~softmax_as_linear.tilting`: the tilted measure behind softmax attention and the infinite-prompt
  limit of any token law (closed form, importance sampling, quadrature).
- :mod:`~softmax_as_linear.concentration`: finite-prompt attention against its infinite-prompt limit
  (Propositions 3.1 and 3.4, Figure 1): streaming estimators of the output and gradient gaps.
- :mod:`~softmax_as_linear.dynamics`: trained runs read against the theory (distance to the infinite-prompt
  flow, Theorem 4.3; outcome of every seed). :mod:`~softmax_as_linear.icl_figures`: the figures of the
  regression chapters (paper Figures 2-4, 6-8). :mod:`~softmax_as_linear.training_panel`: training from a
  widget, in the background, with progress and a Stop button.
- :mod:`~softmax_as_linear.artifacts`: result files written atomically.
- :mod:`~softmax_as_linear.figures` and :mod:`~softmax_as_linear.widgets`: the plotly style and figure helpers, and the live ipywidgets panels.
- :mod:`~softmax_as_linear.devices`: choice of device.
"""
from . import artifacts, attention, devices, figures, icl, measures, models, widgets
from . import tilting
from . import concentration
from .attention import (
    gaussian_attention,
    gaussian_linear_attention,
    linear_attention,
    softmax_attention,
    tilted_gaussian,
)
from .icl import (
    RegressionTask,
    bayes_risk,
    block_init,
    infinite_prompt_risk,
    kms_covariance,
    limit_parameters,
    optimal_linear_risk,
)
from .measures import TokenLaw
from .models import AttentionModel
from .tilting import infinite_prompt_linear, infinite_prompt_softmax

__version__ = "0.1.0"
