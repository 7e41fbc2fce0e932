r"""How far trained softmax attention is from linear attention at each prompt length, in every regime of the
course, read from the result files its chapters ship.

The measure (Chapter 9) is the risk softmax attention saves over linear attention trained from the same
initialisation on the same data, in units of the risk of the zero predictor :math:`R_0 = \mathbb{E}[y^2]/2`:

.. math:: \Delta(L) = \frac{R_{\mathrm{lin}}(L) - R_{\mathrm{soft}}(L)}{R_0},

computed seed by seed (the two activations of a seed share their initialisation and batches, and their final risks are
measured on the same fresh prompts, so the difference is paired), then averaged over seeds with a Student-t interval.
:math:`\Delta = 0` where the two risks coincide, :math:`\Delta < 0` where softmax attention does worse, :math:`\Delta >
0` where it does better; :math:`|\Delta| \le 1` whenever both do at least as well as predicting 0. The variant
``"excess"`` divides instead by linear attention's excess over the :math:`L`-Bayes risk (the noise floor where the
files hold no Bayes risk), :math:`(R_{\mathrm{lin}} - R_{\mathrm{soft}}) / (R_{\mathrm{lin}} - R^{\mathrm{Bayes}}_L)`:
the share of that excess which softmax attention removes (1: it reaches the Bayes risk).

- :data:`REGIMES`: each regime, its result file, the chapter that measures it, and how it was obtained (trained runs,
  or Chapter 8's optima of one layer);
- :func:`regime_map`: the measure of one regime per seed ``(S, nL)`` and its mean and interval over seeds;
- :func:`linearity_map`: every regime at once; :func:`limits`: the values at :math:`L = \infty` that the theory gives;
- :func:`table_rows`: the rows of the chapter's table (regime, ``L``, mean, interval, seeds, chapter, file).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core import checks, stats
from ..engine.sweep import TrainConfig
from ..registry import COVARIATES
from . import result_files

#: The measure's variants: in units of the zero predictor's risk, or as a share of linear attention's excess risk.
VARIANTS = ("zero", "excess")
#: The lengths the chapter's table shows (those of each regime that are in this list).
SHOWN_LENGTHS = (10, 20, 30, 32, 40, 100, 300, 316, 1000, 3000, 3162, 10000)


@dataclasses.dataclass(frozen=True)
class Regime:
    """One curve of the map: ``name`` (key), ``label`` (legend), ``chapter`` and ``section`` that measure it, the
    result ``file`` it is read from, and ``kind``: ``"trained"`` runs or ``"optima"`` (best weights, Chapter 8)."""

    name: str
    label: str
    chapter: int
    section: str
    file: str
    kind: str = "trained"


#: Every regime of the map, in the order of the chapters.
REGIMES = (
    Regime("isotropic", "Gaussian inputs, isotropic", 4, "4", "fig2_paper.json"),
    Regime("anisotropic", "Gaussian inputs, anisotropic", 5, "5", "fig6_paper.json"),
    Regime("anisotropic_published", "Gaussian inputs, anisotropic (published sampler)", 5, "5",
           "fig6_paper_published.json"),
    Regime("rademacher", "Rademacher inputs", 6, "6", "beyond_rademacher_paper.json"),
    Regime("uniform", "uniform inputs", 6, "6", "beyond_uniform_paper.json"),
    Regime("two_layers", "two layers, Gaussian inputs", 7, "7", "depth_lecture.json"),
    Regime("nonlinear", "nonlinear labels, inputs on the circle", 8, "8.5", "nonlinear_lecture.json"),
    Regime("nonlinear_optima", "nonlinear labels, best weights of one layer", 8, "8.6",
           "nonlinear_optima_lecture.json", kind="optima"),
)
#: The regimes' names, as :func:`regime` and :func:`regime_map` take them.
NAMES = tuple(r.name for r in REGIMES)
#: Regimes whose tokens are Gaussian, where Lemma 2.1 makes the two limits equal at every weight.
GAUSSIAN_TOKENS = ("isotropic", "anisotropic", "anisotropic_published")


def regime(name: str) -> Regime:
    """The :class:`Regime` named ``name`` (one of :data:`NAMES`)."""
    checks.one_of("name", name, NAMES)
    return REGIMES[NAMES.index(name)]


def _zero_risk_of_settings(settings: dict) -> float:
    """:math:`R_0` of a linear-regression sweep from the settings its file records (``law`` is the covariate law)."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    kept = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in names}
    if settings.get("law") in COVARIATES:
        kept["covariates"] = settings["law"]
    return TrainConfig(**kept).task().zero_risk()


def _read(name: str, folder=None) -> dict:
    """The raw arrays of regime ``name``: ``lengths (nL,)``, ``seeds``, ``gap (S, nL)`` = R_lin - R_soft paired by seed,
    ``linear (S, nL)``, ``bayes (nL,)`` (the noise floor where no Bayes risk is stored), ``zero`` (R_0)."""
    if name in ("isotropic", "anisotropic", "anisotropic_published"):
        sampler = "published" if name.endswith("published") else "paper"
        data = result_files.saved_figure("fig2" if name == "isotropic" else "fig6", "paper", folder, required=True,
                                         sampler=sampler)
        return {"lengths": data["lengths"], "seeds": data["seeds"],
                "gap": -np.asarray(data["paired_difference_per_seed"], dtype=float),
                "linear": np.asarray(data["linear_per_seed"], dtype=float), "bayes": np.asarray(data["bayes"]),
                "zero": _zero_risk_of_settings(data["provenance"]["settings"])}
    if name in ("rademacher", "uniform"):
        data = result_files.saved_beyond(name, "paper", folder)
        if data is None or data.get("complete", True) is False:  # missing or partial: the error names the command
            result_files.load_result(result_files.beyond_file(name, (data or {}).get("run", "paper")), folder)
        final = data["final"]
        return {"lengths": final["lengths"], "seeds": final["seeds"],
                "gap": -np.asarray(final["paired_difference"], dtype=float),
                "linear": np.asarray(final["risk"]["linear"], dtype=float), "bayes": np.asarray(final["bayes"]),
                "zero": _zero_risk_of_settings(data["provenance"]["settings"])}
    if name == "two_layers":
        data = result_files.saved_depth("lecture", folder, required=True)
        per, refs = data["per_seed"], data["references"]
        return {"lengths": data["lengths"], "seeds": per["seeds"],
                "gap": -np.asarray(per["difference"]["softmax_minus_linear_2"], dtype=float),
                "linear": np.asarray(per["risk"]["linear_2"], dtype=float), "bayes": np.asarray(refs["bayes"]),
                "zero": float(refs["zero_risk"])}
    if name == "nonlinear":
        data = result_files.saved_nonlinear("lecture", folder, required=True)
        final, refs = data["final"], data["references"]
        linear = data["models"].index("linear")
        return {"lengths": data["config"]["lengths"], "seeds": data["config"]["seeds"],
                "gap": -np.asarray(final["difference"], dtype=float),
                "linear": np.asarray(final["risk"], dtype=float)[..., linear], "bayes": np.asarray(refs["bayes"]),
                "zero": float(refs["zero"])}
    data = result_files.saved_nonlinear_optima("lecture", folder, required=True)
    trained = result_files.saved_nonlinear("lecture", folder, required=True)["references"]
    rep, lengths = data["replicate"], data["lengths"]
    linear = np.asarray(rep["linear"]["held_out"], dtype=float).T  # (K, nL)
    bayes = [trained["bayes"][trained["lengths"].index(L)] if L in trained["lengths"] else data["limits"]["noise_floor"]
             for L in lengths]
    return {"lengths": lengths, "seeds": list(range(data["replicates"])),
            "gap": linear - np.asarray(rep["softmax"]["held_out"], dtype=float).T, "linear": linear,
            "bayes": np.asarray(bayes, dtype=float), "zero": float(data["limits"]["zero"])}


def measure(gap, linear, bayes, zero: float, variant: str = "zero") -> np.ndarray:
    r"""The measure from paired risks: ``gap`` :math:`R_{\mathrm{lin}} - R_{\mathrm{soft}}` ``(S, nL)``, over
    :math:`R_0` = ``zero`` (variant ``"zero"``) or over :math:`R_{\mathrm{lin}} - R^{\mathrm{Bayes}}_L` (``linear``
    ``(S, nL)``, ``bayes`` ``(nL,)``; variant ``"excess"``)."""
    checks.one_of("variant", variant, VARIANTS)
    gap = np.asarray(gap, dtype=float)
    if variant == "zero":
        return gap / checks.positive_float("zero", zero)
    return gap / (np.asarray(linear, dtype=float) - np.asarray(bayes, dtype=float))


def regime_map(name: str, variant: str = "zero", level: float = 0.95, folder=None) -> dict:
    """The measure of regime ``name`` (:data:`NAMES`) read from its result file (``folder``, else the results folder,
    then the shipped copy): ``per_seed (S, nL)`` and over the seeds ``mean``, ``se``, ``low``, ``high`` ``(nL,)``
    (Student-t interval at ``level``), with ``lengths``, ``seeds``, ``zero`` (R_0) and the :class:`Regime`."""
    raw = _read(name, folder)
    values = measure(raw["gap"], raw["linear"], raw["bayes"], raw["zero"], variant)
    kept = ~np.isnan(values).any(1)  # a diverged run leaves its seed out
    values = values[kept]
    mean, se = stats.mean_se_along(values, axis=0)
    intervals = np.array([stats.mean_interval(column, level)[1:] for column in values.T])
    return {"regime": regime(name), "variant": variant, "lengths": [int(L) for L in raw["lengths"]],
            "seeds": [s for s, k in zip(raw["seeds"], kept) if k], "zero": raw["zero"], "per_seed": values,
            "mean": mean, "se": se, "low": intervals[:, 0], "high": intervals[:, 1], "level": level}


def linearity_map(variant: str = "zero", names=NAMES, level: float = 0.95, folder=None) -> dict[str, dict]:
    """:func:`regime_map` of every regime in ``names``, by name."""
    return {name: regime_map(name, variant, level, folder) for name in names}


def limits(variant: str = "zero", folder=None) -> dict[str, float]:
    r"""The measure at :math:`L = \infty` where theory gives it, by regime name.

    - Gaussian tokens (:data:`GAUSSIAN_TOKENS`), variant ``"zero"``: 0. By Lemma 2.1 of the paper the softmax and
      linear infinite-prompt limits are equal at every weight, so their infinite-prompt risks are one function (the
      variant ``"excess"`` is :math:`0/0` there, and is not given).
    - Chapter 8's optima: linear attention's bound :math:`R^*_{\mathrm{lin}}` (the best linear map of the query,
      by quadrature) against softmax attention's infimum, the noise floor :math:`s^2/2` (the course's derivation,
      Section 8.3): :math:`(R^*_{\mathrm{lin}} - s^2/2)/R_0`, and 1 in the variant ``"excess"``.
    """
    checks.one_of("variant", variant, VARIANTS)
    out = {name: 0.0 for name in GAUSSIAN_TOKENS} if variant == "zero" else {}
    lim = result_files.saved_nonlinear_optima("lecture", folder, required=True)["limits"]
    out["nonlinear_optima"] = (lim["linear"] - lim["noise_floor"]) / lim["zero"] if variant == "zero" else 1.0
    return out


def table_rows(maps: dict[str, dict], shown=SHOWN_LENGTHS) -> list[dict]:
    """One row per regime and shown length (``shown``, else every length of the regime): ``regime`` (label),
    ``kind``, ``L``, ``mean``, ``se``, ``low``, ``high``, ``seeds`` (their number), ``chapter``, ``section``,
    ``file``."""
    rows = []
    for m in maps.values():
        r = m["regime"]
        for i, L in enumerate(m["lengths"]):
            if shown is None or L in shown:
                rows.append({"regime": r.label, "kind": r.kind, "L": L, "mean": float(m["mean"][i]),
                             "se": float(m["se"][i]), "low": float(m["low"][i]), "high": float(m["high"][i]),
                             "seeds": len(m["seeds"]), "chapter": r.chapter, "section": r.section, "file": r.file})
    return rows


def format_table(rows: list[dict], digits: int = 3) -> str:
    """``rows`` of :func:`table_rows` as fixed-width text: regime, L, mean ± se, interval, seeds, section, file."""
    lines = [f"{'regime':<50} {'L':>6} {'Δ ± se':>17} {'95% interval':>18} {'n':>3}  {'§':<4} file"]
    previous = None
    for row in rows:
        name = row["regime"] if row["regime"] != previous else ""
        previous = row["regime"]
        lines.append(f"{name:<50} {row['L']:>6} {row['mean']:>+9.{digits}f} ± {row['se']:.{digits}f} "
                     f"[{row['low']:+.{digits}f}, {row['high']:+.{digits}f}] {row['seeds']:>3}  "
                     f"{row['section']:<4} {row['file'] if name else ''}")
    return "\n".join(lines)


def second_layer_change(variant: str = "zero", level: float = 0.95, folder=None) -> dict:
    r"""What a second layer changes, from Chapter 7's file: per seed :math:`\Delta_2(L) - \Delta_1(L)` ``(S, nL)`` (the
    measure of two-layer attention minus that of one layer, the same seeds and fresh prompts), and ``mean``, ``low``,
    ``high`` over seeds. Negative: with two layers softmax attention falls further behind linear attention."""
    data = result_files.saved_depth("lecture", folder, required=True)
    per, refs = data["per_seed"], data["references"]
    values = [measure(-np.asarray(per["difference"][f"softmax_minus_linear_{k}"], dtype=float),
                      per["risk"][f"linear_{k}"], refs["bayes"], refs["zero_risk"], variant) for k in (1, 2)]
    change = values[1] - values[0]
    intervals = np.array([stats.mean_interval(column, level) for column in change.T])
    return {"lengths": list(data["lengths"]), "seeds": list(per["seeds"]), "per_seed": change,
            "mean": intervals[:, 0], "low": intervals[:, 1], "high": intervals[:, 2], "level": level}


def paired_change(m: dict, first: int, last: int, level: float = 0.95) -> tuple[float, float, float]:
    """Mean over the seeds of the regime map ``m`` (:func:`regime_map`) of the measure at the length of index ``last``
    minus that at index ``first``, seed by seed, with its Student-t interval: ``(mean, low, high)``."""
    values = np.asarray(m["per_seed"])
    return stats.mean_interval(values[:, last] - values[:, first], level)


def outlying_runs(m: dict, distance: float = 0.05) -> dict[int, list[int]]:
    """The runs of the regime map ``m`` whose measure lies more than ``distance`` from the median of the seeds at the
    same length (runs that stalled or left a plateau late, as Chapters 4-8 read them): ``{seed: [L, ...]}``."""
    distance = checks.positive_float("distance", distance)
    values = np.asarray(m["per_seed"])
    far = np.abs(values - np.median(values, axis=0)) > distance
    out: dict[int, list[int]] = {}
    for s, i in zip(*np.nonzero(far)):
        out.setdefault(int(m["seeds"][s]), []).append(int(m["lengths"][i]))
    return out
