"""Softmax as linear attention: the library of the executable course on Boyer & Boursier (arXiv 2512.11784).

Its folders are its layers; a module imports only from its own layer and the ones listed before it.

- :mod:`~softmax_as_linear.registry`: the named choices (figures, presets, samplers, token and covariate laws, devices,
  the paper's seed, the version), without torch.
- ``core``: foundations that know nothing of the paper.

  - :mod:`~softmax_as_linear.core.checks`: the argument checks behind every ``ValueError`` that names an argument.
  - :mod:`~softmax_as_linear.core.seeding`: the one rule that turns a seed into every random stream of an experiment.
  - :mod:`~softmax_as_linear.core.devices`: choice of device (CUDA when present, else the CPU).
  - :mod:`~softmax_as_linear.core.stats`: means, standard errors and intervals that claims are checked against.
  - :mod:`~softmax_as_linear.core.printing`: a zero up to rounding printed as a bound, never as its noise.
  - :mod:`~softmax_as_linear.core.artifacts`: where result files live, and how they are written (atomically) and read.
  - :mod:`~softmax_as_linear.core.provenance`: where a result was computed (device, versions, commit, time).
  - :mod:`~softmax_as_linear.core.progress`: progress lines, transient in a notebook a person runs, none elsewhere.
- ``theory``: the paper's mathematical objects and their estimators.

  - :mod:`~softmax_as_linear.theory.attention`: softmax and normalised linear attention of a prompt, and
    their Gaussian infinite-prompt limits (Lemma 2.1).
  - :mod:`~softmax_as_linear.theory.measures`: token laws (Gaussian and non-Gaussian) with known moments.
  - :mod:`~softmax_as_linear.theory.tilting`: the tilted measure behind softmax attention and the
    infinite-prompt limit of any token law (closed form, importance sampling, quadrature).
  - :mod:`~softmax_as_linear.theory.concentration`: estimators of finite-prompt attention against its
    infinite-prompt limit (Propositions 3.1 and 3.4).
  - :mod:`~softmax_as_linear.theory.covariates`: laws of the standardised input entries of in-context
    regression (Gaussian, uniform, Rademacher): draws, cumulants, moments, quadrature.
  - :mod:`~softmax_as_linear.theory.regression`: in-context linear regression, the task and its prompt sampler.
  - :mod:`~softmax_as_linear.theory.risks`: its risks, of linear and softmax attention in closed form and of the
    optimal predictors.
  - :mod:`~softmax_as_linear.theory.flow_limits`: where its gradient flow starts and where it ends (Assumption 5.1,
    Remark 5.3, Appendix F.3).
  - :mod:`~softmax_as_linear.theory.sgd_noise`: per-prompt gradients of linear attention and the excess risk SGD's
    noise leaves.
  - :mod:`~softmax_as_linear.theory.limit_model`: the infinite-prompt softmax model of in-context regression
    for any covariate law (Chapter 6).
  - :mod:`~softmax_as_linear.theory.models`: the paper's four-matrix attention model and its (U, V) view.
  - :mod:`~softmax_as_linear.theory.flow`: the infinite-prompt gradient flow (Theorem 4.3's reference dynamics).
  - :mod:`~softmax_as_linear.theory.stability`: the gaps to the infinite-prompt limit along a parameter
    trajectory (Section 4).
  - :mod:`~softmax_as_linear.theory.depth`: K residual attention layers on a prompt and their exact
    infinite-prompt recursion on Gaussian token laws (Chapter 7).
  - :mod:`~softmax_as_linear.theory.deep_limit`: the infinite-prompt K-layer network on in-context regression
    (the recursion of each task's token law).
  - :mod:`~softmax_as_linear.theory.depth_lipschitz`: a layer-by-layer Lipschitz chain on the finite-prompt error
    of K layers, against the measured one.
  - :mod:`~softmax_as_linear.theory.preconditioned_gd`: steps of preconditioned gradient descent on the prompt's
    least squares and the best preconditioners for a task (Chapter 7).
  - :mod:`~softmax_as_linear.theory.cosine_task`: a nonlinear in-context task (random cosine features, a
    Gaussian-process prior) with its exact Bayes predictor and best affine predictor (Chapter 8).
  - :mod:`~softmax_as_linear.theory.tilted_limit`: the infinite-prompt limit of attention for nonlinear labels of
    Gaussian inputs, in closed form (Chapter 8).
  - :mod:`~softmax_as_linear.theory.kernel_smoother`: softmax attention on the sphere as a Nadaraya-Watson smoother,
    and its best bandwidth (Chapter 8).
  - :mod:`~softmax_as_linear.theory.circle_quadrature`: the cosine task's feature moments on the circle and the
    infinite-prompt risks of linear attention they give, by quadrature (Chapter 8).
  - :mod:`~softmax_as_linear.theory.attention_optimum`: the best weights of one attention layer on fixed prompts
    (sample-average optimisation), softmax, Nadaraya-Watson, linear and affine (Chapter 8).
- ``engine``: training.

  - :mod:`~softmax_as_linear.engine.reference`: one run trained with plain autograd and ``torch.optim.SGD``, the
    loop every path of the engine is checked against.
  - :mod:`~softmax_as_linear.engine.train`: the training loop of a sweep, every run at once.
  - :mod:`~softmax_as_linear.engine.train_cache`: trained sweeps kept in a folder and reused while their
    configuration and the code that trains them are unchanged (opt-in, for the chapters' checks).
  - :mod:`~softmax_as_linear.engine.stepper`: the step interface the loop is written against.
  - :mod:`~softmax_as_linear.engine.tensor_step`: the step on batches drawn as tensors (the CPU path, and the
    tensor formulas on a GPU).
  - :mod:`~softmax_as_linear.engine.records`: what the loop records at its record steps.
  - :mod:`~softmax_as_linear.engine.sweep`: a sweep's settings and results
    (:class:`~softmax_as_linear.engine.sweep.TrainConfig`, :class:`~softmax_as_linear.engine.sweep.TrainResult`) and
    their files.
  - :mod:`~softmax_as_linear.engine.batched`: every run's parameters stacked, and their forward pass at once.
  - :mod:`~softmax_as_linear.engine.data`: the training batches and held-out prompts of a sweep, as tensors.
  - :mod:`~softmax_as_linear.engine.moments`: the mean and standard deviation of losses summed in chunks.
  - :mod:`~softmax_as_linear.engine.deep`: a stepper that trains deep residual attention (Chapter 7) on
    in-context regression, runs of shape (seeds, lengths, models).
  - :mod:`~softmax_as_linear.engine.deep_limit`: a stepper that trains the infinite-prompt K-layer network,
    paired with a deep sweep.
  - :mod:`~softmax_as_linear.engine.deep_schedule`: the deep stepper with a step decay of its learning rate.
  - :mod:`~softmax_as_linear.engine.window_step`: a stepper that trains Chapter 8's softmax layer with its window on a
    log scale.
  - :mod:`~softmax_as_linear.engine.evaluation`: final risks of a trained sweep on fresh prompts (exact
    for linear attention).
  - ``engine.gpu``: the GPU's optimisations, which a reader of the loop can leave aside.

    - :mod:`~softmax_as_linear.engine.gpu.prompt_kernel`: the GPU training step with the prompts drawn inside the
      kernel (Triton): its host side; the kernels are :mod:`~softmax_as_linear.engine.gpu.philox` (the draws),
      :mod:`~softmax_as_linear.engine.gpu.attention_sums` (every run's sums) and
      :mod:`~softmax_as_linear.engine.gpu.sgd` (the update).
    - :mod:`~softmax_as_linear.engine.gpu.kernel_step`: the stepper of the prompt kernel.
    - :mod:`~softmax_as_linear.engine.gpu.counter_stream`: the counter-based prompt stream (Philox) in plain torch,
      the same prompts on every device.
    - :mod:`~softmax_as_linear.engine.gpu.fused_softmax`: the softmax part of the forward pass as one GPU kernel.
    - :mod:`~softmax_as_linear.engine.gpu.cuda_graph`: a training step captured as a CUDA graph.
    - :mod:`~softmax_as_linear.engine.gpu.fallback`: which errors mean "not available here", and strict mode.
- ``experiments``: the paper's experiments.

  - :mod:`~softmax_as_linear.experiments.presets`: every named setting (sweeps, Figures 1 and 5, the
    training panel's first run).
  - :mod:`~softmax_as_linear.experiments.paper_figures`: the data of the training figures (2-4, 6-8).
  - :mod:`~softmax_as_linear.experiments.file_names`: the names of the figures' and Chapter 6's result files, and
    the reading of any result file (partial, damaged or missing: named with the command that writes it).
  - :mod:`~softmax_as_linear.experiments.result_files`: every result file's name, loader and the command that
    rebuilds it.
  - :mod:`~softmax_as_linear.experiments.concentration_figures`: Figures 1 and 5, and the gaps along a trained run.
  - :mod:`~softmax_as_linear.experiments.analysis`: trained runs and result files read against the theory and
    each other (flow gap, seed outcomes, the read-outs the training chapters test).
  - :mod:`~softmax_as_linear.experiments.uncertainty`: standard errors of the risks recorded along training and
    of their changes (measured, inferred from the final evaluation, or paired on fresh prompts).
  - :mod:`~softmax_as_linear.experiments.trajectory`: a recorded trajectory read as a whole: whether each run
    still moves at the end (a trend test whose null is a stationary training process, its error from the run's own
    scatter), the smallest fall it resolves, and since when the run has settled.
  - :mod:`~softmax_as_linear.experiments.false_alarms`: the chance of as many runs called moving at the trend
    test's simulated false-alarm rates for a reading's own design, with correlated records as well as independent.
  - :mod:`~softmax_as_linear.experiments.pipeline`: the one engine of the reproductions: a reproduction declares
    its stages, file and fields; training or resuming a stage under a deadline (the one loop behind every chapter's
    sweeps), the "up to date" short-cut, completeness, restart, the partial file, the shard merge and the reader are
    written there once.
  - every reproduction declared in a module of its own, listed in the registry
    :data:`~softmax_as_linear.experiments.reproductions.REPRODUCTIONS` that the command, the merge, the option checks,
    the help and the readers iterate over: :mod:`~softmax_as_linear.experiments.reproductions.figures`,
    :mod:`~softmax_as_linear.experiments.reproductions.beyond`,
    :mod:`~softmax_as_linear.experiments.reproductions.depth`,
    :mod:`~softmax_as_linear.experiments.reproductions.nonlinear`,
    :mod:`~softmax_as_linear.experiments.reproductions.nonlinear_depth`,
    :mod:`~softmax_as_linear.experiments.reproductions.nonlinear_window` and
    :mod:`~softmax_as_linear.experiments.reproductions.nonlinear_optima`.
  - :mod:`~softmax_as_linear.experiments.sweep_stage`: the engine's shared sweep (the paper's figures', Chapter 6's),
    read when up to date, else trained or resumed, its final risks measured once, and its shards joined.
  - :mod:`~softmax_as_linear.experiments.reproduce`: what the command runs, its options checked and every
    reproduction of the registry named in turn.
  - :mod:`~softmax_as_linear.experiments.shard_files`: a shard's result file read, and the one provenance rule of
    every merge.
  - :mod:`~softmax_as_linear.experiments.shards`: a reproduction split into shards of seeds (SLURM through
    submitit, one GPU per process, or by hand) and merged into the files of one run.
  - :mod:`~softmax_as_linear.experiments.beyond_gaussian`: Chapter 6's experiment, Theorem 4.3 where the
    infinite-prompt limit is not linear.
  - :mod:`~softmax_as_linear.experiments.beyond_reading`: Chapter 6's sweeps read run by run with the
    trajectory reader.
  - :mod:`~softmax_as_linear.experiments.depth_tracking`: Chapter 7's tracking experiment, finite-prompt deep
    training against the trained infinite-prompt deep network.
  - :mod:`~softmax_as_linear.experiments.depth_regression`: Chapter 7's in-context regression with one and two
    layers against the references.
  - :mod:`~softmax_as_linear.experiments.live_measures`: the data the live panels of Chapters 1 and 2 draw
    (prompts against their token law, Lemma 2.1 in the plane).
  - :mod:`~softmax_as_linear.experiments.nonlinear`: Chapter 8's experiment, softmax and linear attention trained on
    a nonlinear task against its references, and the learned window.
  - :mod:`~softmax_as_linear.experiments.nonlinear_depth`: Chapter 8's second layer, one- and two-layer attention
    trained on the nonlinear task with Chapter 7's engine, paired.
  - :mod:`~softmax_as_linear.experiments.nonlinear_reading`: Chapter 8's result files read: differences paired by
    seed, the window's local exponent, the gap between linear and softmax attention split by reference.
  - :mod:`~softmax_as_linear.experiments.nonlinear_optima`: Chapter 8's optima, the layer's own best window against
    :math:`L` with replicates, and the gap to linear attention split into intercept and locality.
  - :mod:`~softmax_as_linear.experiments.optima_precision`: the precision of Chapter 8's optima, the small-set bias
    of the window checked on larger sets and the held-out risk profiled over the window.
  - :mod:`~softmax_as_linear.experiments.nonlinear_window`: Chapter 8's layer trained with its window on a log scale
    until the window settles, read against the layer's optimal windows.
  - :mod:`~softmax_as_linear.experiments.window_reach`: how far trained softmax windows are from the layer's optimal
    windows.
  - :mod:`~softmax_as_linear.experiments.linearity_map`: Chapter 9's measure, how far trained softmax attention is
    from linear attention at each prompt length, in every regime, read from the chapters' result files.
- ``figures``: plotly figures.

  - :mod:`~softmax_as_linear.figures.style`: the plotly style and the figure helpers every chapter shares.
  - :mod:`~softmax_as_linear.figures.geometry`: plane geometry of the measure-view figures.
  - :mod:`~softmax_as_linear.figures.measure_view`: the figures of Chapters 0 and 1 (a prompt against its token law).
  - :mod:`~softmax_as_linear.figures.lemma_2_1`: the figures of Chapter 2 (Lemma 2.1 drawn).
  - :mod:`~softmax_as_linear.figures.concentration`: the figures of Chapter 3 (the gaps to the limit against L).
  - :mod:`~softmax_as_linear.figures.paper`: the paper's figures and those of the training chapters.
  - :mod:`~softmax_as_linear.figures.beyond_gaussian`: the figures of Chapter 6 (covariate laws beyond the Gaussian).
  - :mod:`~softmax_as_linear.figures.depth`: the figures of Chapter 7 (deep attention and its Gaussian recursion).
  - :mod:`~softmax_as_linear.figures.depth_tracking`: the figure of Chapter 7's tracking experiment.
  - :mod:`~softmax_as_linear.figures.depth_regression`: Chapter 7's regression figure (one and two layers against
    the references).
  - :mod:`~softmax_as_linear.figures.nonlinear`: the figures of Chapter 8 (nonlinear tasks, the window against
    :math:`L`).
  - :mod:`~softmax_as_linear.figures.linearity_map`: Chapter 9's map (the measure against :math:`L`, one curve per
    regime).
- ``panels``: live ipywidgets panels.

  - :mod:`~softmax_as_linear.panels.widgets`: controls, message lines and the panel every chapter uses.
  - :mod:`~softmax_as_linear.panels.measures`: the panels of Chapters 1 and 2 (a prompt against its law, Lemma 2.1).
  - :mod:`~softmax_as_linear.panels.concentration`: Chapter 3's panel (the output gap against the prompt length).
  - :mod:`~softmax_as_linear.panels.flow`: the infinite-prompt gradient flow, live (Chapters 4 and 5).
  - :mod:`~softmax_as_linear.panels.training`: training from a panel, in the background.
  - :mod:`~softmax_as_linear.panels.beyond_gaussian`: the live panel of Chapter 6 (covariate law and prompt length).
  - :mod:`~softmax_as_linear.panels.depth`: the live panel of Chapter 7 (token clouds through K layers).
  - :mod:`~softmax_as_linear.panels.nonlinear`: the live panel of Chapter 8 (the tilted limit against a finite prompt,
    the window of a kernel smoother).
  - :mod:`~softmax_as_linear.panels.linearity_map`: the live panel of Chapter 9 (the map, regimes and variant picked).
- ``exercises``: the coding exercises, a student's function checked against the library.

  - :mod:`~softmax_as_linear.exercises.feedback`: the checker, which runs a student's function on random and edge
    cases against the reference and says what is wrong, never the answer.
  - :mod:`~softmax_as_linear.exercises.chapter1`: Chapter 1's coding exercises.
  - :mod:`~softmax_as_linear.exercises.chapter2`: Chapter 2's coding exercises.
  - :mod:`~softmax_as_linear.exercises.chapter3`: Chapter 3's coding exercises.
  - :mod:`~softmax_as_linear.exercises.chapter4`: Chapter 4's coding exercises.
  - :mod:`~softmax_as_linear.exercises.chapter5`: Chapter 5's coding exercises.
  - :mod:`~softmax_as_linear.exercises.chapter6`: Chapter 6's coding exercises.
  - :mod:`~softmax_as_linear.exercises.chapter7`: Chapter 7's coding exercises.
  - :mod:`~softmax_as_linear.exercises.chapter8`: Chapter 8's coding exercises.
- :mod:`~softmax_as_linear.cli`: the command line that reproduces the paper's figures (``python -m softmax_as_linear``),
  whole or in shards.

The most used names load from the top on first use (``sal.RegressionTask``, ``sal.softmax_attention``),
so importing the package is instant and the command line's ``--help`` does not load torch.

Public names (``dir(softmax_as_linear)``, besides ``__version__``): the layers ``core``, ``theory``, ``engine``,
``experiments``, ``figures``, ``panels``, ``exercises``; the modules ``registry`` and ``cli``; and the most used names,
``AttentionModel``, ``RegressionTask``, ``TokenLaw``, ``TrainConfig``, ``TrainResult``, ``bayes_risk``,
``block_init``, ``degenerate_limit_parameters``, ``gaussian_attention``, ``gaussian_linear_attention``,
``infinite_prompt_linear``, ``infinite_prompt_risk``, ``infinite_prompt_softmax``, ``kms_covariance``,
``limit_parameters``, ``linear_attention``, ``linear_attention_risk``, ``optimal_linear_risk``,
``softmax_attention``, ``tilted_gaussian``, ``train``.
"""
import importlib as _importlib

from .registry import VERSION as _VERSION

__version__ = _VERSION

__all__ = [
    "AttentionModel", "RegressionTask", "TokenLaw", "TrainConfig", "TrainResult", "bayes_risk", "block_init",
    "degenerate_limit_parameters", "gaussian_attention", "gaussian_linear_attention", "infinite_prompt_linear",
    "infinite_prompt_risk", "infinite_prompt_softmax", "kms_covariance", "limit_parameters", "linear_attention",
    "linear_attention_risk", "optimal_linear_risk", "softmax_attention", "tilted_gaussian", "train",
]

# Even torch loads on first use, so that the command line's --help and --version answer at once.
_LAZY_NAMES = {
    "AttentionModel": "theory.models", "RegressionTask": "theory.regression", "TokenLaw": "theory.measures",
    "TrainConfig": "engine.sweep", "TrainResult": "engine.sweep", "bayes_risk": "theory.risks",
    "block_init": "theory.flow_limits", "degenerate_limit_parameters": "theory.flow_limits",
    "gaussian_attention": "theory.attention",
    "gaussian_linear_attention": "theory.attention", "infinite_prompt_linear": "theory.tilting",
    "infinite_prompt_risk": "theory.risks", "infinite_prompt_softmax": "theory.tilting",
    "kms_covariance": "theory.regression", "limit_parameters": "theory.flow_limits",
    "linear_attention": "theory.attention", "linear_attention_risk": "theory.risks",
    "optimal_linear_risk": "theory.risks", "softmax_attention": "theory.attention",
    "tilted_gaussian": "theory.attention", "train": "engine.train",
}
_SUBPACKAGES = ("core", "theory", "engine", "experiments", "figures", "panels", "exercises", "registry", "cli")


def __getattr__(name: str):
    # Subpackages and the names above load on first access, so `import softmax_as_linear` stays light.
    if name in _SUBPACKAGES:
        return _importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(_importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    # the public names the docstring lists, and the module's dunders; not what loading a submodule leaves behind
    return sorted({name for name in globals() if name.startswith("__")} | set(_SUBPACKAGES) | set(_LAZY_NAMES))
