r"""A training sweep's settings and results, and their files.

- :class:`TrainConfig`: everything that defines a sweep (task, prompt lengths, models, seeds,
  optimiser, initialisation), validated;
- :class:`TrainResult`: its recorded trajectories, axes ``(seed, length, activation, record)``;
- :func:`save_sweep` / :func:`load_sweep`: a result as one ``.npz`` (the paper-scale files of ``results/``);
- :func:`save_checkpoint` / :func:`load_checkpoint`: the state of an unfinished training, to resume it.

Every file is written atomically (:mod:`~softmax_as_linear.core.artifacts`).
"""
from __future__ import annotations

import dataclasses
import json
import operator
import pathlib
from dataclasses import dataclass

import numpy as np
import torch

from ..core import checks, seeding
from ..core.artifacts import CHECKPOINT_READ_ERRORS, DamagedFileError, atomic_write, load_npz, save_npz
from ..registry import (
    ACTIVATIONS,
    COVARIANCES,
    COVARIATES,
    INIT_SCHEMES,
    LABELS,
    LIMIT_MODELS,
    MODELS,
    OPTIMIZERS,
    PARAMETRISATIONS,
    RNGS,
    SAMPLERS,
)
from ..theory.cosine_task import CosineTask
from ..theory.models import uv_from_weights
from ..theory.regression import RegressionTask


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a sweep. Invalid fields raise ``ValueError`` naming the field.

    Attributes:
        d: input dimension (tokens have ``D = d + 1`` entries).
        covariance: ``"isotropic"`` (:math:`\\Sigma = I`) or ``"kms"`` (:math:`\\rho^{|i-j|}`).
        rho: KMS parameter, used when ``covariance == "kms"``.
        sampler: ``"paper"`` (prompt and query inputs :math:`N(0, \\Sigma)`, the paper's model) or
            ``"published"`` (prompt inputs :math:`N(0, C\\Sigma C^\\top)`, queries :math:`N(0, I)`, as the
            published code draws them); see :class:`~softmax_as_linear.theory.regression.RegressionTask`.
        covariates: law of the standardised input entries (:data:`~softmax_as_linear.registry.COVARIATES`):
            ``"gaussian"`` (the paper), ``"uniform"`` or ``"rademacher"`` (Chapter 6).
        task_var: :math:`\\tau^2` (``None``: ``1/d`` as in the paper). noise_var: :math:`s^2`.
        lengths: prompt lengths ``L``, increasing. models: distinct models among
            :data:`~softmax_as_linear.registry.MODELS`: ``"softmax"`` and ``"linear"`` attention at each ``L``, and
            ``"softmax_limit"`` and ``"linear_limit"``, their infinite-prompt limits
            (:func:`~softmax_as_linear.theory.limit_model.infinite_prompt_prediction`), trained from the same
            initialisation on the same batches' tasks, queries and targets (they read no prompt token, so
            their runs are the same at every ``L``).
        seeds: one independent replicate per seed, in ``[0, 10_000)``; its initialisation, training
            batches and held-out prompts are the streams ``"init"``, ``"train"`` and ``"held_out"`` of
            :mod:`~softmax_as_linear.core.seeding`.
        steps: optimisation steps. batch_size: fresh prompts per step and seed.
        lr: learning rate. optimizer: ``"sgd"`` (the paper) or ``"adam"``.
        parametrisation: ``"four_matrix"`` (W_Q, W_K, W_V, W_O; the experiments) or ``"uv"`` (the theory).
        init: ``"pytorch"`` (default ``nn.Linear`` draws from the seed; the paper), ``"block"``
            (Assumption 5.1 with ``alpha``; ``"uv"`` only) or ``"given"`` (weights passed to
            :func:`~softmax_as_linear.engine.train.train`).
        init_scale: multiplies the PyTorch initialisation (a small value gives a near-zero start).
        alpha: scale of the block initialisation.
        record_every: record risks and parameters every this many steps (and at 0 and the end).
        eval_prompts: size of the fixed held-out set, per seed (at least 2: its spread gives the standard error).
        blowup: divergence threshold, in units of the risk of the zero predictor.
        dtype: ``"float32"`` or ``"float64"``.
        rng: the random stream of the prompts. ``"torch"``: one torch generator per seed and stream (CUDA and
            the CPU draw different numbers; every result file before the counter-based stream used it).
            ``"philox"``: the counter-based stream of :mod:`~softmax_as_linear.engine.gpu.counter_stream`, the same
            prompts on every device, drawn inside the training kernel on a GPU
            (:mod:`~softmax_as_linear.engine.gpu.prompt_kernel`). ``"auto"``: ``"philox"`` where that kernel runs
            (CUDA with Triton, float32) and the sweep has no infinite-prompt model, ``"torch"`` elsewhere; a
            trained sweep records the stream it used. The infinite-prompt models read the batches' task
            vectors, which only ``"torch"`` hands out.
        labels: ``"linear"`` (:math:`y = w^\\top x + \\varepsilon`, Chapters 4-7) or ``"cosine"`` (Chapter 8: a random
            cosine-feature function of inputs uniform on the sphere,
            :class:`~softmax_as_linear.theory.cosine_task.CosineTask`; ``task_var`` ``None`` means 1). Cosine labels
            need the isotropic, paper-sampler, Gaussian-covariate defaults, no infinite-prompt model and torch's
            generators.
        features: the number :math:`m` of cosine features (``labels="cosine"``).
        frequency: their frequency scale :math:`\\gamma` (``labels="cosine"``).
    """

    d: int = 5
    covariance: str = "isotropic"
    rho: float = 0.5
    sampler: str = "paper"
    covariates: str = "gaussian"
    task_var: float | None = None
    noise_var: float = 0.1
    lengths: tuple[int, ...] = (10, 100)
    models: tuple[str, ...] = ACTIVATIONS
    seeds: tuple[int, ...] = (327,)
    steps: int = 1000
    batch_size: int = 128
    lr: float = 1e-3
    optimizer: str = "sgd"
    parametrisation: str = "four_matrix"
    init: str = "pytorch"
    init_scale: float = 1.0
    alpha: float = 0.1
    record_every: int = 100
    eval_prompts: int = 1024
    blowup: float = 1e3
    dtype: str = "float32"
    rng: str = "auto"
    labels: str = "linear"
    features: int = 64
    frequency: float = 2.0

    def __post_init__(self):
        checks.positive_int("d", self.d)
        checks.one_of("covariance", self.covariance, COVARIANCES)
        checks.in_open_interval("rho", self.rho, -1.0, 1.0)
        checks.one_of("sampler", self.sampler, SAMPLERS)
        checks.one_of("covariates", self.covariates, COVARIATES)
        if self.task_var is not None:
            checks.positive_float("task_var", self.task_var)
        checks.positive_float("noise_var", self.noise_var, allow_zero=True)
        lengths = tuple(checks.positive_int("lengths", L) for L in self.lengths)
        if not lengths or list(lengths) != sorted(set(lengths)):
            raise ValueError(f"lengths must be a non-empty increasing sequence of integers >= 1, got {self.lengths!r}")
        object.__setattr__(self, "lengths", lengths)
        models = tuple(self.models)
        if not models or len(set(models)) != len(models):
            raise ValueError(f"models must be distinct names among {MODELS}, got {self.models!r}")
        for model in models:
            checks.one_of("models", model, MODELS)
        object.__setattr__(self, "models", models)
        if isinstance(self.seeds, (str, bytes)) or not hasattr(self.seeds, "__iter__"):
            raise ValueError(f"seeds must be a sequence of distinct non-negative integers, got {self.seeds!r}")
        # a whole float or a numpy integer is a seed; 1.7 is an error, not seed 1
        seeds = tuple(seeding.check_seed("seeds", operator.index(s) if isinstance(s, np.integer) else s)
                      for s in self.seeds)
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct non-negative integers, got {self.seeds!r}")
        object.__setattr__(self, "seeds", seeds)
        checks.int_at_least("steps", self.steps, 0)
        checks.positive_int("batch_size", self.batch_size)
        checks.positive_float("lr", self.lr)
        checks.one_of("optimizer", self.optimizer, OPTIMIZERS)
        checks.one_of("parametrisation", self.parametrisation, PARAMETRISATIONS)
        checks.one_of("init", self.init, INIT_SCHEMES)
        if self.init == "block" and self.parametrisation != "uv":
            raise ValueError("init 'block' (Assumption 5.1) needs parametrisation 'uv'")
        checks.positive_float("init_scale", self.init_scale)
        checks.positive_float("alpha", self.alpha)
        checks.positive_int("record_every", self.record_every)
        checks.int_at_least("eval_prompts", self.eval_prompts, 2)  # a standard deviation needs two prompts
        checks.positive_float("blowup", self.blowup)
        checks.one_of("dtype", self.dtype, ("float32", "float64"))
        checks.one_of("rng", self.rng, RNGS)
        if self.rng == "philox" and set(self.models) & set(LIMIT_MODELS):
            raise ValueError("rng 'philox' does not hand out the task vectors that the infinite-prompt models "
                             f"{LIMIT_MODELS} read; use rng 'torch' (or 'auto')")
        checks.one_of("labels", self.labels, LABELS)
        checks.positive_int("features", self.features)
        checks.positive_float("frequency", self.frequency, allow_zero=True)
        if self.labels == "cosine":
            fixed = {"covariance": "isotropic", "sampler": "paper", "covariates": "gaussian"}
            for name, value in fixed.items():
                if getattr(self, name) != value:
                    raise ValueError(f"{name} must be {value!r} with labels 'cosine' (its inputs lie on the sphere)")
            if set(self.models) & set(LIMIT_MODELS) or self.rng == "philox":
                raise ValueError("labels 'cosine' train finite-prompt models only (models among "
                                 f"{ACTIVATIONS}) on torch's generators (rng 'torch' or 'auto')")

    def replace(self, **changes) -> "TrainConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        """Every field, as a dictionary (what result files and checkpoints store)."""
        return dataclasses.asdict(self)

    @property
    def D(self) -> int:
        """Token dimension ``d + 1``."""
        return self.d + 1

    def task(self) -> RegressionTask | CosineTask:
        """The in-context regression task the sweep trains on."""
        if self.labels == "cosine":
            return CosineTask(self.d, self.features, self.frequency, 1.0 if self.task_var is None else self.task_var,
                              self.noise_var, inputs="sphere")
        if self.covariance == "isotropic":
            return RegressionTask.isotropic(self.d, self.task_var, self.noise_var, self.sampler, self.covariates)
        return RegressionTask.kms(self.d, self.rho, self.task_var, self.noise_var, self.sampler, self.covariates)

    def record_steps(self) -> list[int]:
        """The steps at which risks and parameters are recorded: every ``record_every`` steps, and the last."""
        return sorted(set(range(0, self.steps, self.record_every)) | {self.steps})


@dataclass
class TrainResult:
    """Trajectories of a sweep. Axes: seed ``S``, length ``nL``, activation ``nA``, record ``T``.

    Attributes:
        config: the :class:`TrainConfig`.
        steps: ``(T,)`` steps at which records were taken; ``times`` the matching gradient-flow times.
        train_risk: ``(S, nL, nA, T)`` risk R on the training batch of that step (NaN after divergence).
        eval_risk: ``(S, nL, nA, T)`` risk R on the fixed held-out prompts.
        eval_sd: ``(S, nL, nA, T)`` sample standard deviation of the per-prompt losses behind ``eval_risk``
            (so :attr:`eval_se` is measured, not assumed; NaN in results written before it was recorded).
        params: name -> ``(S, nL, nA, T, ...)`` parameters (four matrices, or ``U`` and ``V``).
        diverged_at: ``(S, nL, nA)`` step at which a run diverged, -1 if it did not.
        seconds: wall time spent training (this process, resumed parts included).
        engine_path: the code path that took the steps (:data:`~softmax_as_linear.registry.ENGINE_PATHS`, with
            ``"+graph"`` when replayed as a CUDA graph), e.g. ``"cpu"``, ``"tensor"``, ``"prompt_kernel+graph"``;
            ``"unknown"`` in files written before it was recorded. A sweep resumed on another path records both
            (``"cpu, then tensor"``).
    """

    config: TrainConfig
    steps: np.ndarray
    train_risk: np.ndarray
    eval_risk: np.ndarray
    params: dict[str, np.ndarray]
    diverged_at: np.ndarray
    seconds: float = 0.0
    complete: bool = True
    eval_sd: np.ndarray | None = None
    engine_path: str = "unknown"

    def __post_init__(self):
        if self.eval_sd is None:
            self.eval_sd = np.full_like(self.eval_risk, np.nan)

    @property
    def eval_se(self) -> np.ndarray:
        """``(S, nL, nA, T)`` standard error of each held-out risk, ``eval_sd / sqrt(eval_prompts)``."""
        return self.eval_sd / np.sqrt(self.config.eval_prompts)

    @property
    def times(self) -> np.ndarray:
        """Gradient-flow time of each record, :math:`t = 2\\,\\mathrm{lr}\\,k` (SGD on the MSE)."""
        return 2 * self.config.lr * self.steps

    @property
    def diverged(self) -> np.ndarray:
        """``(S, nL, nA)`` True where the run diverged."""
        return self.diverged_at >= 0

    def index(self, activation: str, L: int, seed: int | None = None) -> tuple[int, int, int]:
        """The ``(seed, length, activation)`` indices of one run (seed: the first one when ``None``)."""
        cfg = self.config
        if L not in cfg.lengths:
            raise ValueError(f"L={L} is not among the sweep's lengths {cfg.lengths}")
        checks.one_of("activation", activation, cfg.models)
        seed = cfg.seeds[0] if seed is None else seed
        if seed not in cfg.seeds:
            raise ValueError(f"seed={seed} is not among the sweep's seeds {cfg.seeds}")
        return cfg.seeds.index(seed), cfg.lengths.index(L), cfg.models.index(activation)

    def parameter_gap(self) -> np.ndarray:
        """``(S, nL, T)`` squared distance :math:`\\|\\theta_{soft} - \\theta_{lin}\\|^2` over all parameters."""
        cfg = self.config
        if not set(ACTIVATIONS) <= set(cfg.models):
            raise ValueError("parameter_gap needs both activations in the sweep")
        s, lin = cfg.models.index("softmax"), cfg.models.index("linear")
        total = 0.0
        for value in self.params.values():
            diff = value[:, :, s] - value[:, :, lin]
            total = total + (diff**2).reshape(*diff.shape[:3], -1).sum(-1)
        return total

    def uv(self) -> tuple[np.ndarray, np.ndarray]:
        """The (U, V) view of the recorded parameters, each ``(S, nL, nA, T, D, D)``."""
        if "U" in self.params:
            return self.params["U"], self.params["V"]
        p = {k: torch.from_numpy(v) for k, v in self.params.items()}
        U, V = uv_from_weights(p["W_Q"], p["W_K"], p["W_V"], p["W_O"])
        return U.numpy(), V.numpy()

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat arrays for :func:`softmax_as_linear.core.artifacts.save_npz`."""
        out = {"steps": self.steps, "train_risk": self.train_risk, "eval_risk": self.eval_risk,
               "eval_sd": self.eval_sd, "diverged_at": self.diverged_at, "seconds": np.array(self.seconds),
               "complete": np.array(self.complete), "engine_path": np.array(self.engine_path)}
        out.update({f"param_{k}": v for k, v in self.params.items()})
        return out

    @classmethod
    def from_arrays(cls, config: TrainConfig, arrays: dict[str, np.ndarray]) -> "TrainResult":
        params = {k[len("param_"):]: v for k, v in arrays.items() if k.startswith("param_")}
        return cls(config, arrays["steps"], arrays["train_risk"], arrays["eval_risk"], params,
                   arrays["diverged_at"], float(arrays["seconds"]), bool(arrays["complete"]), arrays.get("eval_sd"),
                   str(arrays.get("engine_path", "unknown")))


def save_sweep(path, result: TrainResult) -> pathlib.Path:
    """Write a sweep's trajectories and its configuration to one ``.npz``, atomically."""
    return save_npz(path, config_json=np.array(json.dumps(result.config.as_dict())), **result.to_arrays())


#: Fields that files written before they existed lack, with the values those files were computed with.
_BEFORE = {"rng": "torch", "covariates": "gaussian"}
#: Fields renamed since files were first written: old name -> name (``activations`` held every model of a sweep,
#: infinite-prompt limits included; ``law`` was the covariate law of Chapter 6).
RENAMED_FIELDS = {"activations": "models", "law": "covariates"}


def config_fields(fields: dict) -> dict:
    """A configuration as a file stored it (:meth:`TrainConfig.as_dict`, at any version), with the names and
    defaults of today: renamed fields (:data:`RENAMED_FIELDS`) under their new names, fields added since
    (``_BEFORE``) with the values the file was computed with."""
    fields = {RENAMED_FIELDS.get(key, key): value for key, value in fields.items()}
    return {**_BEFORE, **fields}


def load_sweep(path) -> TrainResult:
    """Read a sweep written by :func:`save_sweep`; :class:`~softmax_as_linear.core.artifacts.DamagedFileError`
    if the file cannot be read or lacks what a sweep holds."""
    arrays = load_npz(path)
    try:
        fields = config_fields(json.loads(str(arrays.pop("config_json"))))
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        return TrainResult.from_arrays(TrainConfig(**fields), arrays)
    except (KeyError, TypeError, ValueError) as error:
        raise DamagedFileError(path, f"not a sweep file: {type(error).__name__}: {error}") from None


def save_checkpoint(path, state: dict) -> pathlib.Path:
    """Write a training state (a dict of tensors, arrays and numbers, with ``state["config"]`` the
    config's :meth:`TrainConfig.as_dict`) with ``torch.save``, atomically."""
    return atomic_write(pathlib.Path(path), lambda stream: torch.save(state, stream))


def load_checkpoint(path, config: TrainConfig, device) -> dict:
    """The state saved by :func:`save_checkpoint` at ``path``, its tensors on ``device``; a
    ``ValueError`` if it was written for another configuration, a
    :class:`~softmax_as_linear.core.artifacts.DamagedFileError` if it cannot be read.

    Only what a truncated or foreign file raises counts as damage
    (:data:`~softmax_as_linear.core.artifacts.CHECKPOINT_READ_ERRORS`, and the ``OSError`` of seeking past the end of a
    truncated zip); a ``TypeError`` or ``AttributeError`` is a bug and a ``PermissionError`` a problem of the system,
    raised as they are.
    """
    try:
        state = torch.load(pathlib.Path(path), map_location=device, weights_only=False)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except CHECKPOINT_READ_ERRORS + (OSError,) as error:
        raise DamagedFileError(path, _short(error)) from None
    if not isinstance(state, dict) or not isinstance(state.get("config"), dict):
        raise DamagedFileError(path, "not a training state")
    written_for = config_fields(state["config"])
    if written_for != config.as_dict():
        raise ValueError(f"checkpoint {path} was written for a different configuration")
    return state


def _short(error: BaseException, limit: int = 120) -> str:
    """The error's type and the first sentence of its message, at most ``limit`` characters (PyTorch's messages
    run on with advice about its internals)."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    first = first.split(". ")[0]
    if len(first) > limit:
        first = first[:limit - 3] + "..."
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
