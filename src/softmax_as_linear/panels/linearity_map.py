"""Chapter 9's live panel: the map of where trained softmax attention is linear attention, with the regimes and
the measure's variant picked."""
from __future__ import annotations

import ipywidgets as W

from ..experiments import linearity_map as lm
from ..figures import linearity_map as figures
from . import widgets

VARIANT_LABELS = {"in units of the zero predictor's risk": "zero",
                  "share of linear attention's excess risk": "excess"}


def map_figure(regimes, variant: str = "zero", theory: bool = True, folder=None):
    """The figure the panel draws: :func:`~softmax_as_linear.figures.linearity_map.linearity_map_figure` of the
    ``regimes`` (names of :data:`~softmax_as_linear.experiments.linearity_map.NAMES`) in ``variant``, with the values
    at :math:`L = \\infty` where theory gives them when ``theory``."""
    regimes = tuple(regimes)
    if not regimes:
        raise ValueError("pick at least one regime in the list (Ctrl or Shift and click to pick several)")
    variant = VARIANT_LABELS.get(variant, variant)
    maps = lm.linearity_map(variant, regimes, folder=folder)
    return figures.linearity_map_figure(maps, lm.limits(variant, folder) if theory else None, variant)


def linearity_map_panel(*, title: str = "Where softmax attention is linear attention, regime by regime") \
        -> widgets.Panel:
    """Chapter 9's panel: pick the regimes (several at once), the measure's variant and whether to draw the values
    at :math:`L = \\infty`; the map is read from the course's result files (no training)."""
    options = [(lm.regime(name).label, name) for name in lm.NAMES]
    controls = {
        "regimes": W.SelectMultiple(options=options, value=tuple(lm.NAMES), rows=len(options),
                                    description="regimes"),
        "variant": W.Dropdown(options=tuple(VARIANT_LABELS), value=next(iter(VARIANT_LABELS)), description="measure"),
        "theory": W.Checkbox(value=True, description="theory at L = ∞"),
    }
    return widgets.panel(controls, map_figure, columns=1, title=title)
