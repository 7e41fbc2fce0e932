"""The registry of reproductions: every figure and chapter is one object in it, and a reproduction added to it is run,
checked, merged and listed in the help without any other change."""
import pytest

from softmax_as_linear import cli, registry
from softmax_as_linear.core.artifacts import load_json, save_json
from softmax_as_linear.experiments import chapters, shards
from softmax_as_linear.experiments.reproduce import check_options, figures_of, reproduce


class Toy(chapters.Reproduction):
    """A reproduction of two fixed seeds that writes what it was asked."""

    name, title, fixed_seeds = "toy", "the toy reproduction", True
    summary = "a toy, written as toy_<preset>.json"
    example = "reproduce toy --preset smoke                    # a toy"

    def seeds(self, preset, seeds=None):
        return (0, 1)

    def file(self, preset, seeds=None, **options):
        return f"toy_{preset}.json"

    def reproduce(self, preset, device, out, deadline, seeds, restart, shard, dirty, **options):
        return [save_json(out / self.file(preset), {"complete": True, "shard": shard, "device": str(device)})]

    def merged(self, preset, seeds, n, out, command, dirty, start):
        return {"complete": True, "joined": n, "first": command(1)}


def test_every_figure_and_chapter_is_one_reproduction_of_the_registry():
    names = list(chapters.REPRODUCTIONS)
    assert names == [*registry.FIGURES, "beyond", "depth", "nonlinear", "nonlinear_depth", "nonlinear_window",
                     "nonlinear_optima"]
    assert all(isinstance(r, chapters.Reproduction) and r.name == name for name, r in chapters.REPRODUCTIONS.items())
    assert [name for name, r in chapters.REPRODUCTIONS.items() if r.in_all] == list(registry.FIGURES)
    assert figures_of("all") == list(registry.FIGURES)
    assert [name for name, r in chapters.REPRODUCTIONS.items() if not r.sharded] == ["fig1", "fig5", "nonlinear_optima"]


def test_a_reproduction_added_to_the_registry_is_run_checked_and_merged(monkeypatch, tmp_path):
    monkeypatch.setitem(chapters.REPRODUCTIONS, "toy", Toy())
    assert figures_of(["toy", "fig2"]) == ["fig2", "toy"]
    [path] = reproduce("toy", "smoke", device="cpu", out=tmp_path, allow_dirty=True)
    assert path == tmp_path / "toy_smoke.json" and load_json(path)["shard"] is None
    [path] = reproduce("toy", "smoke", device="cpu", out=tmp_path, shard=(2, 2), allow_dirty=True)
    assert path == tmp_path / "shards" / "2-of-2" / "toy_smoke.json" and load_json(path)["shard"] == [2, 2]
    with pytest.raises(ValueError, match="seeds, sampler and rng do not apply to the toy reproduction"):
        check_options("smoke", None, seeds=3, names=["toy"])
    with pytest.raises(ValueError, match="use 2 shards or fewer"):
        check_options("smoke", None, shard=(1, 3), names=["toy"])
    with pytest.raises(ValueError, match=r"covariates applies to Chapter 6's sweeps only \(reproduce beyond\)"):
        check_options("smoke", None, names=["toy"], covariates=["uniform"])
    [merged] = shards.merge("toy", 2, "smoke", out=tmp_path, allow_dirty=True)
    data = load_json(merged)
    assert merged == tmp_path / "toy_smoke.json" and data["joined"] == 2
    assert data["first"].startswith("python -m softmax_as_linear reproduce toy --preset smoke")
    assert "python -m softmax_as_linear reproduce toy --preset smoke" in cli._examples()
