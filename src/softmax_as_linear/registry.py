"""The course's named choices, declared once and without importing torch: version, figures, presets,
samplers, covariances, activations, models, token laws, random streams, covariate laws, devices, shard launchers and
the paper's seed.

Every layer reads its choices from here (the command line too, so that ``--help`` stays instant), and
every ``ValueError`` about one of them lists the names below.
"""
from __future__ import annotations

#: The library's version; ``pyproject.toml`` reads it from here (one source).
VERSION = "0.2.0"

#: The seed of the paper's published experiments.
PAPER_SEED = 327

#: Attention activations: softmax attention and normalised linear attention.
ACTIVATIONS = ("softmax", "linear")

#: Infinite-prompt models a sweep can train beside finite prompts (Chapter 6): the limit of each activation,
#: trained on the batches' tasks and queries alone (no prompt).
LIMIT_MODELS = ("softmax_limit", "linear_limit")

#: Every model a training sweep can hold: the two activations at finite ``L`` and their infinite-prompt limits.
MODELS = (*ACTIVATIONS, *LIMIT_MODELS)

#: How prompt inputs are drawn (:class:`~softmax_as_linear.theory.regression.RegressionTask`): the paper's
#: model, or what the paper's published code draws.
SAMPLERS = ("paper", "published")

#: Input covariances of the training sweeps: :math:`\Sigma = I` or the Kac-Murdock-Szego matrix.
COVARIANCES = ("isotropic", "kms")

#: Token laws of :class:`~softmax_as_linear.theory.measures.TokenLaw`, and their names in prose.
LAW_KINDS = ("gaussian", "uniform", "laplace", "mixture")
LAW_NAMES = {"gaussian": "Gaussian", "uniform": "uniform", "laplace": "Laplace", "mixture": "two-Gaussian mixture"}

#: Random streams of a sweep's prompts: torch's per-seed generators, the counter-based stream
#: (:mod:`~softmax_as_linear.engine.gpu.counter_stream`, drawn inside the training kernel on a GPU), or the latter
#: where that kernel runs and the former elsewhere.
RNGS = ("auto", "torch", "philox")

#: How a sweep's weights are parametrised: the experiments' four matrices, or the theory's (U, V).
PARAMETRISATIONS = ("four_matrix", "uv")

#: Initialisations of a sweep: PyTorch's ``nn.Linear`` draws, Assumption 5.1's blocks, or weights passed in.
INIT_SCHEMES = ("pytorch", "block", "given")

#: Optimisers of a sweep: plain SGD (the paper) or Adam.
OPTIMIZERS = ("sgd", "adam")

#: The code paths that can take a sweep's training step (:mod:`~softmax_as_linear.engine.stepper`): the CPU's own
#: forward pass, the tensor formulas (any device), those with the softmax as one Triton kernel, and the prompt
#: kernel of ``rng="philox"``; ``"auto"`` picks the fastest that runs here. A result's ``engine_path`` adds
#: ``"+graph"`` when the step was replayed as a CUDA graph.
ENGINE_PATHS = ("auto", "cpu", "tensor", "fused_softmax", "prompt_kernel")

#: Covariate laws of Chapter 6: laws of the raw regression inputs :math:`\xi` (mean 0, variance 1; inputs are
#: :math:`F\xi`): the paper's Gaussian, uniform on :math:`[-\sqrt3, \sqrt3]`, and Rademacher :math:`\pm 1`.
COVARIATES = ("gaussian", "uniform", "rademacher")
#: Labels of a training sweep: linear in the inputs (Chapters 4-7) or random cosine features on the sphere (Chapter 8).
LABELS = ("linear", "cosine")
COVARIATE_NAMES = {"gaussian": "Gaussian", "uniform": "uniform", "rademacher": "Rademacher"}

#: The command line that reproduces a figure or a chapter's files (followed by its name and options).
REPRODUCE_COMMAND = "python -m softmax_as_linear reproduce"

#: Presets of the reproduction: the paper's settings, a lecture-sized version, and a seconds-long check.
PRESETS = ("paper", "lecture", "smoke")

#: Where computations run: CUDA when present (``auto``), or a named device.
DEVICES = ("auto", "cpu", "cuda")

#: How the shards of a sharded reproduction are launched through submitit: processes of this machine, or a
#: SLURM job array.
LAUNCHERS = ("local", "slurm")

#: The paper's training figures: figure -> (input covariance of its sweep, what it shows).
TRAINING_FIGURES = {"fig2": ("isotropic", "final"), "fig3": ("isotropic", "gap"), "fig4": ("isotropic", "trajectory"),
                    "fig6": ("kms", "final"), "fig7": ("kms", "gap"), "fig8": ("kms", "trajectory")}

#: Figures 1 and 5: softmax against linear attention at the initialisation, figure -> input covariance.
#: That Figure 5 repeats Figure 1 with KMS inputs is the course's inference: the paper's text describes
#: Figures 6-8 as the KMS versions of Figures 2-4 (Appendix A.2.2) and never describes Figure 5.
CONCENTRATION_FIGURES = {"fig1": "isotropic", "fig5": "kms"}

#: Every figure the command line reproduces, in order.
FIGURES = tuple(sorted((*TRAINING_FIGURES, *CONCENTRATION_FIGURES), key=lambda name: int(name[3:])))

#: What the command line reproduces is :data:`~softmax_as_linear.experiments.reproductions.REPRODUCTIONS` (these
#: figures, then Chapters 6-8), a registry that imports no torch either.
