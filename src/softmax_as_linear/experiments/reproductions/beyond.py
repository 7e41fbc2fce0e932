"""Chapter 6's sweeps, declared: one sweep per covariate law (:mod:`~softmax_as_linear.experiments.figure_sweeps`
trains, joins and writes them), each written as ``beyond_<covariates>_<run>.json``."""
from __future__ import annotations

from ..pipeline import Reproduction


class Beyond(Reproduction):
    """Chapter 6: one sweep per covariate law."""

    name, title, options = "beyond", "Chapter 6's sweeps", ("covariates", "lengths")
    summary = ("Chapter 6's sweeps, one per covariate law (--covariates), written as "
               "beyond_<covariates>_<preset>.json")
    example = "reproduce beyond --preset paper --device cuda    # Chapter 6: uniform and Rademacher"

    def seeds(self, preset, seeds=None):
        from ..figure_sweeps import all_seeds

        return all_seeds(preset, seeds, beyond=True)

    def file(self, preset, seeds=None, covariates=None, lengths=None, **options):
        """The file of its first covariate law (it writes one per law)."""
        from ..figure_sweeps import BEYOND_COVARIATES, beyond_run
        from ..file_names import beyond_stem

        return beyond_stem((covariates or BEYOND_COVARIATES)[0], beyond_run(preset, seeds, lengths)) + ".json"

    def command(self, preset, seeds=None, covariates=None, lengths=None, **options):
        from ..figure_sweeps import BEYOND_COVARIATES, beyond_run
        from ..file_names import beyond_command

        return beyond_command((covariates or BEYOND_COVARIATES)[0], beyond_run(preset, seeds, lengths))

    def command_for(self, filename):
        from ..file_names import beyond_command

        if not filename.startswith("beyond_") or filename.count("_") < 2:
            return None
        _, covariates, run = filename.removesuffix(".json").split("_", 2)
        return beyond_command(covariates, run)

    def read(self, preset="paper", folder=None, required=False, seeds=None, covariates=None, **options):
        from ..figure_sweeps import BEYOND_COVARIATES
        from ..file_names import saved_beyond

        return saved_beyond((covariates or BEYOND_COVARIATES)[0], preset, folder)

    def check(self, preset, seeds, shard, max_minutes, covariates=None, lengths=None, **options):
        from ...core import checks
        from ...registry import COVARIATES
        from ..presets import beyond_config

        super().check(preset, seeds, shard, max_minutes, **options)
        for covariate in covariates or ():
            checks.one_of("covariates", covariate, COVARIATES)
        if lengths is not None:
            beyond_config(preset, lengths=tuple(lengths))  # checks the lengths

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, rng="auto", covariates=None,
                  lengths=None, **options):
        from ..figure_sweeps import reproduce_beyond

        return reproduce_beyond(preset, device, out, deadline, seeds, rng, restart, shard, covariates, lengths, dirty)

    def check_shards(self, preset, seeds, n, out, command, covariates=None, lengths=None, **options):
        from ..figure_sweeps import BEYOND_COVARIATES, beyond_run
        from ..file_names import beyond_stem
        from ..merging import check_sweep_shards

        for covariate in covariates or BEYOND_COVARIATES:
            check_sweep_shards(f"sweep_{beyond_stem(covariate, beyond_run(preset, seeds, lengths))}", out, n, command)

    def merged_files(self, preset, seeds, n, out, command, dirty, start, rng="auto", covariates=None, lengths=None,
                     sweeps=None, **options):
        from ..merging import merged_beyond

        return merged_beyond(preset, seeds, n, out, command, dirty, start, rng, covariates, lengths,
                             {} if sweeps is None else sweeps)


REPRODUCTION = Beyond()
