r"""Chapter 3's live panel: the output gap :math:`E_L` against the prompt length, recomputed for any
token law, scale :math:`\sigma`, size :math:`\|U\|`, query convention and range of :math:`L`.

The fitted log-log slope (Proposition 3.1 predicts :math:`-1` for sub-Gaussian tokens) is in the
figure's title. Laplace tokens have a limit :math:`T[\mu](z)` only for the queries with every
:math:`|\sigma (Uz)_j| < \sqrt 2`; the panel says so, with the values to lower, when a drawn query has none.
"""
from __future__ import annotations

import math

import ipywidgets as W
import torch

from ..figures import concentration
from ..registry import LAW_KINDS
from ..theory import concentration as conc
from ..theory.measures import OutsideTiltDomain, TokenLaw
from . import widgets

GRID = (10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)


def gap_panel(U: torch.Tensor, V: torch.Tensor, *, lengths=GRID, n_prompts: int = 32, n_queries: int = 4,
              seed: int = 1, title: str = "Output gap E_L, recomputed live") -> widgets.Panel:
    """The panel: tokens of ``law`` with covariance :math:`\\sigma^2 I_D`, attention parameters
    ``norm_U * U`` and ``V`` (``(D, D)``; ``U`` of norm 1), the gap curve over the chosen range of ``lengths``."""
    D = U.shape[-1]
    lengths = tuple(lengths)

    def draw(sigma, norm_U, law, query_in_measure, L_range):
        grid = [L for L in lengths if L_range[0] <= L <= L_range[1]]
        if len(grid) < 3:
            raise ValueError("L range: choose at least 3 lengths to fit a slope")
        try:
            curve = conc.gap_curve(TokenLaw.standard(law, D, sigma), norm_U * U, V, grid, n_prompts=n_prompts,
                                   n_queries=n_queries, include_query=query_in_measure, dtype=torch.float32, seed=seed)
        except OutsideTiltDomain as error:
            product = sigma * norm_U
            raise ValueError(
                f"Laplace tokens: T[μ](z) exists only if every |σ (Uz)_j| < √2, and a drawn query z gives "
                f"{error.largest:.2g}. Lower σ or ‖U‖ (σ‖U‖ = {product:.2g}; below about "
                f"{0.95 * product * math.sqrt(2) / error.largest:.2g} these queries pass). No σ > 0 passes for "
                "every Gaussian query: see the exercise on Laplace tokens.") from None
        slope, se = curve.slope()
        return concentration.gap_figure(curve, f"{law} tokens, σ = {sigma:.2g}, ‖U‖ = {norm_U:.2g}: "
                                              f"slope {slope:.2f} ± {se:.2f}")

    controls = {
        "sigma": widgets.log_slider("σ", 1.0, 0.1, 4.0),
        "norm_U": widgets.log_slider("‖U‖", 1.0, 0.25, 4.0),
        "law": W.Dropdown(options=list(LAW_KINDS), value="gaussian", description="law"),
        "query_in_measure": W.Checkbox(value=False, description="query in the measure"),
        "L_range": W.SelectionRangeSlider(options=list(lengths), index=(0, min(6, len(lengths) - 1)),
                                          description="L range", continuous_update=False),
    }
    return widgets.panel(controls, draw, title=title)
