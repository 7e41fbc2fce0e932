r"""The reference trainer: one run of a sweep, one prompt length, plain autograd and ``torch.optim.SGD``.

This is the whole of what :func:`~softmax_as_linear.engine.train.train` computes for one run; the engine takes the
same steps for every run of a sweep at once, and every code path it has is checked against this loop on the same
prompts (``tests/engine/test_paths.py``). The model is the paper's
(:class:`~softmax_as_linear.theory.models.AttentionModel`, four matrices, :math:`\hat y = W_O \sum_i a_i W_V z_i`), the
loss its mean squared error over a batch:

.. code-block:: python

    model = AttentionModel(cfg.D, activation, seed=seeding.stream_seed(seed, "init"))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for tokens, query, target in batches:              # prompts of L_max tokens; this run reads the first L
        loss = ((model(tokens[:, :L], query) - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""
from __future__ import annotations

from typing import Iterator

import torch

from ..core import checks, seeding
from ..theory.flow_limits import block_init
from ..theory.models import AttentionModel, predict_unchecked, uv_from_weights
from .data import CounterData, SweepData
from .sweep import TrainConfig


def sweep_batches(cfg: TrainConfig, seed: int, steps: int, device: str | torch.device = "cpu"
                  ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The ``steps`` training batches that seed ``seed`` of the sweep ``cfg`` trains on when it trains on ``device``
    (torch's generators draw other numbers on CUDA than on a CPU), each on the CPU:
    ``(tokens (B, L_max, D), query (B, D), target (B,))``. Under torch's generators (``rng="torch"``) the sweep's
    record before the first step takes batch 0, so its steps train on batches 1, 2, ...; under the counter-based
    stream (``rng="philox"``, the same numbers on every device) step ``k`` trains on batch ``k``."""
    one = cfg.replace(seeds=(seed,))
    device = torch.device(device)
    dtype = getattr(torch, cfg.dtype)
    if cfg.rng == "philox":
        data = CounterData(one, one.task(), device, dtype)
    elif cfg.rng == "torch":
        data = SweepData(one, one.task(), device, dtype)  # batch 0 is the record's: batch() starts at 1
    else:
        raise ValueError(f"rng must be 'torch' or 'philox' (resolved), got {cfg.rng!r}")
    for _ in range(steps):
        tokens, query, target = (x[0].cpu() for x in data.batch()[:3])
        yield tokens, query, target


def train_one_run(cfg: TrainConfig, L: int, activation: str, seed: int, device: str | torch.device = "cpu",
                  batches: list | None = None) -> list[dict[str, torch.Tensor]]:
    """Train the run ``(L, activation, seed)`` of the sweep ``cfg`` (SGD) alone, on the CPU, on the batches the sweep
    draws on ``device`` (or ``batches``, the list :func:`sweep_batches` gives, to draw them once for several runs);
    return its weights after each step, ``cfg.steps + 1`` dicts (the first the initial weights): ``W_Q, W_K, W_V``
    ``(D, D)`` and ``W_O`` ``(1, D)`` for the four matrices from PyTorch's initialisation, or ``U, V`` ``(D, D)`` for
    the ``uv`` parametrisation (the product of that initialisation's matrices, or the block start of Assumption 5.1),
    predicting with :func:`~softmax_as_linear.theory.models.predict`."""
    if cfg.optimizer != "sgd" or cfg.init not in ("pytorch", "block"):
        raise ValueError("the reference trainer is plain SGD from PyTorch's initialisation or the block start; "
                         f"got optimizer {cfg.optimizer!r}, init {cfg.init!r}")
    checks.one_of("L", L, cfg.lengths)
    checks.one_of("activation", activation, ("softmax", "linear"))
    checks.one_of("seed", seed, cfg.seeds)
    dtype = getattr(torch, cfg.dtype)
    model = AttentionModel(cfg.D, activation, seed=seeding.stream_seed(seed, "init")).to(dtype)
    with torch.no_grad():
        for w in model.parameters():
            w.mul_(cfg.init_scale)
    if cfg.parametrisation == "uv":
        if cfg.init == "block":
            U, V = block_init(cfg.task(), cfg.alpha)
        else:
            U, V = uv_from_weights(*(w.detach().double() for w in model.weights().values()))
        weights = {"U": U.to(dtype).requires_grad_(True), "V": V.to(dtype).requires_grad_(True)}

        def predict(tokens, query):
            return predict_unchecked(tokens, query, weights["U"], weights["V"], activation)
    else:
        weights, predict = model.weights(), model
    optimizer = torch.optim.SGD(list(weights.values()), lr=cfg.lr)
    history = [{n: w.detach().clone() for n, w in weights.items()}]
    for tokens, query, target in batches if batches is not None else sweep_batches(cfg, seed, cfg.steps, device):
        loss = ((predict(tokens[:, :L], query) - target) ** 2).mean()  # MSE = 2R
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append({n: w.detach().clone() for n, w in weights.items()})
    return history
