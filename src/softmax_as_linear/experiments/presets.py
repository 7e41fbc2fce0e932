r"""Every named setting of the course's experiments, written once: the training sweeps, the
concentration figures (1 and 5) and the first run of the live training panel.

- Training sweeps (Figures 2-4 and 6-8, :func:`sweep_config`): presets ``"paper"`` (the settings of
  Section 6 and Appendix A as the paper's published code runs them, except the anisotropic sampler),
  ``"lecture"`` (the same stories in about two minutes on a 2-core CPU) and ``"smoke"`` (seconds: checks
  that every step of a reproduction runs); :data:`PAPER_LENGTHS`, :data:`~softmax_as_linear.registry.PAPER_SEED`,
  :func:`sweep_seeds`, :data:`FINAL_PROMPTS` for the final evaluation and :data:`CHANGE_PROMPTS` for the
  paired changes along training.
- Figures 1 and 5 (:data:`CONCENTRATION_PRESETS`, :data:`CONCENTRATION_SEED`): prompt lengths and
  prompt counts of softmax against linear attention at the initialisation, ``"lecture"``, ``"paper"`` and
  ``"smoke"``.
- The live training panel of Chapters 4 and 5 (:data:`PANEL`): its first click, built from the lecture preset.
- Chapter 6's sweeps (:func:`beyond_config`), Chapter 7's (:data:`DEPTH_SETTINGS`, :data:`DEPTH_WARM`) and Chapter 8's
  (:data:`NONLINEAR_SETTINGS` and :data:`NONLINEAR_TASK`, :data:`NONLINEAR_DEPTH_SETTINGS`,
  :data:`NONLINEAR_WINDOW_SETTINGS`, :data:`NONLINEAR_OPTIMA_SETTINGS`).

The paper preset uses the published code's task, model, PyTorch initialisation, batch size, optimiser,
learning rate, steps and lengths. For KMS inputs it draws prompt and query inputs from the paper's
model, :math:`N(0, \Sigma)`, by default; the published code draws them differently (see the
``sampler`` of :class:`~softmax_as_linear.theory.regression.RegressionTask`). Risks are reported as
:math:`R = \tfrac12 \mathrm{MSE}`, half of what the published code prints.

The lecture preset keeps the paper's task, model, initialisation, batch size and optimiser (plain
SGD on the MSE from PyTorch's default initialisation, softmax and linear paired) and changes only
what costs time: six prompt lengths up to 500 instead of nineteen up to 1000, a learning rate ten
times larger and 60 times fewer steps (gradient-flow time ``2 lr steps`` = 100 instead of 600), and
a smaller held-out set. With isotropic inputs the lecture risks have essentially settled by the end;
with KMS inputs they have not (the infinite-prompt flow itself needs about ten times longer, Chapter 5),
so the lecture KMS sweep shows slower optimisation, not the converged risks of the paper preset.
"""
from __future__ import annotations

from ..core import checks
from ..engine.sweep import TrainConfig
from ..registry import PAPER_SEED, PRESETS

#: The paper's prompt lengths: 10 to 90 by 10, then 100 to 1000 by 100.
PAPER_LENGTHS = tuple(range(10, 100, 10)) + tuple(range(100, 1001, 100))
LECTURE_LENGTHS = (10, 20, 50, 100, 200, 500)

_BASE = {
    "paper": dict(d=5, noise_var=0.1, lengths=PAPER_LENGTHS, seeds=(PAPER_SEED,), steps=300_000, batch_size=128,
                  lr=1e-3, optimizer="sgd", parametrisation="four_matrix", init="pytorch", record_every=1000,
                  eval_prompts=4096),
    "lecture": dict(d=5, noise_var=0.1, lengths=LECTURE_LENGTHS, seeds=(PAPER_SEED,), steps=5_000,
                    batch_size=128, lr=1e-2, optimizer="sgd", parametrisation="four_matrix", init="pytorch",
                    record_every=50, eval_prompts=2048),
    # seconds on a CPU: checks that every step of a reproduction runs (benchmarks/gpu.sh with PRESET=smoke)
    "smoke": dict(d=5, noise_var=0.1, lengths=(10, 20), seeds=(PAPER_SEED,), steps=40, batch_size=32, lr=1e-2,
                  optimizer="sgd", parametrisation="four_matrix", init="pytorch", record_every=10, eval_prompts=256),
}

#: Fresh prompts per seed and L on which a sweep's final risks are measured
#: (:func:`~softmax_as_linear.engine.evaluation.final_evaluation`): the per-prompt loss of a trained run has a
#: relative standard deviation of about 1.8 (measured on the lecture sweep), so a standard error below
#: 0.5 % of the risk needs about 130,000 prompts.
FINAL_PROMPTS = {"paper": 200_000, "lecture": 150_000, "smoke": 2_000}

#: Fresh prompts per seed and L on which two records of a run are compared, paired (the fall of the risk over
#: the last half, quarter and tenth of training stored with Figures 4 and 8,
#: :func:`~softmax_as_linear.experiments.uncertainty.trajectory_changes`).
CHANGE_PROMPTS = {"paper": 50_000, "lecture": 20_000, "smoke": 1_000}


def sweep_seeds(n: int) -> tuple[int, ...]:
    """The seeds of an ``n``-seed sweep: the paper's seed 327 first, then 0, 1, 2, ... (skipping 327)."""
    n = checks.positive_int("seeds", n)
    return (PAPER_SEED, *[s for s in range(n) if s != PAPER_SEED][: n - 1])


def sweep_config(preset: str, covariance: str = "isotropic", **overrides) -> TrainConfig:
    """The :class:`~softmax_as_linear.engine.sweep.TrainConfig` of a preset, for ``"isotropic"`` or ``"kms"`` inputs.

    ``overrides`` replace fields (for example ``seeds=(1, 2, 3)``) and are validated like any config.
    """
    checks.one_of("preset", preset, PRESETS)
    checks.one_of("covariance", covariance, ("isotropic", "kms"))
    return TrainConfig(**{**_BASE[preset], "covariance": covariance, "rho": 0.5, **overrides})


#: Figures 1 and 5: softmax against normalised linear attention at the initialisation of the training
#: experiments (isotropic inputs for Figure 1, KMS inputs with rho = 0.5 for Figure 5), from the paper's seed.
CONCENTRATION_SEED = PAPER_SEED
#: The prompt lengths and batches of Figures 1 and 5, per preset.
CONCENTRATION_PRESETS = {
    # seconds on a CPU: lengths of the paper's range and one beyond it, 8 batches of 128 prompts
    "lecture": dict(lengths=(10, 30, 100, 300, 1000, 3000), batch=128, n_batches=8),
    # the paper's grid and beyond it up to 5 x 10^4, 16 batches of 128 prompts (2048 prompts per length)
    "paper": dict(lengths=PAPER_LENGTHS + (2000, 5000, 10_000, 20_000, 50_000), batch=128, n_batches=16),
    # a second on a CPU: checks that the reproduction of Figures 1 and 5 runs (`reproduce all --preset smoke`)
    "smoke": dict(lengths=(10, 100), batch=16, n_batches=2),
}

#: The first click of the live training panel (Chapters 4 and 5): the lecture preset at one prompt length
#: with a ten times larger step, so that its gradient-flow time 2 lr steps = 100 takes 500 steps (seconds
#: on a CPU) and both activations leave the initial plateau within the run.
PANEL = dict(preset="lecture", L=20, lr=0.1, steps=500)


#: Chapter 6: in-context regression with non-Gaussian covariates. Every sweep trains, from the paper's
#: model and initialisation, softmax and linear attention at each L and their infinite-prompt limits on
#: the same batches (the limits read the batches' tasks and queries only), so that the distance of a
#: finite-L run to its limit measures what the finite prompt changes, and nothing else.
BEYOND_MODELS = ("softmax", "linear", "softmax_limit", "linear_limit")
BEYOND_LENGTHS = (10, 30, 100, 300, 1000)
_BEYOND = {
    # one GPU: the paper's learning rate and batch, ten seeds, prompt lengths to 3000, flow time 2 lr steps = 80
    "paper": dict(lengths=BEYOND_LENGTHS + (3000,), seeds=sweep_seeds(10), steps=40_000, lr=1e-3, record_every=500,
                  eval_prompts=4096),
    # a 2-core CPU in about two minutes per law: forty times the paper's step, flow time 2 lr steps = 50
    "lecture": dict(lengths=BEYOND_LENGTHS, seeds=(PAPER_SEED, 0, 1), steps=625, lr=0.04, record_every=12,
                    eval_prompts=1024),
    # seconds: checks that every step runs
    "smoke": dict(lengths=(10, 30), seeds=(PAPER_SEED, 0), steps=40, batch_size=32, lr=0.02, record_every=10,
                  eval_prompts=128),
}
#: Fresh prompts per seed and L of the final evaluation of a Chapter 6 sweep.
BEYOND_FINAL_PROMPTS = {"paper": 50_000, "lecture": 6_000, "smoke": 500}
#: (w, x_q) samples of the Monte Carlo estimates of R_inf at the end of a Chapter 6 sweep.
BEYOND_LIMIT_SAMPLES = {"paper": 1 << 20, "lecture": 1 << 18, "smoke": 1 << 12}


def beyond_config(preset: str, covariates: str = "uniform", **overrides) -> TrainConfig:
    """The :class:`~softmax_as_linear.engine.sweep.TrainConfig` of a Chapter 6 sweep: the paper's task (d = 5,
    :math:`\\Sigma = I`, :math:`\\tau^2 = 1/d`, :math:`s^2 = 0.1`), model, initialisation and batch with inputs of
    the covariate law ``covariates``, and the four models of :data:`BEYOND_MODELS`. ``overrides`` replace fields."""
    checks.one_of("preset", preset, PRESETS)
    base = dict(d=5, noise_var=0.1, covariance="isotropic", batch_size=128, optimizer="sgd",
                parametrisation="four_matrix", init="pytorch", models=BEYOND_MODELS)
    return TrainConfig(**{**base, **_BEYOND[preset], "covariates": covariates, **overrides})


# Chapter 7: in-context regression with one and two attention layers (experiments.depth_regression). Chapter 4's
# task (d = 5, Sigma = I, tau^2 = 1/d, s^2 = 0.1); every seed trains one- and two-layer softmax and normalised linear
# attention from the block start of Assumption 5.1 (alpha = 0.3, every layer) on the same batches, with Adam, whose
# step is divided by ten for the last quarter of training so that the final risks measure the models, not the
# optimiser's noise. A softmax layer over the prompt costs O(L^2 D) per prompt: the lengths are sized to the device.
#: Chapter 7's regression sweeps by preset: depths, lengths, seeds, steps and step decay (``reproduce depth``).
DEPTH_SETTINGS = {
    # one GPU, a few minutes: five seeds, prompts to 160 tokens, 8,000 steps of 256 prompts
    "paper": dict(lengths=(10, 20, 40, 80, 160), seeds=sweep_seeds(5), steps=8_000, batch_size=256, lr=0.01,
                  record_every=200, held_out_prompts=2048, final_prompts=50_000, pgd_samples=200_000,
                  bayes_samples=50_000),
    # a 2-core CPU in about ten minutes (the command line; the chapter reads the file): three seeds, L to 40
    "lecture": dict(lengths=(10, 20, 40), seeds=sweep_seeds(3), steps=4_000, batch_size=64, lr=0.01,
                    record_every=50, held_out_prompts=1024, final_prompts=20_000, pgd_samples=100_000,
                    bayes_samples=20_000),
    # seconds: checks that every step runs
    "smoke": dict(lengths=(5, 10), seeds=sweep_seeds(2), steps=40, batch_size=16, lr=0.01, record_every=10,
                  held_out_prompts=64, final_prompts=400, pgd_samples=2_000, bayes_samples=1_000),
}
# Chapter 7's second stage: two-layer softmax attention trained from the trained two-layer linear weights.
#: Chapter 7's warm stage by preset: two-layer softmax retrained from the trained two-layer linear weights.
DEPTH_WARM = {
    "paper": dict(steps=4_000, lr=0.003, record_every=200),
    "lecture": dict(steps=6_000, lr=0.003, record_every=100),
    "smoke": dict(steps=8, lr=0.003, record_every=4),
}


# Chapter 8 ---------------------------------------------------------------------------------------------------------

#: Chapter 8 (:mod:`~softmax_as_linear.experiments.nonlinear`): the sweep of each preset. ``lecture`` trains in about
#: ten minutes of one CPU core; ``paper`` is the GPU-sized one.
NONLINEAR_SETTINGS = {
    "lecture": dict(lengths=(10, 32, 100, 316, 1000), seeds=(0, 1, 2, 3), steps=1500, batch_size=64,
                    record_every=50, eval_prompts=512),
    "paper": dict(lengths=(10, 32, 100, 316, 1000, 3162), seeds=tuple(range(10)), steps=20000, batch_size=256,
                  record_every=200, eval_prompts=2048),
    "smoke": dict(lengths=(10, 32), seeds=(0, 1), steps=20, batch_size=16, record_every=10, eval_prompts=64),
}
#: The task and the optimiser, the same at every preset.
NONLINEAR_TASK = dict(d=2, labels="cosine", features=64, frequency=2.0, noise_var=0.05, task_var=1.0,
                      optimizer="adam", lr=0.1, init_scale=0.1)
#: Fresh prompts per length of the final evaluation, and prompts of the references (Bayes, Nadaraya-Watson).
NONLINEAR_FINAL_PROMPTS = {"lecture": 4096, "paper": 16384, "smoke": 256}
NONLINEAR_REFERENCE_PROMPTS = {"lecture": 2048, "paper": 8192, "smoke": 128}

#: The window's dependence on the task: (frequency scale, label noise) pairs trained at one length, softmax only,
#: changing one setting of :data:`NONLINEAR_TASK` at a time.
NONLINEAR_DEPENDENCE = ((1.0, 0.05), (2.0, 0.05), (4.0, 0.05), (2.0, 0.01), (2.0, 0.25))
#: The length at which the dependence is trained, per preset.
NONLINEAR_DEPENDENCE_LENGTH = {"lecture": 100, "paper": 316, "smoke": 32}

#: Chapter 8's softmax layer trained with its window on a log scale until the window settles
#: (:mod:`~softmax_as_linear.experiments.nonlinear_window`): the sweep over lengths, and the steps of each setting of
#: the window's dependence (:data:`NONLINEAR_DEPENDENCE`, at :data:`NONLINEAR_DEPENDENCE_LENGTH`). The lecture preset:
#: about twenty minutes of one CPU core, ten on two shards.
NONLINEAR_WINDOW_SETTINGS = {
    "lecture": dict(lengths=(10, 32, 100, 316, 1000), seeds=(0, 1, 2), steps=4000, batch_size=64, record_every=50,
                    held_out_prompts=512, final_prompts=4096, dependence_steps=3000),
    "paper": dict(lengths=(10, 32, 100, 316, 1000, 3162), seeds=tuple(range(10)), steps=8000, batch_size=256,
                  record_every=100, held_out_prompts=2048, final_prompts=16384, dependence_steps=6000),
    "smoke": dict(lengths=(5, 10), seeds=(0, 1), steps=12, batch_size=8, record_every=4, held_out_prompts=16,
                  final_prompts=64, dependence_steps=8),
}

#: Chapter 8's optima (:mod:`~softmax_as_linear.experiments.nonlinear_optima`), each preset: lengths, replicates K,
#: tokens per prompt set (prompts = tokens // L, capped; from ``large_from`` on, ``large_tokens``, as the risk flattens
#: around the optimum there), the lengths from which the exponent is read against the heuristic, and the dependence
#: study's settings; from ``large_from`` on, the bias checks of the best window (``pool``: replicates per pooled refit;
#: ``profile``: the held-out profile over log w), and ``draws``, the optima for other draws of the task's features.
#: The lecture preset: about 40 minutes of one CPU core.
NONLINEAR_OPTIMA_SETTINGS = {
    "lecture": dict(lengths=(10, 32, 100, 316, 1000, 3162, 10000), replicates=8, tokens=1 << 20, max_prompts=1 << 14,
                    large_from=1000, large_tokens=1 << 22, dependence_length=NONLINEAR_DEPENDENCE_LENGTH["lecture"],
                    dependence_replicates=6, noise_levels=(0.01, 0.05, 0.25), frequencies=(1.0, 2.0, 4.0), pool=4,
                    profile=dict(replicates=3, points=5, queries=8, min_step=0.05, max_step=0.5, gtol=1e-6),
                    draws=dict(feature_seeds=(1, 2, 3, 4, 5), lengths=(32, 100, 316), replicates=1)),
    "smoke": dict(lengths=(10, 100), replicates=3, tokens=1 << 13, max_prompts=256, large_from=10, large_tokens=1 << 13,
                  dependence_length=32, dependence_replicates=3, noise_levels=(0.01, 0.25), frequencies=(1.0, 4.0),
                  pool=3, profile=dict(replicates=2, points=5, queries=4, min_step=0.05, max_step=0.5, gtol=1e-6),
                  draws=dict(feature_seeds=(1,), lengths=(10, 100), replicates=1)),
}

#: Chapter 8's one- and two-layer sweep (:mod:`~softmax_as_linear.experiments.nonlinear_depth`) of each preset
#: (the lecture preset: about two minutes of one CPU core).
NONLINEAR_DEPTH_SETTINGS = {
    "lecture": dict(lengths=(10, 32, 100), seeds=(0, 1, 2), steps=1500, batch_size=64, record_every=50,
                    held_out_prompts=512, final_prompts=4096),
    "paper": dict(lengths=(10, 32, 100, 316, 1000), seeds=tuple(range(10)), steps=20000, batch_size=256,
                  record_every=200, held_out_prompts=2048, final_prompts=16384),
    "smoke": dict(lengths=(5, 10), seeds=(0, 1), steps=12, batch_size=8, record_every=4, held_out_prompts=16,
                  final_prompts=64),
}


def shard_seeds(seeds: tuple[int, ...], k: int, n: int) -> tuple[int, ...]:
    """The seeds of shard ``k`` of ``n`` (``1 <= k <= n <= len(seeds)``): consecutive blocks, the first
    ``len(seeds) % n`` one seed longer, in the reproduction's order (so shards 1..n, joined, are ``seeds``)."""
    if not 1 <= k <= n <= len(seeds):
        raise ValueError(f"shard must be k/n with 1 <= k <= n <= {len(seeds)} (the number of seeds), got {k}/{n}")
    size, extra = divmod(len(seeds), n)
    start = (k - 1) * size + min(k - 1, extra)
    return tuple(seeds[start:start + size + (k <= extra)])


def all_seeds(preset: str, seeds: int | None = None, beyond: bool = False) -> tuple[int, ...]:
    """The seeds of a sweep's reproduction: the preset's (the paper's figures: 327; Chapter 6, ``beyond``: its
    preset's), or the first ``seeds`` of :func:`sweep_seeds`."""
    if seeds is not None:
        return sweep_seeds(seeds)
    return beyond_config(preset).seeds if beyond else sweep_config(preset).seeds
