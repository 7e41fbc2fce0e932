"""A reproduction split into shards of seeds that run anywhere (a SLURM job array through submitit, one GPU
per process, or one process after another), resume independently, and merge into the files of one run.

Shard ``k`` of ``n`` trains the seeds :func:`~softmax_as_linear.experiments.presets.shard_seeds` gives it
(consecutive blocks of the reproduction's seeds) into ``<out>/shards/<k>-of-<n>/``, with its own
checkpoints (``reproduce ... --shard k/n``). :func:`merge` joins the shards' sweeps and final evaluations
along the seed axis and writes, into ``<out>``, exactly the files one process training every seed
writes (``reproduce ... merge``), except the provenance, which lists the shards.

Why this is exact: every random number of a run comes from its own seed's streams
(:mod:`~softmax_as_linear.core.seeding`), runs of different seeds never mix in a sum (the batched
products, softmaxes and means of :mod:`~softmax_as_linear.engine.batched` are per prompt and per run,
the loss of a run is its own), and the final evaluation loops over seeds. So on a CPU a seed's
trajectory, final risks and figure values are bit for bit the same whether it is trained alone or with
others (tested; with the same number of torch threads). On a GPU they agree to rounding. Cells smaller
than a seed (some prompt lengths of a seed) are not offered: the prompts a seed draws depend on its
longest length, and the softmax buckets on which lengths train together.

:func:`launch` submits the ``n`` shards through submitit (``pip install softmax_as_linear[cluster]``):
a SLURM job array, or its local executor (the shards as processes of this machine, each on a GPU of its
own when the device is CUDA), waits for them and merges.
"""
from __future__ import annotations

import pathlib
import time
from typing import NamedTuple

import numpy as np

from ..core import checks
from ..core.artifacts import DamagedFileError, load_json, load_npz, results_folder, save_json, save_npz
from ..core.devices import resolve_device
from ..core.provenance import provenance, utc_now
from ..engine.sweep import TrainConfig, TrainResult, load_sweep, save_sweep
from ..registry import CONCENTRATION_FIGURES, LAUNCHERS, TRAINING_FIGURES
from .chapters import REPRODUCTIONS
from .concentration_figures import concentration_figure
from .merging import ShardError, ShardsPartial, common_origin
from .paper_figures import figure_data
from .presets import BEYOND_FINAL_PROMPTS, CHANGE_PROMPTS, FINAL_PROMPTS, beyond_config, sweep_config
from .reproduce import (
    BEYOND_COVARIATES,
    all_seeds,
    beyond_overrides,
    beyond_run,
    check_clean,
    check_options,
    figures_of,
    final_key,
    overrides_of,
    reproduce,
    shard_folder,
    shard_seeds,
    sweep_of,
)
from .result_files import beyond_stem, figure_file, sweep_stem

#: The arrays of a final evaluation that have a seed axis (the others, ``n_prompts``, are shared).
EVALUATION_PER_SEED = ("risk", "risk_se", "paired_difference", "paired_difference_se", "linear_exact")


def shard_command(figures: list[str], preset: str, seeds: int | None, sampler: str, k: int, n: int,
                  out: pathlib.Path | None, rng: str = "auto", covariates=None, lengths=None) -> str:
    """The command line that trains shard ``k`` of ``n`` (the same for a missing or an unfinished shard)."""
    extra = ("" if seeds is None else f" --seeds {seeds}") + ("" if sampler == "paper" else f" --sampler {sampler}")
    extra += "" if rng == "auto" else f" --rng {rng}"
    extra += "" if covariates is None else f" --covariates {' '.join(covariates)}"
    extra += "" if lengths is None else f" --lengths {' '.join(map(str, lengths))}"
    where = "" if out is None else f" --out {pathlib.Path(out).absolute()}"
    return f"python -m softmax_as_linear reproduce {' '.join(figures)} --preset {preset}{extra}{where} --shard {k}/{n}"


def join_sweep(stem: str, config: TrainConfig, final_prompts: int, out: pathlib.Path, n: int, command,
               shard_file=None) -> tuple[TrainResult, dict, list[dict]]:
    """The shards' sweeps ``<stem>.npz`` and final evaluations, joined along the seed axis (in memory: a
    :class:`JoinedSweep` saves them), with each shard's
    provenance (read from ``shard_file(folder)``, one of the shard's result files, when given). ``config``: the
    whole reproduction's; with ``rng="auto"`` the shards' random stream is the one the first shard used (it depends
    on its device)."""
    results, evaluations, origins = [], [], []
    for k in range(1, n + 1):
        folder = shard_folder(out, k, n)
        path = folder / f"{stem}.npz"
        expected = config.replace(seeds=shard_seeds(config.seeds, k, n))
        if not path.exists():
            raise ShardError(f"shard {k}/{n} has not written {path}: run\n    {command(k)}")
        result = load_sweep(path)
        if config.rng == "auto":  # the stream "auto" meant where the first shard ran
            config = config.replace(rng=result.config.rng)
            expected = expected.replace(rng=result.config.rng)
        if result.config != expected:
            differ = [f"{key} {_shown(theirs)} (this merge: {_shown(mine)})" for key, theirs, mine in
                      ((key, value, expected.as_dict()[key]) for key, value in result.config.as_dict().items())
                      if theirs != mine]
            raise ShardError(f"the settings of this merge differ from those the shards were trained with: shard "
                             f"{k}/{n} ({path}) has {'; '.join(differ)}. Run merge with the shards' --preset, --seeds, "
                             "--sampler, --rng (and --lengths), or train the shards again with these settings and "
                             "--restart")
        if not result.complete:
            raise ShardError(f"shard {k}/{n} stopped at step {int(result.steps[-1])} of {config.steps}: run the same "
                             f"command again to resume it\n    {command(k)}")
        final = folder / f"{stem}_final.npz"
        evaluation = load_npz(final) if final.exists() else {}
        if str(evaluation.pop("key", "")) != final_key(result, final_prompts):
            raise ShardError(f"shard {k}/{n} has no final evaluation of its sweep ({final}): run\n    {command(k)}")
        origin = {"shard": f"{k}/{n}", "seeds": list(result.config.seeds),
                  "training_seconds": round(float(result.seconds), 1)}
        figure = None if shard_file is None else shard_file(folder)
        if figure is not None and figure.exists():
            try:
                origin = {**load_json(figure).get("provenance", {}), **origin}
            except DamagedFileError as error:  # its provenance would be lost: the shard's command rewrites it
                raise ShardError(f"{error}; it holds the provenance of shard {k}/{n} (where and how it ran): run the "
                                 f"shard's command again, which rewrites it from its sweep without training\n"
                                 f"    {command(k)}") from None
            origin.pop("settings", None)
        results.append(result)
        evaluations.append(evaluation)
        origins.append(origin)
    first = results[0]
    merged = TrainResult(config, first.steps,
                         *(np.concatenate([getattr(r, name) for r in results]) for name in ("train_risk", "eval_risk")),
                         {name: np.concatenate([r.params[name] for r in results]) for name in first.params},
                         np.concatenate([r.diverged_at for r in results]), float(sum(r.seconds for r in results)), True,
                         np.concatenate([r.eval_sd for r in results]),
                         ", ".join(dict.fromkeys(r.engine_path for r in results)))  # the path, or each one that ran
    evaluation = {name: np.concatenate([e[name] for e in evaluations]) for name in EVALUATION_PER_SEED}
    evaluation["n_prompts"] = evaluations[0]["n_prompts"]
    return merged, evaluation, origins


class JoinedSweep(NamedTuple):
    """A sweep joined from its shards (:func:`join_sweep`), with its final evaluation and the merged files'
    provenance, not yet written."""

    stem: str
    result: TrainResult
    evaluation: dict
    provenance: dict
    final_prompts: int

    def save(self, out: pathlib.Path) -> None:
        """Write ``<stem>.npz`` and ``<stem>_final.npz`` into ``out``, as one process training every seed does."""
        save_sweep(out / f"{self.stem}.npz", self.result)
        save_npz(out / f"{self.stem}_final.npz", key=np.array(final_key(self.result, self.final_prompts)),
                 **self.evaluation)


def check_sweep_shards(stem: str, out: pathlib.Path, n: int, command) -> None:
    """A :class:`~softmax_as_linear.experiments.merging.ShardError` naming the first of the ``n`` shards that has not
    written its sweep ``<stem>.npz`` (with the sweeps it holds instead, for Chapter 6's, whose names say their seeds
    and lengths)."""
    for k in range(1, n + 1):
        folder = shard_folder(out, k, n)
        if not (folder / f"{stem}.npz").exists():
            others = sorted(p.stem for p in folder.glob(f"{stem.split('_', 3)[0]}_*.npz")
                            if not p.stem.endswith("_final")) if stem.startswith("sweep_beyond") else []
            hint = (f" (it holds {', '.join(others)}: were the shards trained with other --seeds or --lengths "
                    "than this merge's?)") if others else ""
            raise ShardError(f"shard {k}/{n} has not written its sweep {stem} yet{hint}: run\n    {command(k)}")


def joined(sweeps: dict, stem: str, config: TrainConfig, final_prompts: int, out: pathlib.Path, n: int, command,
           shard_file, preset: str, overrides: dict, dirty: bool, start: float) -> JoinedSweep:
    """The sweep ``stem`` joined from its ``n`` shards once per merge (``sweeps`` keeps it for the other files that
    read it)."""
    if stem not in sweeps:
        merged, evaluation, origins = join_sweep(stem, config, final_prompts, out, n, command, shard_file)
        provenance = _merged_provenance(merged, preset, origins, time.monotonic() - start, overrides, dirty)
        sweeps[stem] = JoinedSweep(stem, merged, evaluation, provenance, final_prompts)
    return sweeps[stem]


def merged_figure(name: str, preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool,
                  start: float, sampler: str = "paper", rng: str = "auto", device="auto", sweeps: dict | None = None):
    """What computes figure ``name``'s file from its joined sweep (Figures 1 and 5, which have no seeds: computed
    here), the sweep being joined now, before anything is written."""
    if name in CONCENTRATION_FIGURES:
        def concentration() -> dict:
            data = concentration_figure(name, preset, device=resolve_device(device), progress=True)
            if dirty:
                data["provenance"] = {**data.get("provenance", {}), "allow_dirty": True}
            return data
        return concentration
    covariance, used = sweep_of(name, sampler)
    first = next(f for f, (c, _) in TRAINING_FIGURES.items() if c == covariance)  # its shards' provenance
    sweep = joined({} if sweeps is None else sweeps, sweep_stem(covariance, preset, used),
                   sweep_config(preset, covariance, sampler=used, seeds=all_seeds(preset, seeds), rng=rng),
                   FINAL_PROMPTS[preset], out, n, command, lambda folder: folder / figure_file(first, preset, used),
                   preset, overrides_of(seeds, sampler if covariance == "kms" else "paper", rng), dirty, start)
    return lambda: {**figure_data(name, sweep.result, evaluation=sweep.evaluation,
                                  change_prompts=CHANGE_PROMPTS[preset], device=resolve_device(device)),
                    "provenance": sweep.provenance}


def merged_beyond(preset: str, seeds: int | None, n: int, out: pathlib.Path, command, dirty: bool, start: float,
                  rng: str = "auto", covariates=None, lengths=None, sweeps: dict | None = None) -> list:
    """Chapter 6's files (one per law) and what computes each from its joined sweep, joined now."""
    from .beyond_gaussian import beyond_readings

    run, files = beyond_run(preset, seeds, lengths), []
    for covariate in covariates or BEYOND_COVARIATES:
        stem = beyond_stem(covariate, run)
        config = beyond_config(preset, covariate, rng=rng, **beyond_overrides(preset, seeds, lengths))
        sweep = joined({} if sweeps is None else sweeps, f"sweep_{stem}", config, BEYOND_FINAL_PROMPTS[preset], out,
                       n, command, lambda folder, stem=stem: folder / f"{stem}.json", preset,
                       overrides_of(seeds, "paper", rng, lengths), dirty, start)
        files.append((f"{stem}.json", lambda sweep=sweep: {**beyond_readings(sweep.result, sweep.evaluation, preset),
                                                           "run": run, "provenance": {**sweep.provenance, "run": run}}))
    return files


def _shown(value):
    return list(value) if isinstance(value, tuple) else repr(value) if isinstance(value, str) else value


def _merged_provenance(result: TrainResult, preset: str, origins: list[dict], seconds: float, overrides: dict,
                       dirty: bool) -> dict:
    """The provenance of merged files: where the shards ran (the first shard's device, torch and commit at the top,
    every shard in ``shards``), the preset, its overrides and the settings of the whole reproduction, the summed
    training time, and the merge."""
    first = origins[0]
    top = {**common_origin(origins), **({"allow_dirty": True} if first.get("allow_dirty") else {})}
    merged = provenance("cpu", seconds)
    return {**top, **({"allow_dirty": True} if dirty else {}), "preset": preset, "overrides": overrides,
            "settings": result.config.as_dict(), "training_seconds": round(float(result.seconds), 1),
            "final_prompts": first.get("final_prompts"), "date": utc_now(), "shards": origins, "merged": merged}


def merge(figure: str | list[str], shards: int, preset: str = "lecture", out=None, seeds: int | None = None,
          sampler: str = "paper", device: str = "auto", rng: str = "auto", covariates=None, lengths=None,
          allow_dirty: bool = False) -> list[pathlib.Path]:
    """Join the ``shards`` shards of a reproduction (each trained by ``reproduce(..., shard=(k, shards))``) and
    write its files into ``out``: the sweeps, their final evaluations and one file per figure (and per law of
    Chapter 6, and per chapter's reproduction), as one :func:`~softmax_as_linear.experiments.reproduce.reproduce` of
    every seed writes them (Figures 1 and 5, which have no seeds, are computed here). Every reproduction named checks
    that its shards are there, then reads and joins them
    (:meth:`~softmax_as_linear.experiments.chapters.Reproduction.merged_files`); only then is anything written. A
    :class:`~softmax_as_linear.experiments.merging.ShardError` names a missing or unfinished shard and the command
    that completes it, or says that the merge's settings differ from the shards'; nothing is written then."""
    names = figures_of(figure)
    check_options(preset, None, seeds, sampler, rng, (1, shards), names, covariates, lengths)
    dirty = check_clean(allow_dirty)
    out = results_folder() if out is None else pathlib.Path(out)
    start = time.monotonic()
    chosen = [REPRODUCTIONS[name] for name in names]
    training = [r.name for r in chosen if r.sharded]

    def command(k):
        return shard_command(training, preset, seeds, sampler, k, shards, out, rng, covariates, lengths)

    options = dict(sampler=sampler, rng=rng, covariates=covariates, lengths=lengths)
    for r in chosen:  # every shard of every sweep is there before anything is read
        r.check_shards(preset, seeds, shards, out, command, **options)
    sweeps = {}  # the sweeps joined for this merge, each once, by stem
    files = [file for r in chosen
             for file in r.merged_files(preset, seeds, shards, out, command, dirty, start, device=device,
                                        sweeps=sweeps, **options)]
    for sweep in sweeps.values():
        sweep.save(out)
    written = []
    for name, data in files:
        written.append(save_json(out / name, data()))
        print(f"wrote {written[-1]}", flush=True)
    return written


def run_shard(figures: list[str], options: dict, shard: tuple[int, int], threads: int = 1) -> list[str]:
    """One shard, as a launched job runs it: :func:`~softmax_as_linear.experiments.reproduce.reproduce` with ``shard``
    on ``threads`` torch threads
    (a CPU); returns the files written and whether each is complete."""
    import torch

    before = torch.get_num_threads()  # restored: a debug or in-process launcher runs this in the caller's process
    try:
        if resolve_device(options.get("device", "auto")).type == "cpu":
            torch.set_num_threads(threads)
        written = reproduce(figures, shard=shard, **options)
    finally:
        torch.set_num_threads(before)
    return [(str(path), load_json(path).get("complete", True)) for path in written]


def launch(figure: str | list[str], shards: int, launcher: str = "local", preset: str = "lecture", device="auto",
           out=None, max_minutes: float | None = None, seeds: int | None = None, sampler: str = "paper",
           restart: bool = False, threads: int = 1, timeout_minutes: float = 24 * 60, slurm: dict | None = None,
           gpus_per_shard: int | None = None, rng: str = "auto", covariates=None, lengths=None,
           allow_dirty: bool = False) -> list[pathlib.Path]:
    """Train the ``shards`` shards of a reproduction as submitit jobs and merge them (see the module's docstring).

    ``launcher``: ``"slurm"`` (one job array; ``slurm`` holds submitit's ``slurm_*`` parameters without the
    prefix, for instance ``{"partition": "gpu", "additional_parameters": {"account": "me"}}``) or
    ``"local"`` (the shards as processes of this machine; with CUDA, shard ``k`` gets GPU ``k - 1`` modulo
    the GPUs there). ``timeout_minutes`` bounds each job; ``gpus_per_shard`` defaults to 1 on CUDA, else 0.
    Job logs go to ``<out>/shards/logs/``. Returns the merged files; a
    :class:`~softmax_as_linear.experiments.merging.ShardError` names failed or unfinished shards (rerun the same call to
    resume them: finished shards are reused).
    """
    import submitit  # the optional extra: pip install softmax_as_linear[cluster]

    names = figures_of(figure)
    checks.one_of("launcher", launcher, LAUNCHERS)
    check_options(preset, max_minutes, seeds, sampler, rng, (1, shards), names, covariates, lengths)
    check_clean(allow_dirty)
    out = results_folder() if out is None else pathlib.Path(out)
    training = [name for name in names if REPRODUCTIONS[name].sharded]
    resolved = resolve_device(device) if launcher == "local" else None
    cuda = (resolved.type == "cuda") if resolved is not None else str(device) == "cuda"
    gpus = (1 if cuda else 0) if gpus_per_shard is None else gpus_per_shard
    executor = submitit.AutoExecutor(folder=out / "shards" / "logs" / "%j", cluster=launcher)
    executor.update_parameters(name="softmax_as_linear", timeout_min=int(timeout_minutes), gpus_per_node=gpus,
                               cpus_per_task=max(2, threads + 1), tasks_per_node=1, nodes=1,
                               **{f"slurm_{key}": value for key, value in (slurm or {}).items()})
    options = dict(preset=preset, device=device, out=out, max_minutes=max_minutes, seeds=seeds, sampler=sampler,
                   restart=restart, rng=rng, covariates=covariates, lengths=lengths, allow_dirty=allow_dirty)
    jobs = []
    if launcher == "local" and cuda and gpus > 0:  # one GPU (or gpus) of this machine per shard
        import torch

        count = max(torch.cuda.device_count(), 1)
        for k in range(1, shards + 1):
            executor.update_parameters(local_visible_gpus=tuple((gpus * (k - 1) + g) % count for g in range(gpus)))
            jobs.append(executor.submit(run_shard, training, options, (k, shards), threads))
    else:
        with executor.batch():
            jobs = [executor.submit(run_shard, training, options, (k, shards), threads) for k in range(1, shards + 1)]
    for k, job in enumerate(jobs, 1):
        print(f"shard {k}/{shards}: job {job.job_id}, log {job.paths.stdout}", flush=True)
    failed, partial = [], []
    for k, job in enumerate(jobs, 1):
        try:
            files = job.result()
        except Exception as error:  # submitit re-raises the job's error with the tail of its log
            failed.append(f"shard {k}/{shards} (job {job.job_id}) failed: {str(error).strip().splitlines()[-1]}; "
                          f"log {job.paths.stderr}")
            continue
        if not all(complete for _, complete in files):
            partial.append(k)
        print(f"shard {k}/{shards}: done", flush=True)
    if failed:
        raise ShardError("\n".join(failed) + "\nrun the same command again: finished shards are reused")
    if partial:
        raise ShardsPartial(f"shard{'s' if len(partial) > 1 else ''} {', '.join(map(str, partial))} of {shards} "
                            "stopped at the time limit; run the same command again to resume them")
    return merge(names, shards, preset, out, seeds, sampler, device, rng, covariates, lengths, allow_dirty)
