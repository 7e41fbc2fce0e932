r"""The training loop of a sweep: every run trained together, one computation per step.

A *sweep* (:class:`~softmax_as_linear.engine.sweep.TrainConfig`) trains single-head attention on
in-context linear regression (the paper's Sections 5 and 6, Appendix A) for every combination of prompt
length ``L``, activation (``"softmax"``, ``"linear"``) and seed; :func:`train` is plain SGD (or Adam)
on all of them at once. It is the loop of :func:`~softmax_as_linear.engine.reference.train_one_run` (one run, plain
autograd), taken by every run together:

* **Paired runs.** Runs of one seed start from the same weights, whatever their ``L`` and
  activation, and see the same batches, as in the paper (seed fixed for both activations).
* **Prefix-shared prompts.** At each step every seed draws one batch of prompts of ``L_max`` tokens
  (:mod:`~softmax_as_linear.engine.data`); the run of length ``L`` reads the first ``L`` tokens. Each run
  therefore sees exactly the i.i.d. prompts of its own length; runs of different ``L`` are positively
  correlated (common random numbers), which makes the *differences* between lengths less noisy, not biased.
* **One step interface.** A :class:`~softmax_as_linear.engine.stepper.Stepper` takes the step of every run;
  :func:`make_stepper` picks it for the configuration and the device (the CPU path, the tensor formulas, or on a GPU
  the prompt kernel), and the result's ``engine_path`` says which ran. The GPU's optimisations live in
  :mod:`~softmax_as_linear.engine.gpu`.

The objective is the paper's: mean squared error of the prediction (``MSE = 2R``). What is *recorded*
(:mod:`~softmax_as_linear.engine.records`) is the theory's risk :math:`R = \tfrac12 \mathrm{MSE}`, on the training
batch and on a fixed held-out set of prompts (with the standard deviation of the per-prompt losses, so that its
standard error is measured, not assumed). With SGD at learning rate ``lr`` on the MSE, step ``k`` is gradient-flow
time :math:`t = 2\,\mathrm{lr}\,k` on :math:`R` (see :func:`~softmax_as_linear.theory.flow.infinite_prompt_flow`).

A run whose risk becomes NaN, infinite or larger than ``blowup`` times the risk of predicting zero is
*diverged*: it stops updating, its later records are NaN, and
:attr:`~softmax_as_linear.engine.sweep.TrainResult.diverged` says so.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import pathlib
import time
from typing import Callable

import torch

from ..core import checks
from ..core.devices import resolve_device
from ..registry import ENGINE_PATHS, LIMIT_MODELS
from . import train_cache
from .batched import SweepModel
from .data import CounterData, SweepData
from .gpu import fused_softmax, prompt_kernel
from .gpu.kernel_step import PromptKernelStepper
from .records import Records
from .stepper import Stepper, make_optimizer
from .sweep import TrainConfig, TrainResult, config_fields, load_checkpoint, save_checkpoint
from .tensor_step import TensorStepper


def resolved(config: TrainConfig, device) -> TrainConfig:
    """``config`` with ``rng="auto"`` replaced by the stream it means on ``device``: ``"philox"`` where the
    prompt kernel runs (CUDA with Triton, float32), no infinite-prompt model is trained and the labels are linear,
    ``"torch"`` elsewhere."""
    if config.rng != "auto":
        return config
    if config.labels != "linear":  # the counter-based stream draws linear labels only
        return config.replace(rng="torch")
    kernel = prompt_kernel.available(resolve_device(device), getattr(torch, config.dtype))
    limit = set(config.models) & set(LIMIT_MODELS)
    return config.replace(rng="philox" if kernel and not limit else "torch")


def make_stepper(cfg: TrainConfig, device: torch.device, init_weights: dict | None = None, *, path: str = "auto",
                 cuda_graph: bool = True) -> Stepper:
    """The stepper of ``cfg`` (its ``rng`` resolved) on ``device``: the prompt kernel for ``rng="philox"`` where it
    runs, else batches as tensors (drawn on a spare core on a CPU) and the sweep's forward pass.

    ``path`` (:data:`~softmax_as_linear.registry.ENGINE_PATHS`): ``"auto"``, or the path asked for, which must run
    here (a ``ValueError`` naming ``path`` otherwise). ``cuda_graph``: on CUDA, replay the step as a CUDA graph
    where its data source allows it.
    """
    checks.one_of("path", path, ENGINE_PATHS)
    dtype = getattr(torch, cfg.dtype)
    kernel = cfg.rng == "philox" and prompt_kernel.available(device, dtype)
    graph = cuda_graph and device.type == "cuda"
    fused = fused_softmax.available(torch.empty(0, dtype=dtype, device=device))
    why = {"prompt_kernel": not kernel and "it needs rng 'philox', float32 and CUDA with Triton",
           "fused_softmax": (not fused and "it needs float32 and CUDA with Triton"
                             or "softmax" not in cfg.models and "the sweep has no softmax run"),
           "cpu": device.type != "cpu" and "the device is not a CPU"}.get(path)
    if why:
        raise ValueError(f"path {path!r} cannot run here: {why}")
    if (path == "auto" and kernel) or path == "prompt_kernel":
        sweep = SweepModel(cfg, device, init_weights)
        return PromptKernelStepper(sweep, make_optimizer(sweep), graph=graph)
    sweep = SweepModel(cfg, device, init_weights, forward_path=None if path == "auto" else path)
    if cfg.rng == "philox":
        data = CounterData(cfg, sweep.task, device, sweep.dtype)
    else:
        # With a core to spare (fewer compute threads than cores), the next batch is drawn on it during
        # the step; more threads than cores would slow both down. On a CPU that thread also forms the
        # batch's column layout and prefix moments (sweep.prepare).
        cpu_path = sweep.forward_path == "cpu"
        spare_core = (os.cpu_count() or 1) > torch.get_num_threads()
        data = SweepData(cfg, sweep.task, device, sweep.dtype, prefetch=device.type == "cpu" and spare_core,
                         prepare=sweep.prepare if cpu_path else None)
    return TensorStepper(sweep, data, make_optimizer(sweep), graph=graph and data.graph_safe)


def run(stepper: Stepper, steps: int, record_steps: list[int], *, config=None,
        checkpoint: str | os.PathLike | None = None, checkpoint_every: int = 1000, checkpoint_seconds: float = 0.0,
        progress: bool | None = None, should_stop: Callable[[], bool] | None = None) -> Records:
    """Take ``steps`` steps with ``stepper``, recording at ``record_steps`` (step 0 among them); resume from
    ``checkpoint`` when it exists and save there (see :func:`train`), ``config`` (with an ``as_dict()``) being what
    a checkpoint must have been written for. Returns the records, with the last step taken, the training seconds,
    whether training ran to the end, and the path that took the steps (with the earlier one, on resuming).

    A step and the record that follows it are one transaction: an interrupt (``KeyboardInterrupt``) inside either
    saves the state from before the step (a copy taken when there is a checkpoint to save), so the resumed run takes
    that step again and draws exactly the batches of the uninterrupted one.
    """
    records = Records(record_steps, stepper)
    step, seconds, earlier_path = 0, 0.0, None
    file = pathlib.Path(checkpoint) if checkpoint is not None else None
    if file is not None and config is None:
        raise ValueError("config must be given with checkpoint (a checkpoint records what it was written for)")
    if file is not None and file.exists():
        state = read_checkpoint(file, config, stepper.alive.device, take=True)
        stepper.load_state(state)
        records.load_state(state)
        step, seconds, earlier_path = state["step"], state["seconds"], state.get("engine_path")

    def save(state):
        if file is not None:
            save_checkpoint(file, {"config": config.as_dict(), "seconds": seconds,
                                   "engine_path": joined_path(earlier_path, stepper.path),
                                   **records.state(), **state})

    bar = None
    resumed = f", resuming from step {step}" if step else ""
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=steps, initial=step, desc=f"training {stepper.alive.numel()} runs{resumed}", unit="step")
    elif progress is None:  # a transient line where a person runs the notebook, nothing elsewhere
        from ..core.progress import transient_progress
        bar = transient_progress(steps, f"training {stepper.alive.numel()} runs{resumed}", step)
    complete, before = True, None  # before: inside a transaction, the state an interrupt saves
    clock = last_save = time.perf_counter()
    try:
        if step == 0:
            records.write(0, stepper)  # a reading: it changes nothing in the stepper
        while step < steps:
            before = _copy(stepper.state()) if file is not None else None
            stepper.step()
            step += 1
            if step in records:
                records.write(step, stepper)
            before = None
            if bar is not None:
                bar.update(1)
                if step in records:
                    bar.set_postfix(diverged=int((~stepper.alive).sum()))
            if step in records and should_stop is not None and step < steps and should_stop():
                complete = False
                break
            if (step % checkpoint_every == 0 and step < steps
                    and time.perf_counter() - last_save >= checkpoint_seconds):
                seconds += time.perf_counter() - clock
                clock = last_save = time.perf_counter()
                save(stepper.state())
    except KeyboardInterrupt:
        seconds += time.perf_counter() - clock
        save(before if before is not None else stepper.state())
        raise
    finally:
        stepper.close()
        if bar is not None:
            bar.close()
    seconds += time.perf_counter() - clock
    save(stepper.state())
    records.last_step, records.seconds, records.complete = step, seconds, complete
    records.engine_path = joined_path(earlier_path, stepper.path)
    return records


# A checkpoint already read, handed to the run that resumes from it (:func:`loaded_checkpoint`): (path, [state]).
_LOADED: contextvars.ContextVar = contextvars.ContextVar("softmax_as_linear_loaded_checkpoint", default=None)


@contextlib.contextmanager
def loaded_checkpoint(path: str | os.PathLike, state: dict):
    """Within it, :func:`run` (and :func:`train`) resuming from ``path`` take ``state``, the dictionary
    :func:`~softmax_as_linear.engine.sweep.load_checkpoint` read from it (on any device), instead of reading the file
    again: a caller that has read a checkpoint (to say the step it resumes from, say) hands it over, and the resume
    reads the file once. The state is compared with the run's configuration as a read is (a ``ValueError`` when it was
    written for another), and :func:`run` takes it once."""
    token = _LOADED.set((os.path.abspath(path), [state]))
    try:
        yield
    finally:
        _LOADED.reset(token)


def read_checkpoint(path: str | os.PathLike, config, device, take: bool = False) -> dict:
    """The state of the checkpoint at ``path`` written for ``config``, its tensors on ``device``: the one handed over
    by :func:`loaded_checkpoint` for ``path`` (taken, with ``take``: a later read reads the file; without it, a look
    that leaves its tensors where they are), else :func:`~softmax_as_linear.engine.sweep.load_checkpoint`'s (with its
    errors)."""
    handed = _LOADED.get()
    if handed is None or handed[0] != os.path.abspath(path) or not handed[1]:
        return load_checkpoint(path, config, device)
    state = handed[1][0]
    if config_fields(state["config"]) != config.as_dict():  # as load_checkpoint compares a file's
        raise ValueError(f"checkpoint {path} was written for a different configuration")
    if not take:
        return state
    handed[1].clear()
    return _on(state, torch.device(device))


def _on(value, device: torch.device):
    """``value`` with its tensors on ``device`` (as ``torch.load``'s ``map_location`` puts them; no copy where they
    are there)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _on(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on(v, device) for v in value)
    return value


def joined_path(earlier: str | None, current: str) -> str:
    """The paths of every leg of a run, ``"cpu, then tensor"``: the ``earlier`` legs' (None for a fresh run) and the
    ``current`` one, named once when it is the last earlier leg's."""
    if earlier is None or last_leg(earlier) == current:
        return current if earlier is None else earlier
    return f"{earlier}, then {current}"


def last_leg(engine_path: str) -> str:
    """The path of the last leg of ``engine_path`` (:func:`joined_path`), with its ``"+graph"`` mark."""
    return engine_path.split(", then ")[-1]


def _copy(value):
    """A copy of a stepper's state (tensors cloned, containers rebuilt), which the steps that follow do not touch."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    return value


def train(config: TrainConfig, *, init_weights: dict | None = None, device: str | torch.device = "auto",
          progress: bool | None = None, checkpoint: str | os.PathLike | None = None, checkpoint_every: int = 1000,
          checkpoint_seconds: float = 0.0, should_stop: Callable[[], bool] | None = None, cuda_graph: bool = True,
          path: str = "auto") -> TrainResult:
    """Train every run of ``config`` together and return their trajectories.

    Args:
        config: the sweep (see :class:`~softmax_as_linear.engine.sweep.TrainConfig`); ``rng="auto"`` is resolved for
            ``device`` (:func:`resolved`) and the result's config says which stream was used.
        init_weights: with ``config.init == "given"``, a dict of ``(D, D)`` tensors (``W_O`` is ``(1, D)``),
            or ``(S, D, D)`` for one per seed: ``W_Q, W_K, W_V, W_O`` or ``U, V``.
        device: ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda"``.
        progress: True shows a progress bar (tqdm), False nothing; None (the default) a transient line in a notebook
            that a person runs, cleared when training ends, and nothing where a tool executes it
            (:func:`~softmax_as_linear.core.progress.transient_progress`): the chapters' stored outputs stay as
            they are.
        checkpoint: file to resume from and to save to every ``checkpoint_every`` steps (atomically),
            and when interrupted. A finished run leaves its final state there.
        checkpoint_seconds: skip the periodic saves until this much training time has passed since
            the last one (0: every ``checkpoint_every`` steps).
        should_stop: called at every record step; returning True ends training early (the result is
            then marked incomplete).
        cuda_graph: on CUDA, replay each step as a captured graph (the same computation, launched
            at once); False runs it op by op. Ignored on a CPU.
        path: the code path (:data:`~softmax_as_linear.registry.ENGINE_PATHS`); ``"auto"`` picks the fastest that
            runs here. A path asked for that cannot run, or that fell back to another while training, is an error;
            so is resuming, with a path asked for, a checkpoint written on another path (refused before training).

    The result's ``engine_path`` names the path that ran
    (:attr:`~softmax_as_linear.engine.sweep.TrainResult.engine_path`).

    When the environment variable ``SOFTMAX_AS_LINEAR_TRAIN_CACHE`` names a folder, a plain call (no
    ``init_weights``, ``checkpoint`` or ``should_stop``) returns the sweep stored there by an earlier call with the same
    configuration, device, path and engine source, and stores what it trains
    (:mod:`~softmax_as_linear.engine.train_cache`).
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    checkpoint_every = checks.positive_int("checkpoint_every", checkpoint_every)
    checkpoint_seconds = checks.positive_float("checkpoint_seconds", checkpoint_seconds, allow_zero=True)
    device = resolve_device(device)
    cfg = resolved(config, device)
    cache = train_cache.folder() if init_weights is None and checkpoint is None and should_stop is None else None
    if cache is not None:
        cache_key = train_cache.key(cfg, device, path, cuda_graph)
        cached = train_cache.load(cache, cache_key, cfg)
        if cached is not None:
            return cached
    handed = contextlib.nullcontext()
    if path != "auto" and checkpoint is not None and pathlib.Path(checkpoint).exists():
        state = read_checkpoint(checkpoint, cfg, device)
        written_on = str(state.get("engine_path", "unknown"))
        if last_leg(written_on).split("+")[0] != path:
            raise ValueError(f"path {path!r} was asked for, but checkpoint {checkpoint} was written on path "
                             f"{written_on!r}: resume it with path='auto' (the result then names both paths), or "
                             "delete it to train again on the path asked for")
        handed = loaded_checkpoint(checkpoint, state)  # the run resumes the state read here: one read
        del state
    stepper = make_stepper(cfg, device, init_weights, path=path, cuda_graph=cuda_graph)
    with handed:
        records = run(stepper, cfg.steps, cfg.record_steps(), config=cfg, checkpoint=checkpoint,
                      checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds, progress=progress,
                      should_stop=should_stop)
    if path != "auto" and last_leg(records.engine_path).split("+")[0] != path:
        raise RuntimeError(f"path {path!r} was asked for, but {records.engine_path!r} ran (a fallback: see the "
                           "warnings above)")
    kept = records.up_to(records.last_step)
    result = TrainResult(cfg, kept["steps"], kept["train_risk"], kept["eval_risk"], kept["params"],
                         stepper.diverged_at.cpu().numpy(), records.seconds, records.complete, kept["eval_sd"],
                         records.engine_path)
    if cache is not None:
        train_cache.store(cache, cache_key, result)
    return result
