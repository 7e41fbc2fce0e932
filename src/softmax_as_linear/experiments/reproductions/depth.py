"""Chapter 7's regression sweep, declared: three stages written as ``depth_<run>.json``.

The sweep of one- and two-layer attention, then its warm stage (two-layer softmax from the trained two-layer linear
weights) and that stage's equal-budget control (the same steps from the block-start two-layer softmax weights)
(:mod:`~softmax_as_linear.experiments.depth_regression` trains and reads them); ``<run>`` is the preset, followed by
``_<N>seeds`` when the number of seeds was overridden."""
from __future__ import annotations

import re

from ..pipeline import COMMAND, Stage, Staged

#: The arrays of a second stage with a seed axis.
_STAGE_PER_SEED = ("risk", "risk_se", "minus", "minus_se", "fall", "fall_se", "trajectory")


class Depth(Staged):
    """Chapter 7: one- and two-layer attention on in-context regression, its warm stage and equal-budget control."""

    name, title, fixed_seeds = "depth", "Chapter 7's regression sweep", False
    summary = "Chapter 7's in-context regression with one and two layers, written as depth_<preset>.json"
    example = "reproduce depth --preset lecture                 # Chapter 7: one and two layers"
    fields = ("per_seed", "lengths", "steps", "decay_step", "references", "provenance")
    per_seed = {"per_seed": 0, **{f"{stage}.{k}": 0 for stage in ("warm", "control") for k in _STAGE_PER_SEED}}

    def seeds(self, preset, seeds=None):
        from ..depth_regression import depth_settings
        from ..presets import sweep_seeds

        return depth_settings(self.check_preset(preset)).seeds if seeds is None else sweep_seeds(seeds)

    def run_name(self, preset, seeds=None):
        """``preset``, or ``<preset>_<N>seeds`` when ``seeds`` (a number of seeds, the first ``N`` of the
        reproduction's) is not the preset's."""
        return preset if seeds is None or self.seeds(preset, seeds) == self.seeds(preset) else f"{preset}_{seeds}seeds"

    def file(self, preset, seeds=None, **options):
        return f"depth_{self.run_name(preset, seeds)}.json"

    def command(self, preset, seeds=None, **options):
        run = self.run_name(preset, seeds)
        return f"{COMMAND} depth --preset {preset}" + ("" if run == preset else f" --seeds {seeds}")

    def parse_run(self, run: str) -> tuple[str, int | None] | None:
        """``(preset, number of seeds or None)`` of a run name of :meth:`run_name`; None for another name."""
        match = re.fullmatch(r"([a-z]+)(?:_(\d+)seeds)?", run)
        if match is None or match.group(1) not in self.presets:
            return None
        return match.group(1), None if match.group(2) is None else int(match.group(2))

    def command_for(self, filename):
        parsed = self.parse_run(filename.removeprefix("depth_").removesuffix(".json")) \
            if filename.startswith("depth_") and filename.endswith(".json") else None
        return None if parsed is None else self.command(*parsed)

    def stages(self, preset, seeds, device):
        import numpy as np

        from ...core.provenance import device_name, provenance, utc_now
        from ..depth_regression import (
            WarmCheckpointKey,
            depth_readings,
            depth_references,
            depth_settings,
            train_depth,
            train_warm,
            warm_readings,
            warm_settings,
        )

        settings, warm = depth_settings(preset, seeds=tuple(seeds)), warm_settings(preset)
        run = f"({preset} preset, seeds {', '.join(map(str, seeds))})"
        stem = f"depth_{self.run_name(preset, len(seeds))}"

        def weights(done):
            per = done["sweep"]["per_seed"]
            return np.asarray(per["U"]), np.asarray(per["v"])

        def second(name, label, what, source):
            def read(trained, done):
                stepper, records = trained
                out = {**warm_readings(stepper, records, settings, warm, *weights(done)), "source": source}
                out["provenance"] = {**provenance(device, float(records.seconds)), "device_name": device_name(device),
                                     "engine_path": records.engine_path, "date": utc_now()}
                return out
            return Stage(name, label, what, warm, f"{stem}_{name}.pt", warm.steps,
                         lambda done, **kw: train_warm(settings, warm, *weights(done), device, progress=True,
                                                       source=source, **kw),
                         read, key=WarmCheckpointKey(settings, warm, source))

        return [Stage("sweep", "the sweep", f"the Chapter 7 regression sweep {run}", settings, f"{stem}.pt",
                      settings.steps, lambda done, **kw: train_depth(settings, device, progress=True, **kw),
                      lambda trained, done: depth_readings(*trained, settings, depth_references(settings))),
                second("warm", "its warm stage", "the warm stage (two-layer softmax from the trained two-layer "
                       "linear weights)", "linear_2"),
                second("control", "its equal-budget control", "the equal-budget control (the warm stage's steps from "
                       "the block-start two-layer softmax weights)", "softmax_2")]

    def assemble(self, preset, seeds, readings):
        return {**readings["sweep"], "main_complete": True, "warm": readings["warm"], "control": readings["control"]}

    def finish(self, data, preset):
        return {**data, "run": self.run_name(preset, len(data["per_seed"]["seeds"]))}


REPRODUCTION = Depth()
