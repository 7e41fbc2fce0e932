r"""The paper's experimental model: one attention head with four matrices (Section 6, Appendix A.1).

.. math::
    \hat y = W_O \sum_{i=1}^L a_i\, W_V z_i, \qquad
    a_i = \operatorname{softmax}_i\Big(\tfrac{\langle W_K z_i, W_Q z_q\rangle}{\sqrt D}\Big)
    \quad\text{or} \\ a_i = \tfrac{1}{L}\tfrac{\langle W_K z_i, W_Q z_q\rangle}{\sqrt D}.

In the :math:`(U, V)` view of the theory, :math:`U = W_K^\top W_Q / \sqrt D` and the last row of
:math:`V` is :math:`W_O W_V` (the other rows never reach the prediction and are zero here), so
``prediction = attention(tokens, query, U, V)[..., -1]``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..core import checks
from ..registry import ACTIVATIONS, LIMIT_MODELS, MODELS
from .attention import (
    linear_attention,
    linear_attention_unchecked,
    softmax_attention,
    softmax_attention_unchecked,
)


def uv_from_weights(W_Q: Tensor, W_K: Tensor, W_V: Tensor, W_O: Tensor) -> tuple[Tensor, Tensor]:
    r"""The :math:`(U, V)` view of four-matrix weights.

    W_Q, W_K, W_V ``(..., D, D)``, W_O ``(..., 1, D)`` -> U, V ``(..., D, D)`` with
    :math:`U = W_K^\top W_Q / \sqrt D` and :math:`V` zero but for its last row :math:`W_O W_V`.
    """
    D = W_Q.shape[-1]
    U = W_K.transpose(-1, -2) @ W_Q / math.sqrt(D)
    V = torch.cat([torch.zeros_like(W_V[..., :-1, :]), W_O @ W_V], dim=-2)
    return U, V


def predict(tokens: Tensor, query: Tensor, U: Tensor, V: Tensor, activation: str = "softmax") -> Tensor:
    """Prediction of the :math:`(U, V)` model: the last coordinate of the attention output.

    tokens ``(..., L, D)``, query ``(..., D)``, U, V ``(..., D, D)`` -> ``(...)``.
    """
    checks.one_of("activation", activation, ACTIVATIONS)
    attend = softmax_attention if activation == "softmax" else linear_attention
    return attend(tokens, query, U, V)[..., -1]


def predict_unchecked(tokens: Tensor, query: Tensor, U: Tensor, V: Tensor, activation: str) -> Tensor:
    """:func:`predict` without checks of the tensors, for training loops. ``activation`` is still told apart
    exactly: an infinite-prompt model (``"softmax_limit"``, ``"linear_limit"``) does not read the prompt, so it
    raises here (:func:`predict_model` predicts every model of a sweep)."""
    if activation == "softmax":
        return softmax_attention_unchecked(tokens, query, U, V)[..., -1]
    if activation == "linear":
        return linear_attention_unchecked(tokens, query, U, V)[..., -1]
    raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {activation!r}"
                     + (" (an infinite-prompt model reads the task, not the prompt: use predict_model)"
                        if activation in LIMIT_MODELS else ""))


def predict_model(model: str, batch, task, U: Tensor, V: Tensor) -> Tensor:
    r"""Prediction of any model of a sweep (:data:`~softmax_as_linear.registry.MODELS`) on a batch of prompts.

    ``"softmax"``/``"linear"``: attention over the batch's prompt (:func:`predict_unchecked`);
    ``"softmax_limit"``/``"linear_limit"``: the infinite-prompt prediction of that activation for the batch's
    task :math:`w` and query (:func:`~softmax_as_linear.theory.limit_model.infinite_prompt_prediction`).
    ``batch``: a :class:`~softmax_as_linear.theory.regression.Batch` (tokens ``(..., L, D)``, query
    ``(..., D)``, w ``(..., d)``) of ``task``; U, V ``(D, D)`` or broadcasting -> ``(...)``.
    """
    checks.one_of("model", model, MODELS)
    if model in LIMIT_MODELS:
        from .limit_model import infinite_prompt_prediction

        return infinite_prompt_prediction(U, V, task, batch.w, batch.query, model.removesuffix("_limit"))
    return predict_unchecked(batch.tokens, batch.query, U, V, model)


class AttentionModel(nn.Module):
    """Single-head attention with query, key, value and output matrices, as in the paper's experiments.

    Args:
        D: token dimension (``d + 1`` for regression prompts).
        activation: ``"softmax"`` or ``"linear"`` (normalised by ``1/L``).
        seed: if given, the weights are PyTorch's default ``nn.Linear`` initialisation drawn from
            this seed, so a softmax and a linear model built with the same seed share their weights.
    """

    def __init__(self, D: int, activation: str = "softmax", seed: int | None = None):
        super().__init__()
        self.D = checks.positive_int("D", D)
        self.activation = checks.one_of("activation", activation, ACTIVATIONS)
        with torch.random.fork_rng(enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            self.W_Q = nn.Linear(D, D, bias=False)
            self.W_K = nn.Linear(D, D, bias=False)
            self.W_V = nn.Linear(D, D, bias=False)
            self.W_O = nn.Linear(D, 1, bias=False)

    def forward(self, tokens: Tensor, query: Tensor) -> Tensor:
        """tokens ``(..., L, D)``, query ``(..., D)`` -> prediction ``(...)``.

        Projects every token by ``W_K`` and ``W_V`` as a textbook implementation does; see
        :meth:`uv` for the cheaper equivalent.
        """
        keys = self.W_K(tokens)  # (..., L, D)
        values = self.W_V(tokens)  # (..., L, D)
        q = self.W_Q(query).unsqueeze(-1)  # (..., D, 1)
        s = (keys @ q).squeeze(-1) / math.sqrt(self.D)  # (..., L)
        if self.activation == "softmax":
            weights = torch.softmax(s, dim=-1)
        else:
            weights = s / tokens.shape[-2]
        return self.W_O((weights.unsqueeze(-2) @ values).squeeze(-2)).squeeze(-1)

    def uv(self) -> tuple[Tensor, Tensor]:
        """The :math:`(U, V)` view, each ``(D, D)``; differentiable with respect to the four matrices."""
        return uv_from_weights(self.W_Q.weight, self.W_K.weight, self.W_V.weight, self.W_O.weight)

    def weights(self) -> dict[str, Tensor]:
        """The four matrices by name (``W_O`` is ``(1, D)``)."""
        return {"W_Q": self.W_Q.weight, "W_K": self.W_K.weight, "W_V": self.W_V.weight, "W_O": self.W_O.weight}
