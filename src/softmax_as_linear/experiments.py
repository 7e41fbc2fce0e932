"""The paper's training figures (2-4 isotropic, 6-8 anisotropic) assembled from one sweep.

A sweep (:func:`softmax_as_linear.train.train`) records every run along training; each figure is a
view of it plus the reference risks of :mod:`softmax_as_linear.icl`. The functions return small
JSON-ready dicts, used both by the chapters (lecture preset, computed live) and by the reproduction
command (paper preset, saved under ``results/``). All risks are the theory's R = MSE / 2.
"""
from __future__ import annotations

import pathlib

import numpy as np

from . import _checks
from .icl import bayes_risk, optimal_linear_risk
from .train import TrainResult

FIGURES = {"fig2": ("isotropic", "final"), "fig3": ("isotropic", "gap"), "fig4": ("isotropic", "trajectory"),
           "fig6": ("kms", "final"), "fig7": ("kms", "gap"), "fig8": ("kms", "trajectory")}


def _seed_mean(values: np.ndarray) -> np.ndarray:
    """Mean over seeds (axis 0) ignoring diverged runs (NaN); NaN where every seed diverged."""
    with np.errstate(invalid="ignore"):
        count = np.sum(~np.isnan(values), axis=0)
        total = np.nansum(values, axis=0)
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _pick_lengths(result: TrainResult, lengths) -> list[int]:
    available = result.config.lengths
    if lengths is None:
        wanted = [L for L in (10, 50, 100, 200, 500, 1000) if L in available]
        return wanted or list(available)
    missing = [L for L in lengths if L not in available]
    if missing:
        raise ValueError(f"lengths {missing} are not in the sweep (it has {available})")
    return list(lengths)


def baselines(lengths, task, n_bayes_samples: int = 20_000) -> dict:
    """Reference risks for each ``L``: label-noise floor, best normalised linear attention, Bayes (ridge)."""
    bayes = [bayes_risk(L, task, n_samples=n_bayes_samples, seed=L) for L in lengths]
    return {"noise_floor": task.noise_var / 2,
            "optimal_linear": [optimal_linear_risk(L, task) for L in lengths],
            "bayes": [b[0] for b in bayes], "bayes_se": [b[1] for b in bayes]}


def final_risks(result: TrainResult, tail: float = 0.1, n_bayes_samples: int = 20_000) -> dict:
    """Figure 2 / 6: held-out risk at the end of training against ``L``, with the three baselines.

    The final risk of a run is its held-out risk averaged over the last ``tail`` fraction of the
    records (SGD keeps fluctuating around its limit); runs that diverged are reported separately.
    """
    if not 0 < tail <= 1:
        raise ValueError(f"tail must lie in (0, 1], got {tail!r}")
    cfg = result.config
    k = max(1, int(round(tail * result.steps.size)))
    with np.errstate(invalid="ignore"):
        per_seed = np.nanmean(result.eval_risk[..., -k:], axis=-1) if k > 1 else result.eval_risk[..., -1]
    per_seed = np.where(result.diverged, np.nan, per_seed)
    out = {"figure": "final risk", "risk": "R = MSE/2 on held-out prompts", "lengths": list(cfg.lengths),
           "seeds": list(cfg.seeds), "steps": int(result.steps[-1]), "complete": result.complete,
           "covariance": cfg.covariance}
    for a, name in enumerate(cfg.activations):
        out[name] = _seed_mean(per_seed[:, :, a]).tolist()
        out[f"{name}_per_seed"] = per_seed[:, :, a].tolist()
        out[f"{name}_diverged"] = result.diverged[:, :, a].sum(0).tolist()
    out.update(baselines(cfg.lengths, cfg.task(), n_bayes_samples))
    return out


def parameter_gaps(result: TrainResult, lengths=None) -> dict:
    """Figure 3 / 7: :math:`\\|\\theta_{soft} - \\theta_{lin}\\|^2` along training for several ``L``."""
    chosen = _pick_lengths(result, lengths)
    gap = result.parameter_gap()
    rows = [_seed_mean(gap[:, result.config.lengths.index(L)]).tolist() for L in chosen]
    return {"figure": "parameter gap", "lengths": chosen, "steps": result.steps.tolist(),
            "gap": rows, "complete": result.complete, "covariance": result.config.covariance}


def risk_trajectories(result: TrainResult, lengths=None, n_bayes_samples: int = 20_000) -> dict:
    """Figure 4 / 8: held-out risk along training for several ``L``, both activations."""
    chosen = _pick_lengths(result, lengths)
    cfg = result.config
    out = {"figure": "risk along training", "risk": "R = MSE/2 on held-out prompts", "lengths": chosen,
           "steps": result.steps.tolist(), "complete": result.complete, "covariance": cfg.covariance}
    for a, name in enumerate(cfg.activations):
        out[name] = [_seed_mean(result.eval_risk[:, cfg.lengths.index(L), a]).tolist() for L in chosen]
    out.update(baselines(chosen, cfg.task(), n_bayes_samples))
    return out


def figure_data(name: str, result: TrainResult, n_bayes_samples: int = 20_000) -> dict:
    """The artifact of paper figure ``name`` (``"fig2"`` ... ``"fig8"``) from its sweep."""
    _checks.one_of("figure", name, tuple(FIGURES))
    covariance, kind = FIGURES[name]
    if result.config.covariance != covariance:
        raise ValueError(f"{name} needs a {covariance!r} sweep, got {result.config.covariance!r}")
    if kind == "final":
        return final_risks(result, n_bayes_samples=n_bayes_samples)
    if kind == "gap":
        return parameter_gaps(result)
    return risk_trajectories(result, n_bayes_samples=n_bayes_samples)


def reproduce_command(name: str, preset: str = "paper") -> str:
    """The command line that writes the artifact of figure ``name`` at ``preset`` scale, with the
    other figures of its sweep (one training serves them all)."""
    _checks.one_of("figure", name, tuple(FIGURES))
    siblings = " ".join(f for f, (covariance, _) in FIGURES.items() if covariance == FIGURES[name][0])
    return f"python -m softmax_as_linear reproduce {siblings} --preset {preset}"


def saved_figure(name: str, preset: str = "paper", folder=None) -> dict | None:
    """The artifact ``<folder>/<name>_<preset>.json`` written by the reproduction command, or ``None``
    when it has not been generated yet (``folder`` defaults to the repository's ``results/``)."""
    from .artifacts import RESULTS, load_json

    _checks.one_of("figure", name, tuple(FIGURES))
    path = (RESULTS if folder is None else pathlib.Path(folder)) / f"{name}_{preset}.json"
    return load_json(path) if path.exists() else None


def save_sweep(path, result: TrainResult):
    """Write a sweep's trajectories and its configuration to one ``.npz``, atomically."""
    import json

    from .artifacts import save_npz

    return save_npz(path, config_json=np.array(json.dumps(result.config.as_dict())), **result.to_arrays())


def load_sweep(path) -> TrainResult:
    """Read a sweep written by :func:`save_sweep`."""
    import json

    from .artifacts import load_npz
    from .train import TrainConfig

    arrays = load_npz(path)
    fields = json.loads(str(arrays.pop("config_json")))
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return TrainResult.from_arrays(TrainConfig(**fields), arrays)
