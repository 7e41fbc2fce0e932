"""The paper's figures, declared: one reproduction per figure, written as ``<figure>_<preset>[_published].json``.

A training figure reads the sweep it shares with the other figures of its input covariance (Figures 2-4: isotropic;
6-8: KMS), trained once per call; Figures 1 and 5 compare softmax and linear attention at the initialisation, without
training (:mod:`~softmax_as_linear.experiments.figure_sweeps` trains, joins and writes them)."""
from __future__ import annotations

from ...registry import CONCENTRATION_FIGURES, FIGURES, SAMPLERS, TRAINING_FIGURES
from ..pipeline import Reproduction


class Figure(Reproduction):
    """A figure of the paper (see the module docstring)."""

    in_all = True

    def __init__(self, name: str):
        self.name, self.title = name, f"Figure {name[3:]}"
        self.sharded = name not in CONCENTRATION_FIGURES

    def seeds(self, preset, seeds=None):
        from ..figure_sweeps import all_seeds

        return all_seeds(preset, seeds) if self.sharded else ()

    def shard_count(self, preset, seeds=None):
        return len(self.seeds(preset, seeds)) if self.sharded else None

    def file(self, preset, seeds=None, sampler="paper", **options):
        from ..file_names import figure_file

        return figure_file(self.name, preset, self.sampler(sampler))

    def sampler(self, sampler: str = "paper") -> str:
        """The sampler its sweep is drawn with (isotropic inputs: both samplers draw the same prompts)."""
        return "paper" if not self.sharded or TRAINING_FIGURES[self.name][0] != "kms" else sampler

    def command(self, preset, seeds=None, sampler="paper", **options):
        from ..file_names import figure_command

        return figure_command(self.name, preset, self.sampler(sampler), seeds)

    def command_for(self, filename):
        stem = filename.removesuffix(".json")
        figure, _, rest = stem.partition("_")
        if figure != self.name:
            return None
        sampler = next((s for s in SAMPLERS if s != "paper" and rest.endswith("_" + s)), "paper")
        preset = rest.removesuffix("_" + sampler) if sampler != "paper" else rest
        return self.command(preset, sampler=sampler) if preset in self.presets else None

    def read(self, preset="paper", folder=None, required=False, seeds=None, sampler="paper", **options):
        from ..file_names import saved_figure

        return saved_figure(self.name, preset, folder, required, sampler)

    def before_training(self, preset, out, seeds, shard, sampler="paper", **options):
        from ..figure_sweeps import figure_seeds, keep_other_seeds

        if self.sharded:
            keep_other_seeds(out / self.file(preset, seeds, sampler), figure_seeds(preset, seeds, shard))

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, sampler="paper", rng="auto",
                  shared=None, **options):
        from ..figure_sweeps import reproduce_figure

        return [reproduce_figure(self.name, preset, device, out, deadline, seeds, restart, shard, dirty, sampler, rng,
                                 {} if shared is None else shared)]

    def check_shards(self, preset, seeds, n, out, command, sampler="paper", **options):
        from ..figure_sweeps import sweep_of
        from ..file_names import sweep_stem
        from ..merging import check_sweep_shards

        if self.sharded:
            covariance, used = sweep_of(self.name, sampler)
            check_sweep_shards(sweep_stem(covariance, preset, used), out, n, command)

    def merged_files(self, preset, seeds, n, out, command, dirty, start, sampler="paper", rng="auto", device="auto",
                     sweeps=None, **options):
        from ..merging import merged_figure

        return [(self.file(preset, seeds, sampler),
                 merged_figure(self.name, preset, seeds, n, out, command, dirty, start, sampler, rng, device,
                               {} if sweeps is None else sweeps))]


#: One reproduction per figure, in order.
REPRODUCTIONS = tuple(Figure(name) for name in FIGURES)
