"""The cache of trained sweeps: a hit returns exactly what training returned, and any change to what it is keyed on
(the configuration, the device, the path, the versions, the source of any module training imports) trains again."""
import shutil

import numpy as np
import pytest
import torch

from softmax_as_linear.engine import train_cache
from softmax_as_linear.engine.sweep import TrainConfig
from softmax_as_linear.engine.train import train

TINY = TrainConfig(lengths=(4, 9), seeds=(0, 1), steps=4, record_every=2, eval_prompts=16, batch_size=8)
CPU = torch.device("cpu")


def _same(a, b, seconds=True):
    assert a.config == b.config and a.engine_path == b.engine_path and a.complete == b.complete
    assert a.seconds == b.seconds or not seconds
    for field in ("steps", "train_risk", "eval_risk", "eval_sd", "diverged_at"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), field
    assert a.params.keys() == b.params.keys()
    for name in a.params:
        assert a.params[name].dtype == b.params[name].dtype and np.array_equal(a.params[name], b.params[name]), name


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(train_cache.ENV, str(tmp_path / "sweeps"))
    return tmp_path / "sweeps"


@pytest.fixture(scope="module")
def tiny_stored(tmp_path_factory):
    """``(result, file)``: TINY trained once for the module with the cache in use, and the file it stored."""
    folder = tmp_path_factory.mktemp("stored")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(train_cache.ENV, str(folder))
        result = train(TINY, device="cpu")
    (file,) = folder.glob("sweep_*.npz")
    return result, file


@pytest.fixture
def cache_holding_tiny(cache, tiny_stored):
    """The cache as a first ``train(TINY)`` leaves it (its file copied); returns the folder and what was trained."""
    result, file = tiny_stored
    cache.mkdir(parents=True)
    shutil.copy(file, cache / file.name)
    return cache, result


def _trained_again(monkeypatch) -> list:
    """Counts the steppers built from now on (a cache hit builds none)."""
    import softmax_as_linear.engine.train as module

    built, make = [], module.make_stepper
    monkeypatch.setattr(module, "make_stepper", lambda *a, **k: built.append(1) or make(*a, **k))
    return built


def test_without_the_variable_nothing_is_stored(tmp_path, monkeypatch):
    monkeypatch.delenv(train_cache.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    train(TINY, device="cpu")
    assert train_cache.folder() is None and list(tmp_path.iterdir()) == []


def test_a_hit_returns_exactly_what_training_returned(cache, monkeypatch):
    trained = train(TINY, device="cpu")
    assert len(list(cache.glob("sweep_*.npz"))) == 1
    built = _trained_again(monkeypatch)
    again = train(TINY, device="cpu")
    assert built == []
    _same(trained, again)
    monkeypatch.delenv(train_cache.ENV)
    _same(train(TINY, device="cpu"), trained, seconds=False)  # what training again gives (seconds aside)


@pytest.mark.parametrize("change", [dict(seeds=(0, 2)), dict(lr=0.011), dict(steps=6), dict(covariates="uniform"),
                                    dict(dtype="float64"), dict(models=("softmax",))])
def test_another_configuration_trains_again(cache_holding_tiny, monkeypatch, change):
    cache, _ = cache_holding_tiny
    built = _trained_again(monkeypatch)
    other = train(TINY.replace(**change), device="cpu")
    assert built == [1] and other.config == TINY.replace(rng="torch", **change)
    assert len(list(cache.glob("sweep_*.npz"))) == 2


def test_calls_that_are_not_plain_runs_never_use_it(cache_holding_tiny, monkeypatch):
    cache, _ = cache_holding_tiny
    built = _trained_again(monkeypatch)
    stopped = train(TINY, device="cpu", should_stop=lambda: True)
    assert not stopped.complete
    train(TINY, device="cpu", checkpoint=cache.parent / "state.pt")
    weights = {k: torch.zeros(TINY.D, TINY.D) for k in ("W_Q", "W_K", "W_V")} | {"W_O": torch.zeros(1, TINY.D)}
    train(TINY.replace(init="given"), device="cpu", init_weights=weights)
    assert built == [1, 1, 1] and len(list(cache.glob("sweep_*.npz"))) == 1


def test_the_key_names_device_path_versions_and_source(monkeypatch):
    cfg = TINY.replace(rng="torch")
    base = train_cache.key(cfg, CPU)
    assert train_cache.key(cfg, CPU) == base
    assert train_cache.key(cfg, CPU, path="cpu") != base
    assert train_cache.key(cfg.replace(noise_var=0.5), CPU) != base
    monkeypatch.setattr(torch, "__version__", torch.__version__ + "x")
    assert train_cache.key(cfg, CPU) != base
    monkeypatch.undo()
    monkeypatch.setattr(np, "__version__", np.__version__ + "x")
    assert train_cache.key(cfg, CPU) != base
    monkeypatch.undo()
    monkeypatch.setattr(train_cache, "_running", "the engine as another process imported it")
    assert train_cache.key(cfg, CPU) != base
    monkeypatch.undo()
    # strict mode makes a fallback an error: a sweep trained without it may come from a path that fell back
    from softmax_as_linear.engine.gpu import fallback

    monkeypatch.delenv(fallback.STRICT_ENV, raising=False)
    lenient = train_cache.key(cfg, CPU)
    monkeypatch.setenv(fallback.STRICT_ENV, "1")
    assert train_cache.key(cfg, CPU) != lenient


def test_the_source_is_the_one_this_process_imported():
    """Taken once: a file edited after the import (the kernel not restarted) cannot label the old code's sweeps."""
    assert train_cache.running_digest() == train_cache.source_digest()
    assert train_cache.key(TINY.replace(rng="torch"), CPU) == train_cache.key(TINY.replace(rng="torch"), CPU,
                                                                             root=train_cache.PACKAGE)


def test_every_module_training_imports_is_in_the_source():
    names = {p.relative_to(train_cache.PACKAGE).as_posix() for p in train_cache.engine_sources()}
    for needed in ("engine/train.py", "engine/__init__.py", "engine/tensor_step.py", "engine/batched.py",
                   "engine/data.py", "engine/sweep.py", "engine/gpu/prompt_kernel.py", "engine/gpu/counter_stream.py",
                   "engine/train_cache.py", "theory/regression.py", "theory/covariates.py", "theory/models.py",
                   "core/seeding.py", "registry.py"):
        assert needed in names, needed
    # modules training never imports: editing them keeps the cache (figures, panels, experiments, chapters' theory)
    assert not {n for n in names if n.split("/")[0] in ("figures", "panels", "experiments")}
    assert "__init__.py" not in names


def _copy(tmp_path):
    copy = tmp_path / "softmax_as_linear"
    shutil.copytree(train_cache.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory):
    """``(copy, key)``: one copy of the package for the module, and the key of training TINY with its source."""
    copy = _copy(tmp_path_factory.mktemp("package"))
    assert train_cache.source_digest(copy) == train_cache.source_digest()
    return copy, train_cache.key(TINY.replace(rng="torch"), CPU, root=copy)


@pytest.mark.parametrize("module", ["engine/tensor_step.py", "engine/gpu/prompt_kernel.py", "theory/regression.py",
                                    "core/seeding.py", "registry.py", "engine/__init__.py"])
def test_editing_a_module_training_imports_changes_the_key(package_copy, module):
    copy, before = package_copy
    original = (copy / module).read_bytes()
    try:
        with open(copy / module, "a") as file:
            file.write("\n# one more line\n")
        assert train_cache.key(TINY.replace(rng="torch"), CPU, root=copy) != before
    finally:
        (copy / module).write_bytes(original)  # the next case edits the package as copied


def test_a_module_imported_inside_a_function_is_followed(tmp_path):
    copy = _copy(tmp_path)
    (copy / "engine" / "helper_only_imported_late.py").write_text("VALUE = 1\n")
    with open(copy / "engine" / "records.py", "a") as file:
        file.write("\n\ndef _late():\n    from .helper_only_imported_late import VALUE\n    return VALUE\n")
    names = {p.relative_to(copy).as_posix() for p in train_cache.engine_sources(copy)}
    assert "engine/helper_only_imported_late.py" in names


def test_editing_a_module_training_does_not_import_keeps_the_key(tmp_path):
    copy = _copy(tmp_path)
    before = train_cache.source_digest(copy)
    with open(copy / "figures" / "paper.py", "a") as file:
        file.write("\n# one more line\n")
    assert train_cache.source_digest(copy) == before


def test_a_damaged_or_foreign_file_is_trained_again(cache_holding_tiny, monkeypatch):
    cache, trained = cache_holding_tiny
    (file,) = cache.glob("sweep_*.npz")
    file.write_bytes(b"not a sweep")
    built = _trained_again(monkeypatch)
    _same(train(TINY, device="cpu"), trained, seconds=False)
    assert built == [1]
    # a file holding another configuration under this key is not returned
    other = train(TINY.replace(lr=0.02), device="cpu")
    (second,) = set(cache.glob("sweep_*.npz")) - {file}
    shutil.copy(second, file)
    assert train(TINY, device="cpu").config.lr == TINY.lr and built == [1, 1, 1]
    assert other.config.lr == 0.02
