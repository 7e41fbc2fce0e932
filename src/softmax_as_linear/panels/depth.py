"""Chapter 7's live panel: a deep network's token cloud layer by layer against the Gaussian recursion."""
from __future__ import annotations

import math

import ipywidgets as W
import torch

from ..figures import depth as figures
from ..theory import depth
from ..theory.depth import family_weights
from . import widgets

FAMILIES = depth.PLANE_FAMILIES
_SCORE_BUDGET = 6e7  # prompts x (K - 1) x L^2 scores the panel computes at most (about a second on a laptop)
_PROMPTS = 4


#: The largest token variance the panel draws (beyond it the clouds are too spread to show anything).
_LARGEST_VARIANCE = 1e4


def _exploding_layer(path) -> int | None:
    """The first layer whose token covariance has a variance above :data:`_LARGEST_VARIANCE` (or is not finite)."""
    spread = torch.linalg.eigvalsh(path.covs).amax(-1)
    exploded = ~torch.isfinite(spread) | (spread > _LARGEST_VARIANCE)
    return int(exploded.nonzero()[0]) if exploded.any() else None


def explosion_advice(layer: int, activation: str, mean_x: float, U: torch.Tensor, V: torch.Tensor) -> str:
    r"""What the covariance's explosion by ``layer`` depends on, from the recursion
    (:func:`~softmax_as_linear.theory.depth.layer_affine_map`): each layer maps :math:`\Gamma` to
    :math:`A\Gamma A^\top`, with :math:`A = I + V\Gamma U` for softmax (the mean does not enter) and
    :math:`A = I + V(\Gamma + mm^\top)U` for linear attention (the mean's outer product weighs as much as the
    covariance). For linear attention with :math:`m \neq 0`, the advice says whether centring the tokens
    (:math:`m_1 = 0`, the same weights) keeps the recursion drawable."""
    start = f"the token covariance explodes by layer {layer} (largest variance above 10⁴): "
    if activation == "softmax":
        return start + ("softmax attention maps it through A = I + VΓU, which does not depend on the tokens' mean: "
                        "lower the scale of U or of V, or the number of layers")
    start += ("linear attention maps it through A = I + V(Γ + m mᵀ)U, which depends on the tokens' mean m through "
              "m mᵀ as much as on their covariance Γ: ")
    if mean_x == 0:
        return start + "lower the scale of U or of V, or the number of layers"
    centred = torch.zeros(2, dtype=torch.float64)
    eye = torch.eye(2, dtype=torch.float64)
    if _exploding_layer(depth.gaussian_recursion(centred, eye, centred, U, V, activation)) is None:
        return start + (f"bring the mean m₁ = {mean_x:g} towards 0 (at m₁ = 0 it stays below 10⁴), or lower the "
                        "scale of U or of V, or the number of layers")
    return start + "lower the scale of U or of V, or the number of layers (at m₁ = 0 it explodes too)"


def layer_figure(family: str, K: int, u: float, v: float, L: int, activation: str = "softmax", mean_x: float = 0.0,
                 seed: int = 0):
    """The figure the panel draws: :func:`~softmax_as_linear.figures.depth.layer_cloud_figure` of one prompt of ``L``
    tokens of :math:`N((m_x, 0), I)` through the family's ``K`` layers, with the queries of four prompts."""
    K, L = int(K), int(L)
    if (K - 1) * L**2 * _PROMPTS > _SCORE_BUDGET:
        largest = int(math.sqrt(_SCORE_BUDGET / (_PROMPTS * max(K - 1, 1))))
        raise ValueError(f"{K} layers of L = {L:,} tokens take too long here: lower L to {largest:,} or fewer layers")
    U, V = family_weights(family, K, u, v)
    mean = torch.tensor([mean_x, 0.0], dtype=torch.float64)
    path = depth.gaussian_recursion(mean, torch.eye(2, dtype=torch.float64), mean, U, V, activation)
    layer = _exploding_layer(path)
    if layer is not None:
        raise ValueError(explosion_advice(layer, activation, mean_x, U, V))
    finite, path = depth.layer_outputs(mean, torch.eye(2, dtype=torch.float64), U, V, L, _PROMPTS, seed, activation)
    indices = depth.path_tail_indices(path, U)
    heavy = [str(k + 1) for k in range(K) if float(indices[k]) >= 0.5]
    title = (f"{activation.capitalize()} attention, {family}, K = {K}: "
             + (f"heavy-tailed layers {', '.join(heavy)}" if heavy else "every layer light-tailed"))
    return figures.layer_cloud_figure(finite.tokens[:, 0, :600], path.means, path.covs, finite.queries, path.queries,
                                      length=L, title=title)


def depth_panel(*, title: str = "A deep network against its Gaussian recursion, live") -> widgets.Panel:
    """Chapter 7's panel: family of weights, number of layers K, scales of U and V, prompt length L, attention and
    the mean of the tokens; the token cloud of one prompt after each layer (slider) against the recursion's
    ellipses, and four queries through the network and through the recursion."""
    def slider(description, value, low, high, step):
        return W.FloatSlider(value=value, min=low, max=high, step=step, description=description,
                             continuous_update=False)

    controls = {
        "family": W.Dropdown(options=FAMILIES, value="quarter turns", description="weights"),
        "K": W.IntSlider(value=3, min=1, max=8, description="layers K", continuous_update=False),
        "u": slider("scale of U", 0.45, 0.0, 1.5, 0.05),
        "v": slider("scale of V", 0.45, 0.0, 1.5, 0.05),
        "L": widgets.log_slider("prompt length L", 1000, 10, 10_000, integer=True),
        "activation": W.Dropdown(options=("softmax", "linear"), value="softmax", description="attention"),
        "mean_x": slider("mean m₁", 0.0, -1.5, 1.5, 0.1),
    }
    return widgets.panel(controls, layer_figure, columns=3, title=title)
