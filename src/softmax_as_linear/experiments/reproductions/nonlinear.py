"""Chapter 8's sweep, declared: softmax and linear attention at every length, then softmax attention at one length for
each setting of the window's dependence, each a stage (:mod:`~softmax_as_linear.experiments.nonlinear` trains and
reads them), written as ``nonlinear_<preset>.json``."""
from __future__ import annotations

from ..pipeline import Stage, Staged

#: The arrays of the file with a seed axis (first, or second for the dependence's ``(settings, seeds)``).
PER_SEED = {**{f"trajectories.{k}": 0 for k in ("eval_risk", "eval_sd", "w")},
            **{f"final.{k}": 0 for k in ("risk", "risk_se", "difference", "difference_se")},
            **{f"windows.{k}": 0 for k in ("w", "anisotropy", "label_score", "v_y", "v_x_norm")},
            **{f"dependence.{k}": 1 for k in ("w", "anisotropy", "risk")}}


class Nonlinear(Staged):
    """Chapter 8: softmax and linear attention on a nonlinear task, the learned window and its dependence."""

    name, title = "nonlinear", "Chapter 8's sweep"
    summary = "Chapter 8's nonlinear task, written as nonlinear_<preset>.json"
    example = "reproduce nonlinear --preset lecture             # Chapter 8: a nonlinear task, the learned window"
    fields = ("config", "models", "trajectories", "final", "windows", "references", "dependence", "provenance")
    per_seed = PER_SEED

    def seeds(self, preset, seeds=None):
        from ..nonlinear import nonlinear_config

        return nonlinear_config(self.check_preset(preset)).seeds

    def stages(self, preset, seeds, device):
        from ...engine.train import resolved, train
        from .. import presets
        from ..nonlinear import dependence_readings, nonlinear_config, sweep_readings

        label = f"({preset} preset, seeds {', '.join(map(str, seeds))})"
        config = nonlinear_config(preset, seeds=tuple(seeds))
        stages = [Stage("sweep", "the sweep", f"Chapter 8's sweep {label}", config, f"nonlinear_{preset}.pt",
                        config.steps, lambda done, **kw: train(config, device=device, progress=True, **kw),
                        lambda result, done: sweep_readings(result, preset), key=resolved(config, device))]
        L = presets.NONLINEAR_DEPENDENCE_LENGTH[preset]
        for k, (gamma, s2) in enumerate(presets.NONLINEAR_DEPENDENCE):
            setting = nonlinear_config(preset, frequency=gamma, noise_var=s2, lengths=(L,), models=("softmax",),
                                       seeds=tuple(seeds))
            stages.append(Stage(f"dependence {k}", f"dependence {k}",
                                f"the window's dependence at L={L}, gamma={gamma:g}, s^2={s2:g} {label}", setting,
                                f"nonlinear_{preset}_dependence{k}.pt", setting.steps,
                                lambda done, setting=setting, **kw: train(setting, device=device, progress=True, **kw),
                                lambda result, done: dependence_readings(result), key=resolved(setting, device)))
        return stages

    def assemble(self, preset, seeds, readings):
        from ..nonlinear import dependence_references, nonlinear_config

        config = nonlinear_config(preset, seeds=tuple(seeds))
        dependence = [readings[f"dependence {k}"] for k in range(len(readings) - 1)]
        return {"preset": preset, **readings["sweep"], "config": config.as_dict(), "models": list(config.models),
                "dependence": {**dependence_references(preset),
                               **{key: [r[key] for r in dependence] for key in ("w", "anisotropy", "risk")}}}

    def finish(self, data, preset):
        from ..nonlinear import finish, nonlinear_config

        return finish({**data, "config": nonlinear_config(preset).as_dict()}, preset, progress=True)

    def origin(self, preset):
        from .. import presets

        return {"final_prompts": presets.NONLINEAR_FINAL_PROMPTS[preset],
                "reference_prompts": presets.NONLINEAR_REFERENCE_PROMPTS[preset]}


REPRODUCTION = Nonlinear()
