"""Chapter 8's optima, declared: written as ``nonlinear_optima_<preset>.json``, without stages.

The best window of one attention layer against the prompt length, fitted on fixed prompts
(:mod:`~softmax_as_linear.experiments.nonlinear_optima` computes them; no training, no checkpoint: one run of fixed
seeds on one CPU core, without shards or a time limit)."""
from __future__ import annotations

import pathlib
import time

from ..pipeline import Reproduction


class NonlinearOptima(Reproduction):
    """Chapter 8's optima (see the module docstring)."""

    name, title, fixed_seeds, sharded = "nonlinear_optima", "Chapter 8's optima", True, False
    #: No paper-scale preset: the lecture one is what the chapter reads.
    presets = ("lecture", "smoke")
    summary = "the optima of one attention layer against L, written as nonlinear_optima_<preset>.json"
    example = "reproduce nonlinear_optima --preset lecture      # Chapter 8: one layer's optima (40 min)"
    fields = ("lengths", "replicates", "prompts", "limits", "replicate", "summary", "moves", "exponent", "dependence",
              "precision", "draws", "provenance")

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
                             "checkpoint to resume from (the lecture preset takes about 40 minutes of one CPU core)")

    def recorded(self, preset: str) -> dict:
        """What its file is compared on, as its one stage: the preset's settings and the task's."""
        from ...core.artifacts import jsonable
        from ..nonlinear import nonlinear_config
        from ..nonlinear_optima import TASK_FIELDS, optima_settings

        task = jsonable(nonlinear_config("lecture").as_dict())
        return {"optima": {**optima_settings(preset), "task": {field: task[field] for field in TASK_FIELDS}}}

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, **options):
        """The optima computed on one CPU thread (:func:`~softmax_as_linear.experiments.nonlinear_optima.optima`) and
        written with their provenance, unless the file is up to date
        (:func:`~softmax_as_linear.experiments.pipeline.up_to_date`, the rule of every reproduction)."""
        from ...core.artifacts import save_json
        from ...core.provenance import provenance
        from ..nonlinear_optima import OPTIMA_SEED, optima
        from ..pipeline import up_to_date

        path, recorded = pathlib.Path(out) / self.file(preset), self.recorded(preset)
        if not restart and up_to_date(path, recorded, self.fields):
            print(f"{path}: up to date", flush=True)
            return [path]
        start = time.monotonic()
        data = optima(preset)
        data["provenance"] = {**provenance("cpu", time.monotonic() - start), "preset": preset,
                              "command": self.command(preset), **({"allow_dirty": True} if dirty else {}),
                              "seed_rule": f"replicate k: seed {OPTIMA_SEED} + k, streams 'prompts' (fit) and "
                                           "'evaluation' (held out) at each L",
                              "replicate_seeds": list(self.seeds(preset)), "stages": recorded}
        save_json(path, data)
        print(f"wrote {path} in {time.monotonic() - start:.0f} s", flush=True)
        return [path]


REPRODUCTION = NonlinearOptima()
