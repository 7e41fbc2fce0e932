"""The one engine of reproductions: a toy reproduction of two stages, declared in one class and added to the registry
by one line, gets its command, up-to-date short-cut, completeness, restart, partial message, reader and shard merge
with nothing else written; and the registry holds every figure and chapter."""
import json

import numpy as np
import pytest

from softmax_as_linear import cli, registry
from softmax_as_linear.core.artifacts import load_json
from softmax_as_linear.experiments import file_names, pipeline, result_files, shards
from softmax_as_linear.experiments.reproduce import check_options, figures_of, reproduce
from softmax_as_linear.experiments.reproductions import REPRODUCTIONS
from softmax_as_linear.experiments.shard_files import ShardError


class Toy(pipeline.Staged):
    """Two stages of the log-window stepper: a short one, then a longer one at another rate (``second_lr``)."""

    name, title = "toy", "the toy reproduction"
    summary = "a toy of two stages, written as toy_<preset>.json"
    example = "reproduce toy --preset smoke                    # a toy"
    fields = ("per_seed", "provenance")
    second_lr = 0.05

    def seeds(self, preset, seeds=None):
        return (0, 1)

    def stages(self, preset, seeds, device):
        from softmax_as_linear.experiments.nonlinear_window import train_windows, window_settings

        def stage(name, settings):
            return pipeline.Stage(name, name, f"the toy's {name}", settings, f"toy_{preset}_{name}.pt", settings.steps,
                                  lambda done, **kw: train_windows(settings, device, **kw),
                                  lambda trained, done: {"w": trained[0].weights()["theta"][:, :, 0, 0].exp().numpy()})

        common = dict(lengths=(5,), seeds=tuple(seeds), batch_size=4, record_every=2, held_out_prompts=8,
                      final_prompts=8)
        return [stage("first", window_settings("smoke", steps=4, **common)),
                stage("second", window_settings("smoke", steps=8, lr=self.second_lr, **common))]

    def assemble(self, preset, seeds, readings):
        return {"per_seed": {"seeds": list(seeds), "first": readings["first"]["w"].tolist(),
                             "second": readings["second"]["w"].tolist()}}


@pytest.fixture
def toy(monkeypatch):
    toy = Toy()
    monkeypatch.setitem(REPRODUCTIONS, "toy", toy)  # the one registry line
    return toy


def test_every_figure_and_chapter_is_one_reproduction_of_the_registry():
    names = list(REPRODUCTIONS)
    assert names == [*registry.FIGURES, "beyond", "depth", "nonlinear", "nonlinear_depth", "nonlinear_window",
                     "nonlinear_optima"]
    assert all(isinstance(r, pipeline.Reproduction) and r.name == name for name, r in REPRODUCTIONS.items())
    assert [name for name, r in REPRODUCTIONS.items() if r.in_all] == list(registry.FIGURES)
    assert figures_of("all") == list(registry.FIGURES)
    assert [name for name, r in REPRODUCTIONS.items() if not r.sharded] == ["fig1", "fig5", "nonlinear_optima"]
    staged = [name for name, r in REPRODUCTIONS.items() if isinstance(r, pipeline.Staged)]
    assert staged == ["depth", "nonlinear", "nonlinear_depth", "nonlinear_window"]


def test_a_declared_reproduction_gets_its_command_short_cut_restart_and_reader(toy, tmp_path, capsys):
    assert figures_of(["toy", "fig2"]) == ["fig2", "toy"]
    assert "python -m softmax_as_linear reproduce toy --preset smoke" in cli._examples()
    assert result_files.command_for("toy_smoke.json") == "python -m softmax_as_linear reproduce toy --preset smoke"
    with pytest.raises(FileNotFoundError, match="reproduce toy --preset smoke"):
        toy.read("smoke", tmp_path, required=True)
    with pytest.raises(ValueError, match="seeds, sampler and rng do not apply to the toy reproduction"):
        check_options("smoke", None, seeds=3, names=["toy"])
    [path] = reproduce("toy", "smoke", device="cpu", out=tmp_path, allow_dirty=True)
    data = toy.read("smoke", tmp_path, required=True)
    assert path == tmp_path / "toy_smoke.json" and data["complete"]
    assert np.asarray(data["per_seed"]["second"]).shape == (2, 1)
    assert list(data["provenance"]["stages"]) == ["first", "second"]
    assert data["provenance"]["stages"]["second"]["lr"] == 0.05 and data["provenance"]["seeds"] == [0, 1]
    capsys.readouterr()
    reproduce("toy", "smoke", device="cpu", out=tmp_path, allow_dirty=True)
    assert "up to date" in capsys.readouterr().out
    toy.second_lr = 0.02  # the second stage changed: not up to date, and its old checkpoint is refused
    with pytest.raises(Exception, match="other settings of the toy's second"):
        reproduce("toy", "smoke", device="cpu", out=tmp_path, allow_dirty=True)
    reproduce("toy", "smoke", device="cpu", out=tmp_path, restart=True, allow_dirty=True)
    assert load_json(path)["provenance"]["stages"]["second"]["lr"] == 0.02
    path.write_text('{"complete": tr')  # damaged: written again from the checkpoints, said on stdout
    capsys.readouterr()
    reproduce("toy", "smoke", device="cpu", out=tmp_path, allow_dirty=True)
    out = capsys.readouterr().out
    assert "writing it again from its checkpoints" in out and "reusing the finished the toy's second" in out
    assert load_json(path)["complete"]


def test_a_declared_reproduction_stopped_in_its_second_stage_is_partial_and_resumes(toy, tmp_path, monkeypatch):
    real = pipeline.train_stage

    def stop_in_the_second(what, checkpoint, key, steps, train, device, deadline=None, restart=False):
        return real(what, checkpoint, key, steps, train, device, 0.0 if "second" in what else deadline, restart)

    monkeypatch.setattr(pipeline, "train_stage", stop_in_the_second)
    [path] = reproduce("toy", "smoke", device="cpu", out=tmp_path, allow_dirty=True)
    data = load_json(path)
    assert not data["complete"] and data["stopped_in"] == "second" and data["stages_complete"] == ["first"]
    with pytest.raises(result_files.PartialResultError, match=r"first complete, stopped in second at step \d of 8"):
        toy.read("smoke", tmp_path, required=True)
    assert toy.read("smoke", tmp_path)["complete"] is False  # returned as it is, unless required
    monkeypatch.setattr(pipeline, "train_stage", real)
    reproduce("toy", "smoke", device="cpu", out=tmp_path, allow_dirty=True)
    assert toy.read("smoke", tmp_path, required=True)["complete"]


def test_a_declared_reproduction_merges_its_shards_and_checks_every_stage(toy, tmp_path):
    whole = tmp_path / "whole"
    reproduce("toy", "smoke", device="cpu", out=whole, allow_dirty=True)
    for k in (1, 2):
        [path] = reproduce("toy", "smoke", device="cpu", out=tmp_path, shard=(k, 2), allow_dirty=True)
        assert path == tmp_path / "shards" / f"{k}-of-2" / "toy_smoke.json"
        assert load_json(path)["provenance"]["shard"] == f"{k}/2"
    [merged] = shards.merge("toy", 2, "smoke", out=tmp_path, allow_dirty=True)
    joined, single = load_json(merged), load_json(whole / "toy_smoke.json")
    assert joined["per_seed"] == single["per_seed"]  # bit for bit: every seed draws from its own streams
    assert joined["provenance"]["stages"] == single["provenance"]["stages"]
    assert [s["shard"] for s in joined["provenance"]["shards"]] == ["1/2", "2/2"]
    # shard 2 trained with another second stage: the merge names that stage, and writes nothing
    toy.second_lr = 0.02
    reproduce("toy", "smoke", device="cpu", out=tmp_path, shard=(2, 2), restart=True, allow_dirty=True)
    toy.second_lr = 0.05
    merged.unlink()
    with pytest.raises(ShardError, match=r"shard 2/2 .* has other lr in its stage 'second'"):
        shards.merge("toy", 2, "smoke", out=tmp_path, allow_dirty=True)
    assert not merged.exists()


def test_one_up_to_date_rule_compares_every_stage_and_the_shard():
    recorded = {"first": {"steps": 4}, "second": {"steps": 8}}
    data = {"complete": True, "provenance": {"stages": recorded}}
    assert pipeline.same_stages(data, recorded)
    assert not pipeline.same_stages(data, {**recorded, "second": {"steps": 9}})
    assert not pipeline.same_stages(data, recorded, "1/2")
    assert not pipeline.same_stages({"complete": True, "provenance": {"settings": {"steps": 4}}}, recorded)
    assert json.dumps(file_names.progress({"stopped_in": "second", "stopped_at": [4, 8], "stages_complete": []})) \
        == '"step 4 of 8"'


@pytest.mark.parametrize("name", ["depth", "nonlinear", "nonlinear_depth", "nonlinear_window"])
def test_the_committed_file_of_every_staged_reproduction_is_up_to_date(name):
    """What the repository ships is what its command would write: a rerun of the lecture preset says "up to date"."""
    reproduction = REPRODUCTIONS[name]
    data = reproduction.read("lecture", required=True)
    stages_ = reproduction.stages("lecture", reproduction.seeds("lecture"), "cpu")
    assert data["complete"] and pipeline.same_stages(data, {s.name: s.recorded() for s in stages_})
