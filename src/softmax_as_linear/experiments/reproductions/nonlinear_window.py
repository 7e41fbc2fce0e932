"""Chapter 8's log-window runs, declared: a sweep over the preset's lengths, then one run per setting of the window's
dependence, each a stage (:mod:`~softmax_as_linear.experiments.nonlinear_window` trains and reads them), written as
``nonlinear_window_<preset>.json``."""
from __future__ import annotations

from ..pipeline import Stage, Staged


class NonlinearWindow(Staged):
    """Chapter 8's softmax layer trained with its window on a log scale, and the window's dependence on the task."""

    name, title = "nonlinear_window", "Chapter 8's log-window runs"
    summary = "its softmax layer trained with the window on a log scale, written as nonlinear_window_<preset>.json"
    example = "reproduce nonlinear_window --preset lecture      # Chapter 8: the window on a log scale"
    fields = ("per_seed", "lengths", "steps", "decay_step", "dependence", "provenance")

    def seeds(self, preset, seeds=None):
        from ..nonlinear_window import window_settings

        return window_settings(self.check_preset(preset)).seeds

    def stages(self, preset, seeds, device):
        from ..nonlinear_window import dependence_settings, stage_readings, train_windows, window_settings

        label = f"({preset} preset, seeds {', '.join(map(str, seeds))})"

        def stage(name, settings, checkpoint, what):
            return Stage(name, "the sweep" if name == "sweep" else name, f"Chapter 8's log-window {what} {label}",
                         settings, checkpoint, settings.steps,
                         lambda done, **kw: train_windows(settings, device, progress=True, **kw),
                         lambda trained, done: stage_readings(*trained, settings))

        main = window_settings(preset, seeds=tuple(seeds))
        return [stage("sweep", main, f"nonlinear_window_{preset}.pt", "sweep")] + [
            stage(f"dependence {k}", s, f"nonlinear_window_{preset}_dependence{k}.pt",
                  f"dependence {k} at gamma={s.frequency:g}, s^2={s.noise_var:g}")
            for k, s in enumerate(dependence_settings(preset, tuple(seeds)))]

    def assemble(self, preset, seeds, readings):
        import numpy as np

        from ...core.artifacts import jsonable
        from ..nonlinear_window import dependence_settings, window_settings

        main, dependence = window_settings(preset, seeds=tuple(seeds)), dependence_settings(preset, tuple(seeds))
        first, rest = readings["sweep"], [readings[f"dependence {k}"] for k in range(len(dependence))]
        per_seed = {"seeds": list(seeds), **{k: v for k, v in first.items() if k != "steps"},
                    "dependence": {k: np.stack([r[k][:, 0] for r in rest], 1) for k in first if k != "steps"}}
        return {"experiment": "nonlinear_window", "lengths": list(main.lengths), "steps": first["steps"],
                "decay_step": main.decay_step, "per_seed": jsonable(per_seed),
                "dependence": {"length": dependence[0].lengths[0],
                               "settings": [[s.frequency, s.noise_var] for s in dependence],
                               "steps": rest[0]["steps"], "decay_step": dependence[0].decay_step}}

    def origin(self, preset):
        return {"seed_rule": "seed s: batches from stream 'train', held-out prompts from 'held_out', final prompts "
                             "from 'evaluation' (at the longest length); every run starts at w = 1, B = 0, u_y = 0, "
                             "v = 0"}


REPRODUCTION = NonlinearWindow()
