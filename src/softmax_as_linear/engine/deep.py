r"""Training deep residual attention on in-context regression: a stepper for runs of shape (seeds, lengths, models).

Every run is a network of :mod:`~softmax_as_linear.theory.depth` whose layers have a full :math:`U_\ell` and a value
matrix :math:`V_\ell` zero but for its last row :math:`v_\ell` (as in the one-layer model of
:mod:`~softmax_as_linear.theory.models`: a layer writes into the label coordinate of every token, the prediction is
the query's label coordinate after the last layer). A model column is an ``(activation, K)`` pair; all columns hold
``K_max`` layers and the layers past a column's ``K`` stay zero (a zero layer is the identity of a residual network),
so a ``K = 1`` column is the one-layer model exactly. Every layer starts from the block initialisation of Assumption
5.1 with scale ``alpha`` (:func:`~softmax_as_linear.theory.flow_limits.block_init`), so columns of one seed share their
first layers and, drawing the same batches, are paired.

The stepper implements the engine's step interface (:class:`~softmax_as_linear.engine.stepper.Stepper`), with
``path = "deep"``, so the engine's one loop (:func:`~softmax_as_linear.engine.train.run`) trains it. Cost: a softmax
column of ``K`` layers costs :math:`O((K - 1) L^2 D)` per prompt, a linear one :math:`O(K L D^2)`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import checks, seeding
from ..registry import ACTIVATIONS, OPTIMIZERS
from ..theory.depth import deep_forward_unchecked
from ..theory.flow_limits import block_init
from ..theory.regression import RegressionTask
from .stepper import SeedStepper


@dataclass(frozen=True)
class DeepConfig:
    """Settings of a deep sweep: the task, seeds, prompt lengths, model columns ``(activation, K)`` and optimiser.

    ``blowup``: the divergence threshold in units of the zero predictor's risk, as in
    :class:`~softmax_as_linear.engine.sweep.TrainConfig` (a run whose batch risk is not finite or exceeds
    ``blowup * task.zero_risk()`` is diverged and stops)."""

    task: RegressionTask
    seeds: tuple[int, ...]
    lengths: tuple[int, ...]
    models: tuple[tuple[str, int], ...] = (("softmax", 1), ("linear", 1), ("softmax", 2), ("linear", 2))
    batch_size: int = 64
    lr: float = 0.01
    optimizer: str = "adam"
    alpha: float = 0.3
    held_out_prompts: int = 512
    blowup: float = 1e3

    def __post_init__(self):
        if not self.seeds or not self.lengths or not self.models:
            raise ValueError("seeds, lengths and models must each hold at least one entry")
        for seed in self.seeds:
            seeding.check_seed("seeds", seed)
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct (a repeated seed is the same run twice), got {self.seeds!r}")
        for L in self.lengths:
            checks.positive_int("lengths", L)
        if list(self.lengths) != sorted(set(self.lengths)):
            raise ValueError(f"lengths must be increasing, got {self.lengths!r}")
        for activation, K in self.models:
            checks.one_of("models (activation)", activation, ACTIVATIONS)
            checks.positive_int("models (K)", K)
        checks.positive_int("batch_size", self.batch_size)
        checks.int_at_least("held_out_prompts", self.held_out_prompts, 2)
        checks.positive_float("lr", self.lr)
        checks.positive_float("alpha", self.alpha)
        checks.positive_float("blowup", self.blowup)
        checks.one_of("optimizer", self.optimizer, OPTIMIZERS)

    def as_dict(self) -> dict:
        r"""Every setting as plain data, what a checkpoint of :func:`~softmax_as_linear.engine.train.run` records and
        is compared on: the task by its ``d``, :math:`\Sigma` (nested lists), variances, sampler and covariates; and, as
        in every training checkpoint, ``rng`` (``"torch"``: the batches come from torch's generators) and the
        ``covariates`` at the top level. :meth:`from_dict` is the inverse."""
        task = self.task
        out = {"task": {"d": task.d, "covariance": task.covariance.tolist(), "task_var": task.task_var,
                        "noise_var": task.noise_var, "sampler": task.sampler, "covariates": task.covariates}}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "models":
                out["models"] = [[activation, K] for activation, K in value]
            elif field.name != "task":
                out[field.name] = list(value) if isinstance(value, tuple) else value
        return {**out, "rng": "torch", "covariates": task.covariates}

    @classmethod
    def from_dict(cls, fields: dict) -> "DeepConfig":
        """The configuration :meth:`as_dict` describes (settings checked again)."""
        fields = {k: v for k, v in fields.items() if k not in ("rng", "covariates")}
        task = dict(fields.pop("task"))
        task["covariance"] = torch.tensor(task["covariance"], dtype=torch.float64)  # as written, not through float32
        return cls(task=RegressionTask(**task), seeds=tuple(fields.pop("seeds")),
                   lengths=tuple(fields.pop("lengths")), models=tuple((a, K) for a, K in fields.pop("models")),
                   **fields)

    @property
    def depth(self) -> int:
        """``K_max``, the number of layers every column holds."""
        return max(K for _, K in self.models)


class DeepStepper(SeedStepper):
    """One optimisation step of every run of a :class:`DeepConfig` at once; runs have shape ``(S, nL, nA)``.

    The data streams, the step (on the engine's objective, with its rule of divergence: a stopped run does not move),
    the readings and the state are :class:`~softmax_as_linear.engine.stepper.SeedStepper`'s; what is the deep
    network's own is its weights, its losses, and its absent layers (past a column's ``K``), which never move."""

    path = "deep"

    def __init__(self, cfg: DeepConfig, device: torch.device | str = "cpu", dtype=torch.float32):
        self.cfg, self.device, self.dtype = cfg, torch.device(device), dtype
        S, nL, nA, K, D = len(cfg.seeds), len(cfg.lengths), len(cfg.models), cfg.depth, cfg.task.D
        U0, V0 = block_init(cfg.task, cfg.alpha)
        active = torch.tensor([[k < Kc for k in range(K)] for _, Kc in cfg.models], device=self.device)  # (nA, K)
        self.layer_mask = active.to(dtype)
        self.U = (U0.to(self.device, dtype) * self.layer_mask[..., None, None]).expand(S, nL, nA, K, D, D).clone()
        self.v = (V0[-1].to(self.device, dtype) * self.layer_mask[..., None]).expand(S, nL, nA, K, D).clone()
        self.U.requires_grad_(True)
        self.v.requires_grad_(True)
        params = [self.U, self.v]
        self.lr = cfg.lr
        self.optimizer = (torch.optim.Adam(params, lr=cfg.lr) if cfg.optimizer == "adam"
                          else torch.optim.SGD(params, lr=cfg.lr))
        self._start(cfg.task, cfg.seeds, max(cfg.lengths), cfg.batch_size, cfg.held_out_prompts, (S, nL, nA),
                    cfg.blowup * cfg.task.zero_risk())

    # --------------------------------------------------------------------------------------------- model
    def parameters(self) -> dict[str, Tensor]:
        """``U (S, nL, nA, K, D, D)`` and ``v (S, nL, nA, K, D)`` (the last rows of the :math:`V_\\ell`)."""
        return {"U": self.U, "v": self.v}

    def _V(self, v: Tensor | None = None) -> Tensor:
        v = self.v if v is None else v
        zeros = torch.zeros(*v.shape[:-1], self.cfg.task.D - 1, self.cfg.task.D, dtype=v.dtype, device=v.device)
        return torch.cat([zeros, v.unsqueeze(-2)], dim=-2)  # (S, nL, nA, K, D, D), last rows v

    def losses(self, tokens: Tensor, query: Tensor, target: Tensor, U: Tensor | None = None,
               v: Tensor | None = None) -> Tensor:
        r"""Per-prompt losses :math:`\tfrac12(\hat y - y_q)^2` of every run, ``(S, nL, nA, B)``, on batches of ``L_max``
        tokens (the run of length ``L`` reads the first ``L``), with the stepper's weights or the weights ``U``
        ``(S, nL, nA, K, D, D)`` and ``v`` ``(S, nL, nA, K, D)`` given (a function of them: nothing is copied into the
        stepper)."""
        U = self.U if U is None else U.to(self.U)
        V = self._V(None if v is None else v.to(self.v))
        columns = []
        for i, L in enumerate(self.cfg.lengths):
            row = [None] * len(self.cfg.models)
            for activation in ACTIVATIONS:
                picks = [a for a, (act, _) in enumerate(self.cfg.models) if act == activation]
                if not picks:
                    continue
                U_a, V_a = U[:, i, picks].unsqueeze(-4), V[:, i, picks].unsqueeze(-4)  # (S, n, 1, K, D, D)
                out = deep_forward_unchecked(tokens[:, None, :, :L], query[:, None], U_a, V_a,
                                             activation)  # (S, n, B, D)
                for j, a in enumerate(picks):
                    row[a] = out[:, j, :, -1]
            columns.append(torch.stack(row, dim=1))  # (S, nA, B)
        prediction = torch.stack(columns, dim=1)  # (S, nL, nA, B)
        return 0.5 * (prediction - target[:, None, None, :]) ** 2

    def _clean_gradients(self) -> None:
        """An absent layer gets no gradient."""
        self.U.grad *= self.layer_mask[..., None, None]
        self.v.grad *= self.layer_mask[..., None]

    def _moves(self, name: str, p: Tensor) -> Tensor:
        """Live runs' present layers move; dead runs and absent layers never do (Adam's momentum would move them)."""
        layers = self.layer_mask.bool()
        if name == "U":
            return self.alive[..., None, None, None] & layers[..., None, None]
        return self.alive[..., None, None] & layers[..., None]
