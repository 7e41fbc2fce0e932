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

:func:`launch` submits the ``n`` shards through submitit (the extra ``cluster``: ``pip install -e ".[cluster]"``):
a SLURM job array, or its local executor (the shards as processes of this machine, each on a GPU of its
own when the device is CUDA), waits for them and merges.
"""
from __future__ import annotations

import pathlib
import time

from ..core import checks
from ..core.artifacts import load_json, results_folder, save_json
from ..core.devices import resolve_device
from ..registry import LAUNCHERS
from .reproduce import check_clean, check_options, figures_of, reproduce
from .reproductions import REPRODUCTIONS
from .shard_files import ShardError, ShardsPartial


def shard_command(figures: list[str], preset: str, seeds: int | None, sampler: str, k: int, n: int,
                  out: pathlib.Path | None, rng: str = "auto", covariates=None, lengths=None) -> str:
    """The command line that trains shard ``k`` of ``n`` (the same for a missing or an unfinished shard)."""
    extra = ("" if seeds is None else f" --seeds {seeds}") + ("" if sampler == "paper" else f" --sampler {sampler}")
    extra += "" if rng == "auto" else f" --rng {rng}"
    extra += "" if covariates is None else f" --covariates {' '.join(covariates)}"
    extra += "" if lengths is None else f" --lengths {' '.join(map(str, lengths))}"
    where = "" if out is None else f" --out {pathlib.Path(out).absolute()}"
    return f"python -m softmax_as_linear reproduce {' '.join(figures)} --preset {preset}{extra}{where} --shard {k}/{n}"


def merge(figure: str | list[str], shards: int, preset: str = "lecture", out=None, seeds: int | None = None,
          sampler: str = "paper", device: str = "auto", rng: str = "auto", covariates=None, lengths=None,
          allow_dirty: bool = False) -> list[pathlib.Path]:
    """Join the ``shards`` shards of a reproduction (each trained by ``reproduce(..., shard=(k, shards))``) and
    write its files into ``out``: the sweeps, their final evaluations and one file per figure (and per law of
    Chapter 6, and per chapter's reproduction), as one :func:`~softmax_as_linear.experiments.reproduce.reproduce` of
    every seed writes them (Figures 1 and 5, which have no seeds, are computed here). Every reproduction named checks
    that its shards are there, then reads and joins them
    (:meth:`~softmax_as_linear.experiments.pipeline.Reproduction.merged_files`); only then is anything written. A
    :class:`~softmax_as_linear.experiments.shard_files.ShardError` names a missing or unfinished shard and the command
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
    :class:`~softmax_as_linear.experiments.shard_files.ShardError` names failed or unfinished shards (rerun the same
    call to resume them: finished shards are reused).
    """
    import submitit  # the optional extra cluster (the command line names it when it is missing)

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
    again = " without --restart" if restart else ""  # --restart would delete the shards' checkpoints again
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
        raise ShardError("\n".join(failed) + f"\nrun the same command again{again}: finished shards are reused")
    if partial:
        raise ShardsPartial(f"shard{'s' if len(partial) > 1 else ''} {', '.join(map(str, partial))} of {shards} "
                            f"stopped at the time limit; run the same command again{again} to resume them")
    return merge(names, shards, preset, out, seeds, sampler, device, rng, covariates, lengths, allow_dirty)
