"""Softmax as linear attention: the library of the executable course on Boyer & Boursier (arXiv 2512.11784).

Modules, one job each:

- :mod:`~softmax_as_linear.attention`: softmax and normalised linear attention of a prompt, and
  their Gaussian infinite-prompt limits (Lemma 2.1).
- :mod:`~softmax_as_linear.measures`: token laws (Gaussian and non-Gaussian) with known moments.
- :mod:`~softmax_as_linear.tilting`: the tilted measure behind softmax attention and the infinite-prompt
  limit of any token law (closed form, importance sampling, quadrature).
- :mod:`~softmax_as_linear.geometry`: plane geometry of the measure-view chapters (rotations, points as x/y).
- :mod:`~softmax_as_linear.concentration`: estimators of finite-prompt attention against its infinite-prompt
  limit (Propositions 3.1 and 3.4).
- :mod:`~softmax_as_linear.stats`: means, standard errors and intervals that claims are checked against.
- :mod:`~softmax_as_linear.icl`: in-context linear regression, its closed-form risks and reference solutions.
- :mod:`~softmax_as_linear.models`: the paper's four-matrix attention model and its (U, V) view.
- :mod:`~softmax_as_linear.seeding`: the one rule that turns a seed into every random stream of an experiment.
- :mod:`~softmax_as_linear.sweep`: a training sweep's settings and results (:class:`TrainConfig`,
  :class:`TrainResult`) and their files (sweep archive, checkpoint).
- :mod:`~softmax_as_linear.train`: the batched training engine.
- :mod:`~softmax_as_linear.fused_softmax`: its softmax part as one GPU kernel (Triton), where available.
- :mod:`~softmax_as_linear.evaluation`: final risks of a trained sweep on fresh prompts (exact for linear attention).
- :mod:`~softmax_as_linear.dynamics`: trained runs read against the theory (infinite-prompt gradient flow,
  Theorem 4.3; outcome of every seed; balance of the parameters).
- :mod:`~softmax_as_linear.presets`: every named setting (training sweeps, Figures 1 and 5, the training
  panel's first run).
- :mod:`~softmax_as_linear.experiments`: the data of every paper figure, and where its saved file lives.
- :mod:`~softmax_as_linear.style`: the plotly style and the figure helpers every chapter shares.
- :mod:`~softmax_as_linear.figures`: builders of the course's figures.
- :mod:`~softmax_as_linear.measure_figures`: builders of the figures of the measure-view chapters (0 to 3).
- :mod:`~softmax_as_linear.widgets` and :mod:`~softmax_as_linear.training_panel`: live ipywidgets panels,
  and training from a widget in the background.
- :mod:`~softmax_as_linear.artifacts`: where result files live, and how they are written (atomically) and read.
- :mod:`~softmax_as_linear.devices`: choice of device.
- :mod:`~softmax_as_linear.__main__`: the command line that reproduces the paper's figures.
- ``_checks``: the argument checks behind every ``ValueError`` that names an argument.

Every module, and so torch, is imported on first use of one of its names (``sal.RegressionTask``,
``sal.style``), so importing the package is instant and the command line's ``--help`` does not load torch.
"""
import importlib

__version__ = "0.1.0"

__all__ = [
    "AttentionModel", "RegressionTask", "TokenLaw", "TrainConfig", "TrainResult", "attention", "bayes_risk",
    "block_init", "gaussian_attention", "gaussian_linear_attention", "icl", "infinite_prompt_linear",
    "infinite_prompt_risk", "infinite_prompt_softmax", "kms_covariance", "limit_parameters", "linear_attention",
    "linear_attention_risk",
    "measures", "models", "optimal_linear_risk", "softmax_attention", "tilted_gaussian", "tilting",
]

_SUBMODULES = ("artifacts", "attention", "concentration", "devices", "dynamics", "evaluation", "experiments",
               "figures", "fused_softmax", "geometry", "icl", "measure_figures", "measures", "models", "presets", "seeding", "stats",
               "style", "sweep", "tilting", "train", "training_panel", "widgets")
# Even torch loads on first use, so that the command line's --help and --version answer at once.
_LAZY_NAMES = {
    "AttentionModel": "models", "RegressionTask": "icl", "TokenLaw": "measures", "TrainConfig": "sweep",
    "TrainResult": "sweep", "bayes_risk": "icl", "block_init": "icl", "gaussian_attention": "attention",
    "gaussian_linear_attention": "attention", "infinite_prompt_linear": "tilting", "infinite_prompt_risk": "icl",
    "infinite_prompt_softmax": "tilting", "kms_covariance": "icl", "limit_parameters": "icl",
    "linear_attention": "attention", "linear_attention_risk": "icl", "optimal_linear_risk": "icl", "softmax_attention": "attention",
    "tilted_gaussian": "attention",
}


def __getattr__(name: str):
    # Submodules (and a few names) load on first access, so `import softmax_as_linear` stays light.
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES) | set(_LAZY_NAMES))
