"""What the command-line tests share: a results folder in tmp, tiny presets, a run of the command, and a run split
into two shards and merged; and a run shared by several tests, made once."""
import contextlib
import io
import json
import shutil

import pytest
import torch

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


def _main(*argv) -> int:
    try:
        return cli.main(list(argv))
    except SystemExit as stop:
        return stop.code


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*argv) -> (exit code, stdout, stderr)``: the command as a script sees it."""
    def run(*argv) -> tuple[int, str, str]:
        code = _main(*argv)
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return run


def run_outside_a_test(*argv) -> tuple[int, str, str]:
    """``run_cli`` for a run shared by several tests (not captured by any one test's capsys)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _main(*argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory):
    """``shared_run(key, make, into) -> what make returned``: ``make(out, run, patch)`` (``run`` as :func:`run_cli`,
    ``patch`` a ``MonkeyPatch`` undone after it) runs its commands once in a session for ``key``, writing into a
    folder ``out``, under the settings of the test that first asks for ``key`` (its fixtures' patches, which the key
    names); the files it wrote are then copied into ``into`` (a test's own ``tmp_path``, which the test may damage) at
    every call."""
    done = {}

    def get(key, make, into):
        if key not in done:
            base = tmp_path_factory.mktemp("shared")
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("SOFTMAX_AS_LINEAR_RESULTS", str(base / "results-folder"))
                torch.manual_seed(0)
                done[key] = base / "out", make(base / "out", run_outside_a_test, patch)
        folder, made = done[key]
        shutil.copytree(folder, into, dirs_exist_ok=True)
        return made
    return get


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
