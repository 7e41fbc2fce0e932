"""Every argument of the command line checked before anything is computed, in one table: exit code 2, a message
naming the option as typed on one line, then a pointer to the command's ``--help`` (not its usage), no traceback,
nothing written."""
import pytest
import torch

import softmax_as_linear.cli as cli

FIG2 = ["reproduce", "fig2", "--preset", "smoke"]
SHARDED = [*FIG2, "--seeds", "3", "--device", "cpu"]
BEYOND = ["reproduce", "beyond", "--preset", "smoke"]

TABLE = [
    ([], "", "the following arguments are required: COMMAND"),
    (["reproduce"], "reproduce", "the following arguments are required: FIGURE"),
    (["reproduce", "fig9"], "reproduce", "argument FIGURE: invalid choice: 'fig9'"),
    ([*FIG2, "--preset", "huge"], "reproduce", "argument --preset: invalid choice: 'huge'"),
    ([*FIG2, "--device", "tpu"], "reproduce", "argument --device: invalid choice: 'tpu'"),
    ([*FIG2, "--threads", "0"], "reproduce", "argument --threads: must be a positive integer, got '0'"),
    ([*FIG2, "--max-minutes", "0"], "reproduce", "argument --max-minutes: must be a positive number"),
    ([*FIG2, "--max-minutes", "-1"], "reproduce", "argument --max-minutes: must be a positive number"),
    ([*FIG2, "--max-minutes", "soon"], "reproduce", "argument --max-minutes: must be a positive number"),
    ([*FIG2, "--seeds", "0"], "reproduce", "argument --seeds: must be a positive integer"),
    ([*FIG2, "--seeds", "1001"], "reproduce", "argument --seeds: must be an integer from 1 to 1000"),
    ([*FIG2, "--sampler", "code"], "reproduce", "argument --sampler: invalid choice: 'code'"),
    ([*FIG2, "--rng", "mersenne"], "reproduce", "argument --rng: invalid choice: 'mersenne'"),
    ([*SHARDED, "--shard", "4/3"], "reproduce", "argument --shard: must be K/N"),
    ([*SHARDED, "--shard", "two"], "reproduce", "argument --shard: must be K/N"),
    ([*SHARDED, "--shard", "2/4"], "reproduce", "argument --shard: needs a seed at least per shard: 4 shards, and "
                                                "this reproduction has 3 seeds; add --seeds 4 or more"),
    ([*FIG2, "--shard", "1/2"], "reproduce", "argument --shard: needs a seed at least per shard: 2 shards, and this "
                                             "reproduction has 1 seed; add --seeds 2 or more"),
    ([*SHARDED, "--shards", "4"], "reproduce", "argument --shards: needs a seed at least per shard"),
    ([*SHARDED, "--launcher", "slurm"], "reproduce", "argument --launcher: needs --shards"),
    ([*SHARDED, "--shard", "1/3", "--shards", "3"], "reproduce", "not allowed with argument"),
    ([*SHARDED, "--slurm-option", "account"], "reproduce", "argument --slurm-option: must be KEY=VALUE"),
    ([*BEYOND, "--covariates", "cauchy"], "reproduce", "argument --covariates: invalid choice: 'cauchy'"),
    ([*BEYOND, "--law", "cauchy"], "reproduce", "argument --law: invalid choice: 'cauchy'"),
    ([*BEYOND, "--lengths", "30", "10"], "reproduce", "argument --lengths: must be a non-empty increasing sequence"),
    ([*BEYOND, "--lengths", "0"], "reproduce", "argument --lengths: must be a positive integer"),
    ([*FIG2, "--lengths", "10", "30"], "reproduce", "argument --lengths: applies to Chapter 6's sweeps only"),
    ([*FIG2, "--covariates", "uniform"], "reproduce", "argument --covariates: applies to Chapter 6's sweeps only"),
    (["merge", "fig2", "--preset", "smoke", "--shards", "2"], "merge",
     "argument --shards: needs a seed at least per shard: 2 shards, and this reproduction has 1 seed; add --seeds 2"),
    (["merge", "fig2", "--preset", "smoke"], "merge", "the following arguments are required: --shards"),
]


@pytest.mark.parametrize("argv, command, message", TABLE, ids=[" ".join(row[0]) or "(none)" for row in TABLE])
def test_bad_arguments_exit_2_naming_the_option(argv, command, message, tmp_path, run_cli):
    out = tmp_path / "out"
    code, stdout, err = run_cli(*argv, *(["--out", str(out)] if command else []))
    assert code == cli.EXIT_USAGE == 2
    assert message in err, err
    prog = f"python -m softmax_as_linear {command}".rstrip()
    *_, error, pointer = err.splitlines()
    assert error.startswith(f"{prog}: error: ") and message in error, err
    assert pointer == f"(see '{prog} --help')" and "usage:" not in err
    assert "Traceback" not in err and not out.exists()


def test_the_former_law_option_still_names_the_covariate_laws(capsys):
    """``--law`` was renamed ``--covariates``: still accepted, hidden from the help, with a note naming the new name."""
    parser = cli.build_parser()
    args = parser.parse_args([*BEYOND, "--law", "rademacher"])
    assert args.covariates == ["rademacher"] and "--law is now --covariates" in capsys.readouterr().err
    assert parser.parse_args([*BEYOND, "--covariates", "uniform", "rademacher"]).covariates == ["uniform", "rademacher"]
    with pytest.raises(SystemExit):
        parser.parse_args(["reproduce", "--help"])
    help_text = capsys.readouterr().out
    assert "--covariates" in help_text and "--law" not in help_text


@pytest.mark.skipif(torch.version.cuda is not None, reason="a PyTorch built with CUDA")
def test_cuda_on_a_cpu_only_pytorch_says_so(tmp_path, run_cli):
    code, _, err = run_cli(*FIG2, "--device", "cuda", "--out", str(tmp_path / "out"))
    assert code == 2 and "argument --device: the installed PyTorch" in err and "has no CUDA support" in err
    assert "TORCH_INDEX=" in err


def test_a_library_with_uncommitted_changes_needs_allow_dirty(tmp_path, run_cli, monkeypatch):
    monkeypatch.setattr("softmax_as_linear.experiments.reproduce.library_changes",
                        lambda: ["src/softmax_as_linear/theory/models.py"])
    code, _, err = run_cli(*FIG2, "--device", "cpu", "--out", str(tmp_path))
    assert code == 2 and "uncommitted changes (src/softmax_as_linear/theory/models.py)" in err and "--allow-dirty" in err
    assert not list(tmp_path.iterdir())
    code, _, err = run_cli("reproduce", "fig1", "--preset", "smoke", "--device", "cpu", "--out", str(tmp_path),
                           "--allow-dirty")
    assert code == 0, err
    import json

    assert json.loads((tmp_path / "fig1_smoke.json").read_text())["provenance"]["allow_dirty"] is True


def test_launching_shards_without_submitit_names_the_extra(run_cli, monkeypatch, tmp_path):
    """After `make lab` (no submitit), `--shards N` is one sentence naming the extra to install, exit code 2, and
    nothing computed; not an import traceback."""
    import sys

    monkeypatch.setitem(sys.modules, "submitit", None)  # not installed
    code, out, err = run_cli("reproduce", "fig2", "--preset", "smoke", "--seeds", "2", "--device", "cpu",
                             "--shards", "2", "--out", str(tmp_path))
    assert code == 2 and "Traceback" not in err and 'pip install -e ".[cluster]"' in err and "--shard K/N" in err
    assert len(err.strip().splitlines()) <= 3 and not list(tmp_path.iterdir())
