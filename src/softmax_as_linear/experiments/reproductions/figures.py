"""The paper's figures, declared: one reproduction per figure, written as ``<figure>_<preset>[_published].json``.

A training figure reads the sweep it shares with the other figures of its input covariance (Figures 2-4: isotropic;
6-8: KMS): :mod:`~softmax_as_linear.experiments.sweep_stage` trains, reuses or joins that sweep once per call, and a
figure says which sweep it reads and what it reads from it
(:func:`~softmax_as_linear.experiments.paper_figures.figure_data`). Figures 1 and 5 compare softmax and linear attention
at the initialisation, without training
(:func:`~softmax_as_linear.experiments.concentration_figures.concentration_figure`)."""
from __future__ import annotations

import pathlib
import time

from ...registry import CONCENTRATION_FIGURES, FIGURES, SAMPLERS, TRAINING_FIGURES
from ..pipeline import Reproduction


class Figure(Reproduction):
    """A figure of the paper (see the module docstring)."""

    in_all = True

    def __init__(self, name: str):
        self.name, self.title = name, f"Figure {name[3:]}"
        self.sharded = name not in CONCENTRATION_FIGURES

    def seeds(self, preset, seeds=None):
        from ..presets import all_seeds

        return all_seeds(preset, seeds) if self.sharded else ()

    def shard_count(self, preset, seeds=None):
        return len(self.seeds(preset, seeds)) if self.sharded else None

    def file(self, preset, seeds=None, sampler="paper", **options):
        from ..file_names import figure_file

        return figure_file(self.name, preset, self.sampler(sampler))

    def sampler(self, sampler: str = "paper") -> str:
        """The sampler its sweep is drawn with (isotropic inputs: both samplers draw the same prompts)."""
        return "paper" if not self.sharded or TRAINING_FIGURES[self.name][0] != "kms" else sampler

    def sweep(self, preset: str, sampler: str = "paper") -> tuple[str, str]:
        """``(covariance, stem)`` of the sweep it reads (a training figure)."""
        from ..file_names import sweep_stem

        covariance = TRAINING_FIGURES[self.name][0]
        return covariance, sweep_stem(covariance, preset, self.sampler(sampler))

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
        """Refuse to replace a figure file that holds other seeds than the call's: a figure file is named by its
        preset alone, so a three-seed run would otherwise overwrite the ten-seed file the chapters read (the
        :class:`~softmax_as_linear.core.artifacts.SettingsMismatchError` says how to keep both or replace it); a
        damaged file is written again from its sweep (:func:`~softmax_as_linear.experiments.pipeline.read_result`)."""
        from ...core.artifacts import SettingsMismatchError
        from ..pipeline import read_result

        if not self.sharded:
            return
        chosen = self.shard_seeds(preset, seeds, shard)
        path = out / self.file(preset, seeds, sampler)
        data = read_result(path, "its sweep")
        stored = None if data is None else data.get("seeds")
        if stored is not None and [int(s) for s in stored] != [int(s) for s in chosen]:
            raise SettingsMismatchError(
                path, f"{path} holds the seeds {', '.join(map(str, stored))}, and this command would replace it with "
                      f"the seeds {', '.join(map(str, chosen))}: write elsewhere with --out, or pass --restart to "
                      "replace it")

    def shard_seeds(self, preset: str, seeds: int | None, shard) -> tuple[int, ...]:
        """The seeds its sweep trains in this call: the reproduction's, or shard ``shard``'s part of them."""
        from ..presets import shard_seeds

        chosen = self.seeds(preset, seeds)
        return chosen if shard is None else shard_seeds(chosen, *shard)

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, sampler="paper", rng="auto",
                  shared=None, **options):
        """Its file: Figures 1 and 5 computed at the initialisation; a training figure read from its sweep (trained,
        resumed or reused by :func:`~softmax_as_linear.experiments.sweep_stage.trained_sweep`, its final risks
        measured or read by :func:`~softmax_as_linear.experiments.sweep_stage.final_risks`), which ``shared`` keeps
        for the other figures of the call."""
        from ...core.artifacts import save_json
        from ...engine.train import resolved
        from ..concentration_figures import concentration_figure
        from ..file_names import overrides_of
        from ..paper_figures import figure_data, sweep_provenance
        from ..presets import CHANGE_PROMPTS, FINAL_PROMPTS, sweep_config
        from ..sweep_stage import final_risks, trained_sweep

        if not self.sharded:  # no training: softmax against linear attention at the initialisation
            data = concentration_figure(self.name, preset, device=device, progress=True)
            data["provenance"] = {**data.get("provenance", {}), **({"allow_dirty": True} if dirty else {})}
        else:
            shared = {} if shared is None else shared
            covariance, stem = self.sweep(preset, sampler)
            if stem not in shared:
                start = time.monotonic()
                overrides = {} if seeds is None and shard is None else {"seeds": self.shard_seeds(preset, seeds, shard)}
                config = resolved(sweep_config(preset, covariance, sampler=self.sampler(sampler), rng=rng,
                                               **overrides), device)
                result = trained_sweep(config, stem, preset, device, out, deadline, restart)
                evaluation = final_risks(result, out / f"{stem}.npz", FINAL_PROMPTS[preset], device, restart)
                origin = sweep_provenance(result, preset, device, time.monotonic() - start, evaluation)
                origin.update(overrides=overrides_of(seeds, sampler, rng, shard=shard),
                              **({"allow_dirty": True} if dirty else {}))
                if shard is not None:
                    origin["shard"] = f"{shard[0]}/{shard[1]}"
                shared[stem] = result, evaluation, origin
            result, evaluation, origin = shared[stem]
            data = {**figure_data(self.name, result, evaluation=evaluation, change_prompts=CHANGE_PROMPTS[preset],
                                  device=device), "provenance": origin}
        path = save_json(out / self.file(preset, seeds, sampler), data)
        print(f"wrote {path}", flush=True)
        return [path]

    def check_shards(self, preset, seeds, n, out, command, sampler="paper", **options):
        from ..sweep_stage import check_sweep_shards

        if self.sharded:
            check_sweep_shards(self.sweep(preset, sampler)[1], out, n, command)

    def merged_files(self, preset, seeds, n, out, command, dirty, start, sampler="paper", rng="auto", device="auto",
                     sweeps=None, **options):
        """Its file computed from its sweep, joined now (once per merge: ``sweeps`` keeps it for the other figures);
        Figures 1 and 5, which have no seeds, computed by the merge."""
        from ...core.devices import resolve_device
        from ..concentration_figures import concentration_figure
        from ..file_names import overrides_of
        from ..paper_figures import figure_data
        from ..presets import CHANGE_PROMPTS, FINAL_PROMPTS, sweep_config
        from ..sweep_stage import joined

        if not self.sharded:
            def concentration() -> dict:
                data = concentration_figure(self.name, preset, device=resolve_device(device), progress=True)
                if dirty:
                    data["provenance"] = {**data.get("provenance", {}), "allow_dirty": True}
                return data
            return [(self.file(preset, seeds, sampler), concentration)]
        covariance, stem = self.sweep(preset, sampler)
        config = sweep_config(preset, covariance, sampler=self.sampler(sampler), seeds=self.seeds(preset, seeds),
                              rng=rng)
        sweep = joined({} if sweeps is None else sweeps, stem, config, FINAL_PROMPTS[preset], out, n, command,
                       lambda folder: self.shard_provenance(folder, preset, sampler), preset,
                       overrides_of(seeds, self.sampler(sampler), rng), dirty, start)
        return [(self.file(preset, seeds, sampler),
                 lambda: {**figure_data(self.name, sweep.result, evaluation=sweep.evaluation,
                                        change_prompts=CHANGE_PROMPTS[preset], device=resolve_device(device)),
                          "provenance": sweep.provenance})]

    def shard_provenance(self, folder: pathlib.Path, preset: str, sampler: str) -> pathlib.Path:
        """The file, in a shard's ``folder``, of the first figure of its sweep that the shard wrote (it holds the
        shard's provenance: where and how it ran), whichever of the sweep's figures the shard was run for."""
        covariance = TRAINING_FIGURES[self.name][0]
        files = [folder / Figure(f).file(preset, sampler=sampler) for f, (c, _) in TRAINING_FIGURES.items()
                 if c == covariance]
        return next((path for path in files if path.exists()), files[0])


#: One reproduction per figure, in order.
REPRODUCTIONS = tuple(Figure(name) for name in FIGURES)
