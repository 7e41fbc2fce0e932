"""What the command-line tests share: a results folder in tmp, tiny presets, a run of the command, and a run split
into two shards and merged."""
import json

import pytest

import softmax_as_linear.cli as cli
from softmax_as_linear.experiments.presets import sweep_config

TINY = dict(lengths=(5, 20), steps=30, record_every=10, eval_prompts=32, batch_size=16)


@pytest.fixture(autouse=True)
def results_in_tmp(tmp_path, monkeypatch):
    # A command run without --out writes to the results folder: never the repository's from a test.
    monkeypatch.setenv("SOFTMAX_AS_LINEAR_RESULTS", str(tmp_path / "results-folder"))


@pytest.fixture
def tiny_presets(monkeypatch) -> dict:
    """The lecture preset's sweeps shrunk to two lengths and 30 steps; returns the settings changed."""
    monkeypatch.setattr("softmax_as_linear.experiments.presets.sweep_config",
                        lambda preset, covariance="isotropic", **kw: sweep_config(preset, covariance, **{**TINY, **kw}))
    return TINY


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*argv) -> (exit code, stdout, stderr)``: the command as a script sees it."""
    def run(*argv) -> tuple[int, str, str]:
        try:
            code = cli.main(list(argv))
        except SystemExit as stop:
            code = stop.code
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return run


@pytest.fixture
def one_process_and_two_shards(tmp_path, run_cli):
    """``one_process_and_two_shards(run, file) -> (one, joined, shard_errors)``: the command ``run`` (its argv,
    ``reproduce`` first) in one process, then as shards 2/2 and 1/2 merged by ``merge``, which first refuses to merge
    before the shards exist; returns the file ``file`` each wrote (the merged one without its provenance, checked
    to name both shards) and what each shard printed on stderr."""
    def compare(run: list[str], file: str) -> tuple[dict, dict, list[str]]:
        single, sharded = tmp_path / "single", tmp_path / "sharded"
        assert run_cli(*run, "--out", str(single))[0] == 0
        merge = ["merge", *run[1:], "--shards", "2", "--out", str(sharded)]
        code, out, err = run_cli(*merge)
        assert code == cli.EXIT_ERROR and "--shard 1/2" in err
        shard_errors = []
        for k in (2, 1):
            code, out, err = run_cli(*run, "--shard", f"{k}/2", "--out", str(sharded))
            assert code == 0, err
            shard_errors.append(err)
        code, out, err = run_cli(*merge)
        assert code == 0, err
        one, joined = (json.loads((folder / file).read_text()) for folder in (single, sharded))
        origin = joined.pop("provenance")
        one.pop("provenance")
        assert [s["shard"] for s in origin["shards"]] == ["1/2", "2/2"] and origin["run"] == "smoke"
        return one, joined, shard_errors
    return compare


@pytest.fixture(autouse=True)
def commit_named(monkeypatch):
    """The tests run whatever the state of the checkout: the commit is named (as on a machine without git), so the
    library's uncommitted changes are unknown and allowed, in this process and in the commands it starts."""
    monkeypatch.setenv("SOFTMAX_AS_LINEAR_COMMIT", "tested-checkout")
