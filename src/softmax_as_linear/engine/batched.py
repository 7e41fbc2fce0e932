r"""The batched model of a sweep: every run's parameters stacked, and the forward pass of all runs at once.

A sweep trains, for every seed, prompt length ``L`` and activation, one run; all live in tensors of shape
``(S, nL, nA, ...)`` (seeds, lengths, activations) and :class:`SweepModel` predicts them together on one
batch of prompts of ``L_max`` tokens per seed (the run of length ``L`` reads the first ``L`` tokens):

* **Cheap linear attention.** Normalised linear attention only needs the prefix second moments
  :math:`M_L = \frac1L \sum_{i \le L} z_i z_i^\top` (one batched product per segment between consecutive
  lengths, shared by all lengths): :math:`\hat y = v^\top M_L U z_q`. They depend on the prompts alone, so
  on a CPU they are formed with the tokens' column layout by :meth:`SweepModel.prepare`, which the data
  thread runs while the previous step computes (:mod:`~softmax_as_linear.engine.data`).
* **Softmax by length buckets.** Scores of all softmax runs of similar length are one batched matrix
  product over the bucket's longest prefix, with the positions past each run's ``L`` masked, and the
  gradients are formed in the forward pass. On a CPU (:class:`SoftmaxSweep`) every bucket is five
  operations on one ``(prompts, runs, L)`` tensor, the softmax itself one fused operation. On a GPU, where
  arithmetic is cheap and kernel launches are not, all lengths form one bucket
  (:class:`SoftmaxPrediction`), and where Triton is installed the softmax runs of a bucket are one kernel
  (:mod:`~softmax_as_linear.engine.gpu.fused_softmax`).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core import checks, seeding
from ..theory.flow_limits import block_init
from ..theory.limit_model import prediction_from_scores
from ..theory.models import AttentionModel, uv_from_weights
from .gpu import fused_softmax
from .sweep import TrainConfig


class SoftmaxPrediction(torch.autograd.Function):
    r"""Softmax-attention predictions of many runs on shared prompts, with their gradients formed in the forward pass.

    For run ``j`` of prompt ``b``: :math:`\hat y = \sum_i a_i c_i` with
    :math:`a = \operatorname{softmax}(z_i^\top u + m_i)` and :math:`c_i = v^\top z_i`. Its gradients are
    :math:`\partial \hat y / \partial v = \bar z = \sum_i a_i z_i` and
    :math:`\partial \hat y / \partial u = \sum_i a_i (c_i - \hat y) z_i = \sum_i a_i c_i z_i - \hat y \bar z`.
    With :math:`e_i = \exp(z_i^\top u + m_i - \max)`, two matrix products over the prompt give
    everything: ``[u; v]`` against the tokens (scores, values), then the tokens with a row of ones
    against ``[e; e * c]`` (:math:`\sum e_i z_i`, :math:`\sum e_i c_i z_i`, and the normalisers
    :math:`\sum e_i`, :math:`\sum e_i c_i` from the row of ones). The weights are never normalised
    over the prompt, and the backward pass touches no token.

    Token positions are the last axis (reductions over contiguous memory), and both products read
    the tokens in that one layout: a batched product with a transposed operand costs nothing extra.

    On a GPU the same sums come from one fused kernel (:mod:`~softmax_as_linear.engine.gpu.fused_softmax`) that
    never writes the ``(N, n, L)`` scores.

    tokens_t ``(N, D + 1, L)``: the tokens as columns, then a row of ones; u and v ``(N, n, D)``;
    mask ``(n, L)`` (0, or -inf past a run's length) and lengths ``(n,)`` (the same, as run lengths)
    -> predictions ``(N, n)``. ``fused``: use the fused kernel where it runs.
    """

    @staticmethod
    def forward(ctx, tokens_t, u, v, mask, lengths, fused=True):
        r"""Predictions ``(N, n)``; keeps :math:`\bar z` and the gradient of the prediction in ``u`` for the backward
        pass."""
        fused = fused_softmax.try_softmax_sums(tokens_t, u, v, lengths) if fused else None
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
        """The gradients in ``u`` and ``v``: ``grad`` times the kept gradients of the predictions (no token is read)."""
        d_u, d_v = ctx.saved_tensors
        g = grad.unsqueeze(-1)
        return None, d_u * g, d_v * g, None, None, None


class SoftmaxSweep(torch.autograd.Function):
    r"""Softmax-attention predictions of every softmax run of a sweep on a CPU, with their gradients formed
    in the forward pass: the same quantities as :class:`SoftmaxPrediction`, laid out for a CPU.

    For run ``j`` of prompt ``b``, with weights :math:`a = \operatorname{softmax}_{i \le L_j}(z_i^\top u)` and values
    :math:`c_i = v^\top z_i`: :math:`\bar z = \sum_i a_i z_i = \partial \hat y / \partial v`,
    :math:`\hat y = v^\top \bar z` and :math:`\partial \hat y / \partial u = \sum_i a_i c_i z_i - \hat y \bar z`.
    Per bucket of lengths (``plan``, from :class:`SweepModel`): one batched product of ``[u; v]`` with the
    tokens (scores and values), the mask past each run's length, one fused softmax, the values
    multiplied by the weights, and one batched product of ``[a; a c]`` with the tokens (:math:`\bar z` and
    :math:`\sum_i a_i c_i z_i`). The ``(N, 2n, L)`` tensor is written once and read three times, and every
    row of the softmax stays in the cache.

    u ``(S, nL, B, D)``, v ``(S, nL, D)``, tokens_t ``(S * B, D, L_max)`` (the tokens as columns), plan
    ``_BucketPlan`` -> predictions ``(S, nL, B)``.
    """

    @staticmethod
    def forward(ctx, u, v, tokens_t, plan):
        r"""Predictions ``(S, nL, B)``; keeps :math:`\bar z` and the gradient of the prediction in ``u`` for the
        backward pass."""
        S, nL, B, D = u.shape
        N = S * B
        u_rows = u.transpose(1, 2)  # (S, B, nL, D)
        v_rows = v[:, None].expand(S, B, nL, D)
        # [u; v] of each bucket's runs, bucket after bucket: one copy, then a view per bucket
        uv = torch.cat([part for start, stop, _, _ in plan.buckets
                        for part in (u_rows[:, :, start:stop], v_rows[:, :, start:stop])], dim=2).view(N, 2 * nL, D)
        sums, offset = [], 0
        for (start, stop, Lb, mask), both in zip(plan.buckets, plan.workspace(N, u.dtype)):
            n = stop - start
            tokens = tokens_t[:, :, :Lb]
            torch.bmm(uv[:, offset:offset + 2 * n], tokens, out=both)  # (N, 2n, Lb): scores, then values c_i
            scores = both[:, :n]
            if mask is not None:
                scores.add_(mask)
            weights = torch.softmax(scores, -1)
            both[:, n:].mul_(weights)  # a_i c_i
            scores.copy_(weights)
            sums.append(torch.bmm(tokens, both.transpose(1, 2)))  # (N, D, 2n): mean token, sum a_i c_i z_i
            offset += 2 * n
        sums = torch.cat(sums, dim=2).view(S, B, D, 2 * nL)
        mean_token = sums.index_select(3, plan.mean_columns)  # (S, B, D, nL)
        pred = (mean_token * v.transpose(1, 2)[:, None]).sum(2)  # (S, B, nL)
        if any(ctx.needs_input_grad):
            grad_u = sums.index_select(3, plan.weighted_columns).sub_(pred[:, :, None] * mean_token)
            ctx.save_for_backward(grad_u, mean_token)
        return pred.transpose(1, 2)

    @staticmethod
    def backward(ctx, grad):
        """The gradients in ``u`` and ``v``: ``grad`` times the kept gradients of the predictions (no token is read)."""
        grad_u, mean_token = ctx.saved_tensors
        g = grad.transpose(1, 2)[:, :, None]  # (S, B, 1, nL)
        return (grad_u * g).permute(0, 3, 1, 2), (mean_token * g).sum(1).transpose(1, 2), None, None


class _BucketPlan:
    """The softmax buckets of :class:`SoftmaxSweep`: ``buckets`` as (first length index, last + 1, longest
    length, mask ``(n, Lb)`` of 0 and -inf or None), and where each run's two sums land among the columns."""

    def __init__(self, lengths: tuple[int, ...], groups: list[list[int]], dtype, device):
        self.buckets, mean, weighted, offset = [], [0] * len(lengths), [0] * len(lengths), 0
        for group in groups:
            start, stop, Lb = group[0], group[-1] + 1, lengths[group[-1]]
            runs = torch.tensor(lengths[start:stop], device=device)
            mask = (torch.where(torch.arange(Lb, device=device)[None, :] < runs[:, None], 0.0, float("-inf")).to(dtype)
                    if stop - start > 1 else None)
            self.buckets.append((start, stop, Lb, mask))
            for k, j in enumerate(range(start, stop)):
                mean[j], weighted[j] = offset + k, offset + stop - start + k
            offset += 2 * (stop - start)
        self.mean_columns = torch.tensor(mean, device=device)
        self.weighted_columns = torch.tensor(weighted, device=device)
        self.device, self._workspaces = device, {}

    def workspace(self, N: int, dtype) -> list[Tensor]:
        """One ``(N, 2n, Lb)`` buffer per bucket, reused from call to call."""
        key = (N, dtype)
        if key not in self._workspaces:
            self._workspaces[key] = [torch.empty(N, 2 * (stop - start), Lb, dtype=dtype, device=self.device)
                                     for start, stop, Lb, _ in self.buckets]
        return self._workspaces[key]


class SweepModel:
    """The batched model of a sweep: stacked parameters ``(S, nL, nA, ...)`` and the forward pass of every run at once.

    ``SweepModel(cfg, device, init_weights)`` builds the initial parameters of ``cfg`` (the
    ``"init"`` stream of :mod:`~softmax_as_linear.core.seeding`); :meth:`predict` and :meth:`risk` take a
    batch of :class:`~softmax_as_linear.engine.data.SweepData`.

    ``forward_path``: ``"cpu"`` (the CPU forward pass, :class:`SoftmaxSweep` and prefix moments), ``"tensor"`` (the
    tensor formulas, :class:`SoftmaxPrediction`) or ``"fused_softmax"`` (those with the softmax sums as one Triton
    kernel where it runs); by default the CPU pass on a CPU and the fused kernel where it applies.
    """

    def __init__(self, cfg: TrainConfig, device: torch.device, init_weights: dict | None,
                 forward_path: str | None = None):
        self.cfg, self.device = cfg, device
        self.dtype = getattr(torch, cfg.dtype)
        if forward_path is None:
            probe = torch.empty(0, dtype=self.dtype, device=device)
            forward_path = ("fused_softmax" if fused_softmax.available(probe)  # (a CPU too, when Triton is interpreted)
                            else "cpu" if device.type == "cpu" else "tensor")
        self.forward_path = checks.one_of("forward_path", forward_path, ("cpu", "tensor", "fused_softmax"))
        self.task = cfg.task()
        self.shape = (len(cfg.seeds), len(cfg.lengths), len(cfg.models))
        self.params = self._initial_params(init_weights)
        lengths = torch.tensor(cfg.lengths, device=device)
        self.length_divisor = lengths.to(self.dtype)[:, None, None]
        self.soft = cfg.models.index("softmax") if "softmax" in cfg.models else None
        self.lin = cfg.models.index("linear") if "linear" in cfg.models else None
        # infinite-prompt models: (index, activation of the limit)
        self.limits = [(cfg.models.index(m), m.removesuffix("_limit")) for m in ("softmax_limit", "linear_limit")
                       if m in cfg.models]
        waste = 1.25 if device.type == "cpu" else math.inf
        # (slice of length indices, longest length): slices, because indexing by a list would copy it to the device
        self.buckets = [(slice(idx[0], idx[-1] + 1), cfg.lengths[idx[-1]])
                        for idx in _length_buckets(cfg.lengths, waste)]
        self.masks = [torch.where(torch.arange(Lb, device=device)[None, :] < lengths[sl][:, None], 0.0,
                                  float("-inf")).to(self.dtype) for sl, Lb in self.buckets]
        self.bucket_lengths = [lengths[sl].to(torch.int32) for sl, _ in self.buckets]
        self.plan = _BucketPlan(cfg.lengths, _length_buckets(cfg.lengths, waste), self.dtype, device)
        self.zero_risk = self.task.zero_risk()

    def _initial_params(self, init_weights):
        cfg, S, D = self.cfg, len(self.cfg.seeds), self.cfg.D
        if init_weights is not None and cfg.init != "given":
            raise ValueError(f"init_weights are read only with init='given' (the config's init is {cfg.init!r}): "
                             "pass init='given' to train from them")
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
        S_, nL, nA = S, len(cfg.lengths), len(cfg.models)
        return {n: w[:, None, None].expand(S_, nL, nA, *w.shape[1:]).to(self.device, self.dtype).clone()
                .requires_grad_(True) for n, w in per_seed.items()}

    def uv(self) -> tuple[Tensor, Tensor]:
        """U ``(S, nL, nA, D, D)`` and the prediction row v ``(S, nL, nA, D)``."""
        p = self.params
        if "U" in p:
            return p["U"], p["V"][..., -1, :]
        U, V = uv_from_weights(p["W_Q"], p["W_K"], p["W_V"], p["W_O"])
        return U, V[..., -1, :]

    def prepare(self, tokens: Tensor) -> tuple[Tensor, Tensor | None]:
        """What the CPU forward pass needs from the prompts alone (so the data thread can form it):
        tokens ``(S, B, L_max, D)`` -> the tokens as columns ``(S * B, D, L_max)`` and, with linear runs,
        their prefix moments ``(S, B, nL, D, D)`` (else None)."""
        S, B, L, D = tokens.shape
        tokens_t = tokens.reshape(S * B, L, D).transpose(1, 2).contiguous()
        if self.lin is None:
            return tokens_t, None
        return tokens_t, _prefix_moments(tokens_t, self.cfg.lengths, self.length_divisor).view(S, B, -1, D, D)

    def predict(self, tokens: Tensor, query: Tensor, w: Tensor | None = None, prepared: tuple | None = None) -> Tensor:
        """tokens ``(S, B, L_max, D)``, query ``(S, B, D)``, tasks w ``(S, B, d)`` -> predictions ``(S, nL, nA, B)``.

        The infinite-prompt models read the task vectors ``w`` and the queries, no token (``w`` is needed
        only when the sweep has them). ``prepared``: :meth:`prepare` of these tokens, when already formed
        (a CPU only)."""
        if self.forward_path != "cpu":
            return self._predict_tensor(tokens, query, w)
        tokens_t, moments = self.prepare(tokens) if prepared is None else prepared
        U, v = self.uv()
        u = torch.einsum("slaij,sbj->slabi", U, query)  # U z_q for every run and prompt
        columns = [None] * len(self.cfg.models)
        if self.soft is not None:
            columns[self.soft] = SoftmaxSweep.apply(u[:, :, self.soft], v[:, :, self.soft], tokens_t, self.plan)
        if self.lin is not None:  # v^T M_L u, as products whose sums do not depend on the number of seeds
            moment_u = (moments @ u[:, :, self.lin].transpose(1, 2).unsqueeze(-1)).squeeze(-1)  # (S, B, nL, D)
            columns[self.lin] = (moment_u * v[:, None, :, self.lin]).sum(-1).transpose(1, 2)
        for a, activation in self.limits:
            columns[a] = self._limit_prediction(u, v, w, a, activation)
        return torch.stack(columns, dim=2)

    def _limit_prediction(self, u: Tensor, v: Tensor, w: Tensor | None, a: int, activation: str) -> Tensor:
        """The infinite-prompt model ``a`` on the batch's tasks and queries, ``(S, nL, B)``."""
        if w is None:
            raise ValueError("w must be given: the sweep trains infinite-prompt models")
        return prediction_from_scores(u[:, :, a], v[:, :, a, None, :], self.task, w[:, None], activation)

    def _predict_tensor(self, tokens: Tensor, query: Tensor, w: Tensor | None = None) -> Tensor:
        """:meth:`predict` with the tensor formulas of :class:`SoftmaxPrediction` or its fused kernel (the GPU's)."""
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
                pred = SoftmaxPrediction.apply(flat_t[:, :, :Lb], u_b, v_b, mask, bucket_lengths,
                                               self.forward_path == "fused_softmax")  # (S*B, n)
                columns.append((sl, self.soft, pred.reshape(S, B, n).transpose(1, 2)))
        if self.lin is not None:
            moments = _prefix_moments(flat_t[:, :D], self.cfg.lengths, self.length_divisor).reshape(S, B, nL, D, D)
            pred = torch.einsum("sld,sbldk,slbk->slb", v[:, :, self.lin], moments, u[:, :, self.lin])
            columns.append((slice(None), self.lin, pred))
        for a, activation in self.limits:
            columns.append((slice(None), a, self._limit_prediction(u, v, w, a, activation)))
        for idx, a, pred in columns:
            out[:, idx, a] = pred
        return out

    def losses(self, tokens: Tensor, query: Tensor, target: Tensor, w: Tensor | None = None,
               prepared: tuple | None = None) -> Tensor:
        """Half squared error of every run on every prompt, ``(S, nL, nA, B)``."""
        return 0.5 * (self.predict(tokens, query, w, prepared) - target[:, None, None, :]) ** 2

    def risk(self, tokens: Tensor, query: Tensor, target: Tensor, w: Tensor | None = None,
             prepared: tuple | None = None) -> Tensor:
        """Risk R = 1/2 MSE of every run on the batch, ``(S, nL, nA)``."""
        return self.losses(tokens, query, target, w, prepared).mean(-1)


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
