r"""The batched model of a sweep: every run's parameters stacked, and the forward pass of all runs at once.

A sweep trains, for every seed, prompt length ``L`` and activation, one run; all live in tensors of shape
``(S, nL, nA, ...)`` (seeds, lengths, activations) and :class:`SweepModel` predicts them together on one
batch of prompts of ``L_max`` tokens per seed (the run of length ``L`` reads the first ``L`` tokens):

* **Cheap linear attention.** Normalised linear attention only needs the prefix second moments
  :math:`M_L = \frac1L \sum_{i \le L} z_i z_i^\top` (one cumulative sum per batch, shared by all
  lengths): :math:`\hat y = v^\top M_L U z_q`.
* **Softmax by length buckets.** Scores of all softmax runs of similar length are one batched matrix
  product over the bucket's longest prefix, with the positions past each run's ``L`` masked
  (:class:`SoftmaxPrediction`, which forms the gradients in the forward pass). On a GPU, where arithmetic
  is cheap and kernel launches are not, all lengths form one bucket, and where Triton is installed the
  softmax runs of a bucket are one kernel (:mod:`~softmax_as_linear.engine.fused_softmax`).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core import checks, seeding
from ..theory.limit_model import prediction_from_scores
from ..theory.models import AttentionModel, uv_from_weights
from ..theory.regression import block_init
from . import fused_softmax
from .sweep import TrainConfig


class SoftmaxPrediction(torch.autograd.Function):
    r"""Softmax-attention predictions of many runs on shared prompts, with their gradients formed in the forward pass.

    For run ``j`` of prompt ``b``: :math:`\hat y = \sum_i a_i c_i` with :math:`a = \operatorname{softmax}(z_i^\top u + m_i)`
    and :math:`c_i = v^\top z_i`. Its gradients are
    :math:`\partial \hat y / \partial v = \bar z = \sum_i a_i z_i` and
    :math:`\partial \hat y / \partial u = \sum_i a_i (c_i - \hat y) z_i = \sum_i a_i c_i z_i - \hat y \bar z`.
    With :math:`e_i = \exp(z_i^\top u + m_i - \max)`, two matrix products over the prompt give
    everything: ``[u; v]`` against the tokens (scores, values), then the tokens with a row of ones
    against ``[e; e * c]`` (:math:`\sum e_i z_i`, :math:`\sum e_i c_i z_i`, and the normalisers
    :math:`\sum e_i`, :math:`\sum e_i c_i` from the row of ones). The weights are never normalised
    over the prompt, and the backward pass touches no token.

    Token positions are the last axis (reductions over contiguous memory), and both products read
    the tokens in that one layout: a batched product with a transposed operand costs nothing extra.

    On a GPU the same sums come from one fused kernel (:mod:`~softmax_as_linear.engine.fused_softmax`) that
    never writes the ``(N, n, L)`` scores.

    tokens_t ``(N, D + 1, L)``: the tokens as columns, then a row of ones; u and v ``(N, n, D)``;
    mask ``(n, L)`` (0, or -inf past a run's length) and lengths ``(n,)`` (the same, as run lengths)
    -> predictions ``(N, n)``.
    """

    @staticmethod
    def forward(ctx, tokens_t, u, v, mask, lengths):
        fused = fused_softmax.try_softmax_sums(tokens_t, u, v, lengths)
        if fused is not None:
            pred, mean_token, grad_u = fused
            if any(ctx.needs_input_grad):
                ctx.save_for_backward(grad_u, mean_token)
            return pred
        n, D = u.shape[1], u.shape[2]
        both = torch.cat([u, v], dim=1) @ tokens_t[:, :D]  # (N, 2n, L): scores, then values c_i
        e = both[:, :n].add_(mask)
        e.sub_(e.amax(-1, keepdim=True)).exp_()
        both[:, n:].mul_(e)  # e_i c_i
        sums = (tokens_t @ both.transpose(1, 2)).transpose(1, 2)  # (N, 2n, D + 1)
        norm = sums[:, :n, D:]  # sum e_i, (N, n, 1)
        pred = (sums[:, n:, D:] / norm).squeeze(-1)
        if any(ctx.needs_input_grad):
            mean_token = sums[:, :n, :D] / norm
            ctx.save_for_backward(sums[:, n:, :D] / norm - pred.unsqueeze(-1) * mean_token, mean_token)
        return pred

    @staticmethod
    def backward(ctx, grad):
        d_u, d_v = ctx.saved_tensors
        g = grad.unsqueeze(-1)
        return None, d_u * g, d_v * g, None, None


class SweepModel:
    """The batched model of a sweep: stacked parameters ``(S, nL, nA, ...)`` and the forward pass of every run at once.

    ``SweepModel(cfg, device, init_weights)`` builds the initial parameters of ``cfg`` (the
    ``"init"`` stream of :mod:`~softmax_as_linear.core.seeding`); :meth:`predict` and :meth:`risk` take a
    batch of :class:`SweepData`.
    """

    def __init__(self, cfg: TrainConfig, device: torch.device, init_weights: dict | None):
        self.cfg, self.device = cfg, device
        self.dtype = getattr(torch, cfg.dtype)
        self.task = cfg.task()
        self.shape = (len(cfg.seeds), len(cfg.lengths), len(cfg.activations))
        self.params = self._initial_params(init_weights)
        lengths = torch.tensor(cfg.lengths, device=device)
        self.length_divisor = lengths.to(self.dtype)[:, None, None]
        self.soft = cfg.activations.index("softmax") if "softmax" in cfg.activations else None
        self.lin = cfg.activations.index("linear") if "linear" in cfg.activations else None
        # infinite-prompt models: (index, activation of the limit)
        self.limits = [(cfg.activations.index(m), m.removesuffix("_limit")) for m in ("softmax_limit", "linear_limit")
                       if m in cfg.activations]
        waste = 1.25 if device.type == "cpu" else math.inf
        # (slice of length indices, longest length): slices, because indexing by a list would copy it to the device
        self.buckets = [(slice(idx[0], idx[-1] + 1), cfg.lengths[idx[-1]]) for idx in _length_buckets(cfg.lengths, waste)]
        self.masks = [torch.where(torch.arange(Lb, device=device)[None, :] < lengths[sl][:, None], 0.0,
                                  float("-inf")).to(self.dtype) for sl, Lb in self.buckets]
        self.bucket_lengths = [lengths[sl].to(torch.int32) for sl, _ in self.buckets]
        self.zero_risk = self.task.zero_risk()

    def _initial_params(self, init_weights):
        cfg, S, D = self.cfg, len(self.cfg.seeds), self.cfg.D
        if cfg.init == "given":
            if not init_weights:
                raise ValueError("init_weights must be given when init == 'given'")
            names = ("U", "V") if cfg.parametrisation == "uv" else ("W_Q", "W_K", "W_V", "W_O")
            missing = [n for n in names if n not in init_weights]
            if missing:
                raise ValueError(f"init_weights lacks {missing} for parametrisation {cfg.parametrisation!r}")
            per_seed = {n: checks.finite(f"init_weights[{n!r}]", torch.as_tensor(init_weights[n], dtype=torch.float64))
                        for n in names}
            for n, w in per_seed.items():
                expected = (1, D) if n == "W_O" else (D, D)
                if tuple(w.shape[-2:]) != expected:
                    raise ValueError(f"init_weights[{n!r}] must have shape {expected}, got {tuple(w.shape)}")
            per_seed = {n: w.expand(S, *w.shape[-2:]) if w.ndim == 2 else w for n, w in per_seed.items()}
        elif cfg.init == "block":
            U, V = block_init(self.task, cfg.alpha)
            per_seed = {"U": U.expand(S, D, D), "V": V.expand(S, D, D)}
        else:
            models = [AttentionModel(D, seed=seeding.stream_seed(seed, "init")) for seed in cfg.seeds]
            weights = {n: torch.stack([m.weights()[n].detach().double() for m in models]) * cfg.init_scale
                       for n in ("W_Q", "W_K", "W_V", "W_O")}
            if cfg.parametrisation == "uv":
                U, V = uv_from_weights(weights["W_Q"], weights["W_K"], weights["W_V"], weights["W_O"])
                per_seed = {"U": U, "V": V}
            else:
                per_seed = weights
        S_, nL, nA = S, len(cfg.lengths), len(cfg.activations)
        return {n: w[:, None, None].expand(S_, nL, nA, *w.shape[1:]).to(self.device, self.dtype).clone()
                .requires_grad_(True) for n, w in per_seed.items()}

    def uv(self) -> tuple[Tensor, Tensor]:
        """U ``(S, nL, nA, D, D)`` and the prediction row v ``(S, nL, nA, D)``."""
        p = self.params
        if "U" in p:
            return p["U"], p["V"][..., -1, :]
        U, V = uv_from_weights(p["W_Q"], p["W_K"], p["W_V"], p["W_O"])
        return U, V[..., -1, :]

    def predict(self, tokens: Tensor, query: Tensor, w: Tensor | None = None) -> Tensor:
        """tokens ``(S, B, L_max, D)``, query ``(S, B, D)``, tasks w ``(S, B, d)`` -> predictions ``(S, nL, nA, B)``.

        The infinite-prompt models read the task vectors ``w`` and the queries, no token (``w`` is needed
        only when the sweep has them)."""
        U, v = self.uv()
        S, nL, nA = self.shape
        B, D = tokens.shape[1], tokens.shape[-1]
        u = torch.einsum("slaij,sbj->slabi", U, query)  # U z_q for every run and prompt
        out = tokens.new_zeros(S, nL, nA, B)
        columns = []
        flat_t = tokens.new_empty(S * B, D + 1, tokens.shape[2])  # tokens as columns, then a row of ones
        flat_t[:, :D] = tokens.reshape(S * B, -1, D).transpose(1, 2)
        flat_t[:, D] = 1.0
        if self.soft is not None:
            for (sl, Lb), mask, bucket_lengths in zip(self.buckets, self.masks, self.bucket_lengths):
                n = mask.shape[0]
                u_b = u[:, sl, self.soft].transpose(1, 2).reshape(S * B, n, D)
                v_b = v[:, None, sl, self.soft].expand(S, B, n, D).reshape(S * B, n, D)
                pred = SoftmaxPrediction.apply(flat_t[:, :, :Lb], u_b, v_b, mask, bucket_lengths)  # (S*B, n)
                columns.append((sl, self.soft, pred.reshape(S, B, n).transpose(1, 2)))
        if self.lin is not None:
            moments = _prefix_moments(flat_t[:, :D], self.cfg.lengths, self.length_divisor).reshape(S, B, nL, D, D)
            pred = torch.einsum("sld,sbldk,slbk->slb", v[:, :, self.lin], moments, u[:, :, self.lin])
            columns.append((slice(None), self.lin, pred))
        for a, activation in self.limits:
            if w is None:
                raise ValueError("w must be given: the sweep trains infinite-prompt models")
            pred = prediction_from_scores(u[:, :, a], v[:, :, a, None, :], self.task, w[:, None], activation)
            columns.append((slice(None), a, pred))
        for idx, a, pred in columns:
            out[:, idx, a] = pred
        return out

    def losses(self, tokens: Tensor, query: Tensor, target: Tensor, w: Tensor | None = None) -> Tensor:
        """Half squared error of every run on every prompt, ``(S, nL, nA, B)``."""
        return 0.5 * (self.predict(tokens, query, w) - target[:, None, None, :]) ** 2

    def risk(self, tokens: Tensor, query: Tensor, target: Tensor, w: Tensor | None = None) -> Tensor:
        """Risk R = 1/2 MSE of every run on the batch, ``(S, nL, nA)``."""
        return self.losses(tokens, query, target, w).mean(-1)


def _prefix_moments(tokens_t: Tensor, lengths: tuple[int, ...], divisor: Tensor) -> Tensor:
    r""":math:`M_L = \frac1L \sum_{i \le L} z_i z_i^\top` for every ``L``.

    tokens_t ``(N, D, L_max)``, divisor ``(nL, 1, 1)`` holding the lengths -> ``(N, nL, D, D)``: one
    batched product per segment between consecutive lengths, then a cumulative sum over segments.
    """
    bounds = (0, *lengths)
    segments = [tokens_t[:, :, a:b] for a, b in zip(bounds, bounds[1:])]
    sums = torch.stack([z @ z.transpose(1, 2) for z in segments], dim=1).cumsum(1)
    return sums / divisor


def _length_buckets(lengths: tuple[int, ...], waste: float = 1.25) -> list[list[int]]:
    """Group consecutive lengths while padding every group to its longest costs at most ``waste`` x."""
    buckets, current = [], []
    for i, L in enumerate(lengths):
        trial = current + [i]
        if current and L * len(trial) > waste * sum(lengths[j] for j in trial):
            buckets.append(current)
            trial = [i]
        current = trial
    buckets.append(current)
    return buckets
