"""A reproduction split into shards of seeds that run anywhere (a SLURM job array through submitit, one GPU
per process, or one process after another), resume independently, and merge into the files of one run.

Shard ``k`` of ``n`` trains the seeds :func:`~softmax_as_linear.experiments.reproduce.shard_seeds` gives it
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

import numpy as np

from ..core.artifacts import DamagedFileError, load_json, load_npz, results_folder, save_json, save_npz
from ..core.devices import resolve_device
from ..core.provenance import provenance, utc_now
from ..engine.sweep import TrainResult, load_sweep, save_sweep
from ..registry import CONCENTRATION_FIGURES, LAUNCHERS, TRAINING_FIGURES
from .concentration_figures import concentration_figure
from .paper_figures import figure_data
from .presets import CHANGE_PROMPTS, sweep_config
from .reproduce import (
    all_seeds,
    check_options,
    figures_of,
    final_key,
    reproduce,
    shard_folder,
    shard_seeds,
    sweep_of,
)
from .result_files import figure_file, sweep_stem

#: The arrays of a final evaluation that have a seed axis (the others, ``n_prompts``, are shared).
_PER_SEED = ("risk", "risk_se", "paired_difference", "paired_difference_se", "linear_exact")


class ShardError(RuntimeError):
    """A shard that is missing, incomplete or failed: the message names it and the command that completes it."""


class ShardsPartial(ShardError):
    """Shards that stopped at their time limit (``max_minutes``): the same call resumes them."""


def shard_command(figures: list[str], preset: str, seeds: int | None, sampler: str, k: int, n: int,
                  out: pathlib.Path | None, rng: str = "auto") -> str:
    """The command line that trains shard ``k`` of ``n`` (the same for a missing or an unfinished shard)."""
    extra = ("" if seeds is None else f" --seeds {seeds}") + ("" if sampler == "paper" else f" --sampler {sampler}")
    extra += "" if rng == "auto" else f" --rng {rng}"
    where = "" if out is None else f" --out {out}"
    return f"python -m softmax_as_linear reproduce {' '.join(figures)} --preset {preset}{extra}{where} --shard {k}/{n}"


def _merge_sweep(covariance: str, used: str, preset: str, seeds: int | None, out: pathlib.Path, n: int,
                 command, rng: str = "auto") -> tuple[TrainResult, dict, list[dict]]:
    """The shards' sweeps and final evaluations of one sweep, joined along the seed axis, with each shard's provenance.
    With ``rng="auto"`` the shards' random stream is the one the first shard used (it depends on its device)."""
    stem = sweep_stem(covariance, preset, used)
    config = sweep_config(preset, covariance, sampler=used, seeds=all_seeds(preset, seeds), rng=rng)
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
            raise ShardError(f"{path} was trained with other settings than shard {k}/{n} of this reproduction "
                             f"(seeds {list(result.config.seeds)}, expected {list(expected.seeds)}): run\n    {command(k)}")
        if not result.complete:
            raise ShardError(f"shard {k}/{n} stopped at step {int(result.steps[-1])} of {config.steps}: run the same "
                             f"command again to resume it\n    {command(k)}")
        final = folder / f"{stem}_final.npz"
        evaluation = load_npz(final) if final.exists() else {}
        if str(evaluation.pop("key", "")) != final_key(result, preset):
            raise ShardError(f"shard {k}/{n} has no final evaluation of its sweep ({final}): run\n    {command(k)}")
        origin = {"shard": f"{k}/{n}", "seeds": list(result.config.seeds),
                  "training_seconds": round(float(result.seconds), 1)}
        figure = folder / figure_file(next(f for f, (c, _) in TRAINING_FIGURES.items() if c == covariance), preset, used)
        if figure.exists():
            try:
                origin = {**load_json(figure).get("provenance", {}), **origin}
                origin.pop("settings", None)
            except DamagedFileError:
                pass  # the shard's own figure file is only read for its provenance
        results.append(result)
        evaluations.append(evaluation)
        origins.append(origin)
    first = results[0]
    merged = TrainResult(config, first.steps,
                         *(np.concatenate([getattr(r, name) for r in results]) for name in ("train_risk", "eval_risk")),
                         {name: np.concatenate([r.params[name] for r in results]) for name in first.params},
                         np.concatenate([r.diverged_at for r in results]), float(sum(r.seconds for r in results)), True,
                         np.concatenate([r.eval_sd for r in results]))
    evaluation = {name: np.concatenate([e[name] for e in evaluations]) for name in _PER_SEED}
    evaluation["n_prompts"] = evaluations[0]["n_prompts"]
    save_sweep(out / f"{stem}.npz", merged)
    save_npz(out / f"{stem}_final.npz", key=np.array(final_key(merged, preset)), **evaluation)
    return merged, evaluation, origins


def _merged_provenance(result: TrainResult, preset: str, origins: list[dict], seconds: float) -> dict:
    """The provenance of merged files: where the shards ran (the first shard's device, torch and commit at the top,
    every shard in ``shards``), the settings of the whole reproduction, the summed training time, and the merge."""
    first = origins[0]
    top = {key: first.get(key) for key in ("device", "device_name", "gpu", "torch", "python", "commit",
                                           "uncommitted_changes", "machine") if key in first}
    for key in ("device_name", "torch", "commit"):
        if len({o.get(key) for o in origins}) > 1:
            top[key] = "several (see shards)"
    return {**top, "preset": preset, "settings": result.config.as_dict(),
            "training_seconds": round(float(result.seconds), 1), "final_prompts": first.get("final_prompts"),
            "date": utc_now(), "shards": origins, "merged": provenance("cpu", seconds)}


def merge(figure: str | list[str], shards: int, preset: str = "lecture", out=None, seeds: int | None = None,
          sampler: str = "paper", device: str = "auto", rng: str = "auto") -> list[pathlib.Path]:
    """Join the ``shards`` shards of a reproduction (each trained by ``reproduce(..., shard=(k, shards))``) and
    write its files into ``out``: the sweeps, their final evaluations and one file per figure, as one
    :func:`~softmax_as_linear.experiments.reproduce.reproduce` of every seed writes them (Figures 1 and 5,
    which have no seeds, are computed here). A :class:`ShardError` names a missing or unfinished shard
    and the command that completes it; nothing is written then."""
    names = figures_of(figure)
    check_options(preset, None, seeds, sampler, rng, (1, shards))
    out = results_folder() if out is None else pathlib.Path(out)
    start = time.monotonic()
    training = [name for name in names if name in TRAINING_FIGURES]

    def command(k):
        return shard_command(training, preset, seeds, sampler, k, shards, out, rng)

    needed = list(dict.fromkeys(sweep_of(name, sampler) for name in training))
    for covariance, used in needed:  # every shard of every sweep is there before anything is written
        for k in range(1, shards + 1):
            if not (shard_folder(out, k, shards) / f"{sweep_stem(covariance, preset, used)}.npz").exists():
                raise ShardError(f"shard {k}/{shards} has not written its {covariance} sweep yet: run\n    {command(k)}")
    sweeps = {}
    for covariance, used in needed:
        merged, evaluation, origins = _merge_sweep(covariance, used, preset, seeds, out, shards, command, rng)
        sweeps[covariance] = merged, evaluation, _merged_provenance(merged, preset, origins, time.monotonic() - start)
    written = []
    for name in names:
        if name in CONCENTRATION_FIGURES:
            data, used = concentration_figure(name, preset, device=resolve_device(device), progress=True), "paper"
        else:
            covariance, used = sweep_of(name, sampler)
            result, evaluation, origin = sweeps[covariance]
            data = {**figure_data(name, result, evaluation=evaluation, change_prompts=CHANGE_PROMPTS[preset],
                                  device=resolve_device(device)), "provenance": origin}
        written.append(save_json(out / figure_file(name, preset, used), data))
        print(f"wrote {written[-1]}", flush=True)
    return written


def run_shard(figures: list[str], options: dict, shard: tuple[int, int], threads: int = 1) -> list[str]:
    """One shard, as a launched job runs it: :func:`reproduce` with ``shard`` on ``threads`` torch threads
    (a CPU); returns the files written and whether each is complete."""
    import torch

    if resolve_device(options.get("device", "auto")).type == "cpu":
        torch.set_num_threads(threads)
    written = reproduce(figures, shard=shard, **options)
    return [(str(path), load_json(path).get("complete", True)) for path in written]


def launch(figure: str | list[str], shards: int, launcher: str = "local", preset: str = "lecture", device="auto",
           out=None, max_minutes: float | None = None, seeds: int | None = None, sampler: str = "paper",
           restart: bool = False, threads: int = 1, timeout_minutes: float = 24 * 60, slurm: dict | None = None,
           gpus_per_shard: int | None = None, rng: str = "auto") -> list[pathlib.Path]:
    """Train the ``shards`` shards of a reproduction as submitit jobs and merge them (see the module's docstring).

    ``launcher``: ``"slurm"`` (one job array; ``slurm`` holds submitit's ``slurm_*`` parameters without the
    prefix, for instance ``{"partition": "gpu", "additional_parameters": {"account": "me"}}``) or
    ``"local"`` (the shards as processes of this machine; with CUDA, shard ``k`` gets GPU ``k - 1`` modulo
    the GPUs there). ``timeout_minutes`` bounds each job; ``gpus_per_shard`` defaults to 1 on CUDA, else 0.
    Job logs go to ``<out>/shards/logs/``. Returns the merged files; a :class:`ShardError` names failed
    or unfinished shards (rerun the same call to resume them: finished shards are reused).
    """
    import submitit  # the optional extra: pip install softmax_as_linear[cluster]

    names = figures_of(figure)
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}; got {launcher!r}")
    check_options(preset, max_minutes, seeds, sampler, rng, (1, shards))
    out = results_folder() if out is None else pathlib.Path(out)
    training = [name for name in names if name in TRAINING_FIGURES]
    resolved = resolve_device(device) if launcher == "local" else None
    cuda = (resolved.type == "cuda") if resolved is not None else str(device) == "cuda"
    gpus = (1 if cuda else 0) if gpus_per_shard is None else gpus_per_shard
    executor = submitit.AutoExecutor(folder=out / "shards" / "logs" / "%j", cluster=launcher)
    executor.update_parameters(name="softmax_as_linear", timeout_min=int(timeout_minutes), gpus_per_node=gpus,
                               cpus_per_task=max(2, threads + 1), tasks_per_node=1, nodes=1,
                               **{f"slurm_{key}": value for key, value in (slurm or {}).items()})
    options = dict(preset=preset, device=device, out=out, max_minutes=max_minutes, seeds=seeds, sampler=sampler,
                   restart=restart, rng=rng)
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
    return merge(names, shards, preset, out, seeds, sampler, device, rng)
