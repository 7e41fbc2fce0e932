r"""The live panels of the measure-view chapters: a prompt against its law (Chapter 1) and Lemma 2.1 (Chapter 2).

- :func:`measure_panel`: attention of a prompt of :math:`L` tokens against the attention
  :math:`T[\mu](z)` of its law, for any token law, scale of :math:`U` and query direction;
- :func:`lemma_panel`: Lemma 2.1 for a Gaussian :math:`\mu = N(m, \Gamma)` in the plane, every
  parameter on a slider.
"""
from __future__ import annotations

import math

import ipywidgets as W
import torch

from ..experiments import live_measures
from ..figures import lemma_2_1, measure_view
from ..figures.geometry import rotation
from ..registry import LAW_KINDS, LAW_NAMES
from ..theory.measures import OutsideTiltDomain, TokenLaw
from . import widgets


def measure_panel(laws: dict[str, TokenLaw], U: torch.Tensor, V: torch.Tensor, circle: torch.Tensor, *,
                  radius: float = 1.5, title: str = "Attention of a prompt and of its law") -> widgets.Panel:
    """Chapter 1's panel: ``laws`` by kind (2-D, with a ``"gaussian"`` reference), the direction ``U`` and
    ``V`` of the attention (``U`` is scaled by the panel), the ``circle`` of queries drawn as the limit's
    image, and queries on the circle of ``radius``."""
    def draw(L, law, scale, direction):
        angle = math.radians(direction)
        z = torch.tensor([radius * math.cos(angle), radius * math.sin(angle)], dtype=torch.float64)
        try:
            return measure_view.measure_view_figure(**live_measures.prompt_against_law(
                laws[law], laws["gaussian"], circle, z, scale * U, V, L))
        except OutsideTiltDomain as error:
            raise ValueError(f"{LAW_NAMES[law]} tokens: e^(z'ᵀUz) has no finite mean under μ for this query z "
                             f"(a coordinate of Uz, in the law's scale, is {error.largest:.2g}, at least √2), so "
                             f"T[μ](z) does not exist. Lower the scale of U (now {scale:.2g}) or turn the "
                             "query.") from None

    controls = {
        "L": widgets.log_slider("prompt length L", 1_000, 10, 100_000, integer=True),
        "law": W.Dropdown(options=[(LAW_NAMES[k], k) for k in LAW_KINDS if k in laws], value="gaussian",
                          description="token law"),
        "scale": W.FloatSlider(value=0.6, min=0.1, max=1.5, step=0.05, description="scale of U",
                               continuous_update=False),
        "direction": W.FloatSlider(value=45, min=0, max=360, step=15, description="query angle (°)",
                                   continuous_update=False),
    }
    return widgets.panel(controls, draw, columns=2, title=title)


def lemma_panel(circle: torch.Tensor, *, title: str = "Lemma 2.1, live") -> widgets.Panel:
    """Chapter 2's panel: :math:`\\mu = N(m, \\Gamma)` with :math:`\\Gamma` from two eigenvalues and a
    rotation, :math:`U` a scaled rotation, :math:`V` a rotation, a query :math:`z`; the ``circle`` of
    queries drawn with its image."""
    def draw(m1, m2, eig1, eig2, rotate, u_scale, u_angle, v_angle, z1, z2):
        R = rotation(rotate)
        covariance = R @ torch.diag(torch.tensor([eig1, eig2], dtype=torch.float64)) @ R.T
        law = TokenLaw("gaussian", torch.tensor([m1, m2], dtype=torch.float64), covariance)
        z = torch.tensor([z1, z2], dtype=torch.float64)
        return lemma_2_1.lemma_figure(**live_measures.lemma_in_the_plane(law, z, u_scale * rotation(u_angle),
                                                                            rotation(v_angle), circle))

    def slider(description, value, low, high, step):
        return W.FloatSlider(value=value, min=low, max=high, step=step, description=description,
                             continuous_update=False)

    controls = {
        "m1": slider("m₁", 0.6, -1.5, 1.5, 0.1), "m2": slider("m₂", -0.4, -1.5, 1.5, 0.1),
        "eig1": slider("eigenvalue 1", 1.2, 0.05, 2.0, 0.05), "eig2": slider("eigenvalue 2", 0.35, 0.05, 2.0, 0.05),
        "rotate": slider("rotation of Γ (°)", 35, 0, 180, 5),
        "u_scale": slider("scale of U", 0.63, 0.0, 1.5, 0.05),
        "u_angle": slider("rotation of U (°)", 25, -180, 180, 5),
        "v_angle": slider("rotation of V (°)", 0, -180, 180, 5),
        "z1": slider("z₁", 0.8, -2, 2, 0.1), "z2": slider("z₂", 0.5, -2, 2, 0.1),
    }
    return widgets.panel(controls, draw, columns=3, title=title)
