"""Chapter 8's one- and two-layer sweep, declared: one stage (:mod:`~softmax_as_linear.experiments.nonlinear_depth`
trains and reads it), written as ``nonlinear_depth_<preset>.json``."""
from __future__ import annotations

from ..pipeline import Stage, Staged


class NonlinearDepth(Staged):
    """Chapter 8's second layer: one- and two-layer attention on the nonlinear task."""

    name, title = "nonlinear_depth", "Chapter 8's one- and two-layer sweep"
    summary = "its one- and two-layer sweep, written as nonlinear_depth_<preset>.json"
    example = "reproduce nonlinear_depth --preset lecture       # Chapter 8: its second layer"
    fields = ("per_seed", "lengths", "models", "steps", "provenance")

    def seeds(self, preset, seeds=None):
        from ..nonlinear_depth import nonlinear_depth_settings

        return nonlinear_depth_settings(self.check_preset(preset)).seeds

    def stages(self, preset, seeds, device):
        from ..nonlinear_depth import nonlinear_depth_readings, nonlinear_depth_settings, train_nonlinear_depth

        settings = nonlinear_depth_settings(preset, seeds=tuple(seeds))
        return [Stage("sweep", "the sweep", f"Chapter 8's one- and two-layer sweep ({preset} preset, seeds "
                      f"{', '.join(map(str, seeds))})", settings, f"nonlinear_depth_{preset}.pt", settings.steps,
                      lambda done, **kw: train_nonlinear_depth(settings, device, progress=True, **kw),
                      lambda trained, done: nonlinear_depth_readings(*trained, settings))]

    def assemble(self, preset, seeds, readings):
        return readings["sweep"]


REPRODUCTION = NonlinearDepth()
