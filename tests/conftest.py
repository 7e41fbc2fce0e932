"""Every test starts from the same seed; under pytest-xdist each worker computes on one thread."""
import os
import sys

# jsonschema's optional IRI format checker (rfc3987_syntax, installed with JupyterLab's dependencies) builds its
# parser when it is imported: seconds in every worker that imports nbformat. No test validates an IRI, so jsonschema
# is left without that one checker, as on a machine where the package is not installed.
sys.modules.setdefault("rfc3987_syntax", None)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `-n N` runs N workers, one per core: a worker with many threads would compete with the others.
    # Set before torch is imported, so that its thread pools (and those of any subprocess) start with one.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _deterministic():
    import torch  # here rather than at the top: xdist's controller, which only hands out the tests, needs none

    # torch.manual_seed also queues a seed call for every accelerator not yet started, with the call's stack formatted
    # (milliseconds at pytest's depth, thousands of tests): where there is no CUDA, only the CPU's generator exists.
    if torch.cuda.is_available():
        torch.manual_seed(0)
    else:
        torch.default_generator.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _no_train_cache(monkeypatch):
    """The tests train for real: a sweep stored by `make nbval` or `make live` (SOFTMAX_AS_LINEAR_TRAIN_CACHE) must
    never stand in for the training a test checks (tests/engine/test_train_cache.py sets its own folder)."""
    monkeypatch.delenv("SOFTMAX_AS_LINEAR_TRAIN_CACHE", raising=False)
