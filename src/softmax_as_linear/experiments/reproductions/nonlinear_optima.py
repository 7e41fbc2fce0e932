"""Chapter 8's optima, declared: written as ``nonlinear_optima_<preset>.json``, without stages.

The best window of one attention layer against the prompt length, fitted on fixed prompts
(:mod:`~softmax_as_linear.experiments.nonlinear_optima` computes them; no training, no checkpoint: one run of fixed
seeds on one CPU core, without shards or a time limit)."""
from __future__ import annotations

from ..pipeline import Reproduction

#: Its presets (the optima have no paper-scale preset: the lecture one is what the chapter reads).
PRESETS = ("lecture", "smoke")


class NonlinearOptima(Reproduction):
    """Chapter 8's optima (see the module docstring)."""

    name, title, fixed_seeds, sharded, presets = "nonlinear_optima", "Chapter 8's optima", True, False, PRESETS
    summary = "the optima of one attention layer against L, written as nonlinear_optima_<preset>.json"
    example = "reproduce nonlinear_optima --preset lecture      # Chapter 8: one layer's optima (33 min)"
    fields = ("lengths", "replicates", "prompts", "limits", "replicate", "summary", "moves", "exponent", "dependence",
              "provenance")

    def seeds(self, preset, seeds=None):
        from ..nonlinear_optima import replicate_seeds

        return replicate_seeds(self.check_preset(preset))

    def check(self, preset, seeds, shard, max_minutes, **options):
        if preset not in self.presets:
            raise ValueError(f"preset must be one of {', '.join(map(repr, self.presets))} for {self.title} "
                             f"(reproduce {self.name}), got {preset!r}")
        super().check(preset, seeds, shard, max_minutes, **options)
        if shard is not None:
            raise ValueError(f"shard does not apply to {self.title} (reproduce {self.name}): its fits run in one "
                             "process, without shards")
        if max_minutes is not None:
            raise ValueError(f"max_minutes does not apply to {self.title} (reproduce {self.name}): its fits keep no "
                             "checkpoint to resume from (the lecture preset takes about 33 minutes of one CPU core)")

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, **options):
        from ..nonlinear_optima import reproduce_nonlinear_optima

        return [reproduce_nonlinear_optima(preset, out, restart=restart, dirty=dirty)]


REPRODUCTION = NonlinearOptima()
