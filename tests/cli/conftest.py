"""What the command-line tests share: a results folder in tmp, tiny presets, and a run of the command."""
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
    monkeypatch.setattr("softmax_as_linear.experiments.reproduce.sweep_config",
                        lambda preset, covariance, **kw: sweep_config(preset, covariance, **{**TINY, **kw}))
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


@pytest.fixture(autouse=True)
def commit_named(monkeypatch):
    """The tests run whatever the state of the checkout: the commit is named (as on a machine without git), so the
    library's uncommitted changes are unknown and allowed, in this process and in the commands it starts."""
    monkeypatch.setenv("SOFTMAX_AS_LINEAR_COMMIT", "tested-checkout")
