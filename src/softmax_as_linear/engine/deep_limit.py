r"""Training the infinite-prompt K-layer network on in-context regression, paired with a finite-prompt deep sweep.

:class:`DeepLimitStepper` trains, for every seed and every model column ``(activation, K)`` of a
:class:`~softmax_as_linear.engine.deep.DeepConfig`, the infinite-prompt network of
:func:`~softmax_as_linear.theory.deep_limit.deep_limit_prediction` (the exact Gaussian recursion; no prompt) with the
loss :math:`\tfrac12(\hat y_\infty(w, x_q) - y_q)^2`. It starts from the weights a
:class:`~softmax_as_linear.engine.deep.DeepStepper` of the same configuration starts from (Assumption 5.1's blocks in
every layer of a column) and, step by step, draws exactly the batches that stepper draws (the ``"train"`` stream of
each seed, prompts of the sweep's longest length): it reads their tasks :math:`w`, queries and targets and ignores
their tokens. A finite-:math:`L` run and the infinite-prompt run of its column and seed therefore see the same
:math:`(w, x_q, y_q)` at every step, and the same held-out set, so that what separates them is the prompt alone (the
pairing of Chapter 6's sweeps, for depth).

Runs have shape ``(S, 1, nA)``: the length axis holds the single length :math:`L = \infty`. The stepper implements the
engine's step interface (path ``"deep_limit"``), so :func:`~softmax_as_linear.engine.train.run` trains it. Cost per
prompt :math:`O(K D^3)`, nothing in :math:`L`.
"""
from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from ..registry import ACTIVATIONS
from ..theory.deep_limit import deep_limit_prediction
from .deep import DeepConfig, DeepStepper


class DeepLimitStepper(DeepStepper):
    """One optimisation step of the infinite-prompt run of every (seed, model column) of a
    :class:`~softmax_as_linear.engine.deep.DeepConfig`."""

    path = "deep_limit"

    def __init__(self, cfg: DeepConfig, device: torch.device | str = "cpu", dtype=torch.float32):
        if not isinstance(cfg, DeepConfig):
            raise ValueError(f"cfg must be a DeepConfig, got {type(cfg).__name__}")
        if cfg.task.covariates != "gaussian":
            raise ValueError(f"cfg: the infinite-prompt deep network is the Gaussian recursion, exact for Gaussian "
                             f"covariates only; the task's covariates are {cfg.task.covariates!r}")
        self.finite_config = cfg
        # One length: the longest, so that every batch is drawn as the finite sweep draws it (same random numbers).
        super().__init__(replace(cfg, lengths=(max(cfg.lengths),)), device, dtype)

    def _stack(self, batches) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per-seed batches -> tokens ``(S, B, L_max, D)``, query ``(S, B, D)``, target ``(S, B)``, w ``(S, B, d)``."""
        return tuple(torch.stack([getattr(b, name) for b in batches]).to(self.device, self.dtype)
                     for name in ("tokens", "query", "target", "w"))

    def predictions(self, query: Tensor, w: Tensor, U: Tensor | None = None, v: Tensor | None = None) -> Tensor:
        r""":math:`\hat y_\infty` of every run on tasks ``w (S, B, d)`` and queries ``query (S, B, D)``:
        ``(S, 1, nA, B)``,
        with the stepper's weights or the weights ``U`` ``(S, 1, nA, K, D, D)`` and ``v`` ``(S, 1, nA, K, D)`` given."""
        U = self.U if U is None else U.to(self.U)
        V = self._V(None if v is None else v.to(self.v))
        out = [None] * len(self.cfg.models)
        for activation in ACTIVATIONS:
            picks = [a for a, (act, _) in enumerate(self.cfg.models) if act == activation]
            if not picks:
                continue
            U_a, V_a = U[:, 0, picks].unsqueeze(-4), V[:, 0, picks].unsqueeze(-4)  # (S, n, 1, K, D, D)
            pred = deep_limit_prediction(U_a, V_a, self.cfg.task, w[:, None], query[:, None], activation)  # (S, n, B)
            for j, a in enumerate(picks):
                out[a] = pred[:, j]
        return torch.stack(out, dim=1)[:, None]

    def losses(self, tokens: Tensor, query: Tensor, target: Tensor, U: Tensor | None = None, v: Tensor | None = None,
               w: Tensor | None = None) -> Tensor:
        r"""Per-prompt losses :math:`\tfrac12(\hat y_\infty - y_q)^2` of every run, ``(S, 1, nA, B)``: the base class's
        arguments (``tokens`` unread: no prompt; the weights ``U``, ``v`` optional) and the tasks ``w`` ``(S, B, d)``
        of the prompts, which the infinite-prompt network reads instead (a ``ValueError`` without them)."""
        del tokens
        if w is None:
            raise ValueError("w must be given: the infinite-prompt losses read the prompts' tasks (S, B, d)")
        return 0.5 * (self.predictions(query, w, U, v) - target[:, None, None, :]) ** 2

    def batch_losses(self, batch: tuple[Tensor, ...]) -> Tensor:
        """:meth:`losses` of a batch as this stepper draws it (``tokens``, ``query``, ``target``, ``w``)."""
        tokens, query, target, w = batch
        return self.losses(tokens, query, target, w=w)
