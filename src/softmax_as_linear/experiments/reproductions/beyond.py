"""Chapter 6's sweeps, declared: one sweep per covariate law, each written as ``beyond_<covariates>_<run>.json``
(:mod:`~softmax_as_linear.experiments.sweep_stage` trains, reuses or joins each sweep;
:func:`~softmax_as_linear.experiments.beyond_gaussian.beyond_readings` reads it)."""
from __future__ import annotations

import time

from ..pipeline import Reproduction

#: The covariate laws of Chapter 6's reproduction when none is named.
BEYOND_COVARIATES = ("uniform", "rademacher")


class Beyond(Reproduction):
    """Chapter 6: one sweep per covariate law."""

    name, title, options = "beyond", "Chapter 6's sweeps", ("covariates", "lengths")
    summary = ("Chapter 6's sweeps, one per covariate law (--covariates), written as "
               "beyond_<covariates>_<preset>.json")
    example = "reproduce beyond --preset paper --device cuda    # Chapter 6: uniform and Rademacher"

    def seeds(self, preset, seeds=None):
        from ..presets import all_seeds

        return all_seeds(preset, seeds, beyond=True)

    def run_name(self, preset: str, seeds: int | None = None, lengths=None) -> str:
        """The run's name: the preset's, followed by what changed when seeds or lengths are overridden
        (:func:`~softmax_as_linear.experiments.file_names.run_name`)."""
        from ..file_names import run_name
        from ..presets import sweep_seeds

        return run_name(preset, None if seeds is None else sweep_seeds(seeds),
                        None if lengths is None else tuple(lengths))

    def config(self, preset: str, covariates: str, seeds: int | None = None, lengths=None, shard=None, rng="auto"):
        """The :class:`~softmax_as_linear.engine.sweep.TrainConfig` of law ``covariates``'s sweep (shard ``shard``'s
        seeds, when given)."""
        from ..presets import beyond_config, shard_seeds

        overrides = {} if lengths is None else {"lengths": tuple(int(L) for L in lengths)}
        if seeds is not None or shard is not None:
            overrides["seeds"] = self.seeds(preset, seeds)
        if shard is not None:
            overrides["seeds"] = shard_seeds(overrides["seeds"], *shard)
        return beyond_config(preset, covariates, rng=rng, **overrides)

    def file(self, preset, seeds=None, covariates=None, lengths=None, **options):
        """The file of its first covariate law (it writes one per law)."""
        from ..file_names import beyond_stem

        return beyond_stem((covariates or BEYOND_COVARIATES)[0], self.run_name(preset, seeds, lengths)) + ".json"

    def command(self, preset, seeds=None, covariates=None, lengths=None, **options):
        from ..file_names import beyond_command

        return beyond_command((covariates or BEYOND_COVARIATES)[0], self.run_name(preset, seeds, lengths))

    def command_for(self, filename):
        from ..file_names import beyond_command

        if not filename.startswith("beyond_") or filename.count("_") < 2:
            return None
        _, covariates, run = filename.removesuffix(".json").split("_", 2)
        return beyond_command(covariates, run)

    def read(self, preset="paper", folder=None, required=False, seeds=None, covariates=None, **options):
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
        """Its sweeps, one per law, each trained, resumed or reused by
        :func:`~softmax_as_linear.experiments.sweep_stage.trained_sweep`, read and written."""
        from ...core.artifacts import save_json
        from ...engine.train import resolved
        from ..beyond_gaussian import beyond_provenance, beyond_readings
        from ..file_names import beyond_stem, overrides_of
        from ..presets import BEYOND_FINAL_PROMPTS
        from ..sweep_stage import final_risks, trained_sweep

        run = self.run_name(preset, seeds, lengths)
        recorded = overrides_of(seeds, rng=rng, lengths=lengths, shard=shard)
        written = []
        for covariate in covariates or BEYOND_COVARIATES:
            start = time.monotonic()
            stem = beyond_stem(covariate, run)
            config = resolved(self.config(preset, covariate, seeds, lengths, shard, rng), device)
            print(f"== Chapter 6, {covariate} covariates, {preset} preset" + ("" if run == preset else f" ({run})"),
                  flush=True)
            result = trained_sweep(config, f"sweep_{stem}", preset, device, out, deadline, restart)
            trained = time.monotonic() - start
            evaluation = final_risks(result, out / f"sweep_{stem}.npz", BEYOND_FINAL_PROMPTS[preset], device, restart)
            data = {**beyond_readings(result, evaluation, preset), "run": run}
            data["provenance"] = {**beyond_provenance(result, preset, device, time.monotonic() - start, trained),
                                  "run": run, "overrides": recorded, **({"allow_dirty": True} if dirty else {})}
            written.append(save_json(out / f"{stem}.json", data))
            print(f"wrote {written[-1]}", flush=True)
        return written

    def check_shards(self, preset, seeds, n, out, command, covariates=None, lengths=None, **options):
        from ..file_names import beyond_stem
        from ..sweep_stage import check_sweep_shards

        for covariate in covariates or BEYOND_COVARIATES:
            check_sweep_shards(f"sweep_{beyond_stem(covariate, self.run_name(preset, seeds, lengths))}", out, n,
                               command)

    def merged_files(self, preset, seeds, n, out, command, dirty, start, rng="auto", covariates=None, lengths=None,
                     sweeps=None, **options):
        """Its files (one per law), each computed from its sweep, joined now."""
        from ..beyond_gaussian import beyond_readings
        from ..file_names import beyond_stem, overrides_of
        from ..presets import BEYOND_FINAL_PROMPTS
        from ..sweep_stage import joined

        run, files = self.run_name(preset, seeds, lengths), []
        for covariate in covariates or BEYOND_COVARIATES:
            stem = beyond_stem(covariate, run)
            sweep = joined({} if sweeps is None else sweeps, f"sweep_{stem}",
                           self.config(preset, covariate, seeds, lengths, rng=rng), BEYOND_FINAL_PROMPTS[preset], out,
                           n, command, lambda folder, stem=stem: folder / f"{stem}.json", preset,
                           overrides_of(seeds, "paper", rng, lengths), dirty, start)
            files.append((f"{stem}.json",
                          lambda sweep=sweep: {**beyond_readings(sweep.result, sweep.evaluation, preset), "run": run,
                                               "provenance": {**sweep.provenance, "run": run}}))
        return files


REPRODUCTION = Beyond()
