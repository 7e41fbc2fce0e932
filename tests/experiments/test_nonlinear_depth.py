"""Chapter 8's second layer: one- and two-layer attention trained on the nonlinear task, its file and its reading."""
import numpy as np
import pytest
import torch

from softmax_as_linear.core.artifacts import load_json
from softmax_as_linear.experiments import nonlinear, nonlinear_depth
from softmax_as_linear.experiments.reproduce import check_options, reproduce
from softmax_as_linear.experiments.result_files import command_for, nonlinear_depth_file


def test_the_task_is_chapter_8s():
    settings = nonlinear_depth.nonlinear_depth_settings("smoke")
    one_layer = nonlinear.nonlinear_config("smoke").task()
    assert repr(settings.task()) == repr(one_layer)
    assert torch.equal(settings.task().omega, one_layer.omega) and torch.equal(settings.task().phase, one_layer.phase)
    with pytest.raises(ValueError, match="decay_at"):
        nonlinear_depth.nonlinear_depth_settings("smoke", decay_at=0.0)


def test_reproduce_writes_a_paired_file_with_provenance_and_resumes(tmp_path):
    written = reproduce("nonlinear_depth", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)
    assert written == [tmp_path / nonlinear_depth_file("smoke")]
    data = load_json(written[0])
    prov = data["provenance"]
    assert {"device", "torch", "commit", "wall_seconds", "settings", "seeds", "engine_path", "date"} <= set(prov)
    assert prov["engine_path"] == "deep" and prov["settings"]["labels"] == "cosine" and data["complete"]
    per = data["per_seed"]
    risk = {name: np.asarray(per["risk"][name]) for name in data["models"]}
    assert risk["softmax_2"].shape == (2, 2) and np.isfinite(risk["softmax_2"]).all()
    # the paired difference is the difference of the two risks on the same prompts
    assert np.allclose(per["difference"]["second_layer_softmax"], risk["softmax_2"] - risk["softmax_1"])
    assert np.asarray(per["windows"]["softmax_2"]).shape == (2, 2, 2)  # (seeds, lengths, layers)
    assert np.asarray(per["windows"]["softmax_1"])[..., 1].max() == 0  # a one-layer column's second layer stays 0
    effect = nonlinear_depth.second_layer_effect(data)
    assert effect["mean"].shape == effect["se"].shape == (2,)
    assert np.allclose(effect["mean"], effect["two_layers"] - effect["one_layer"])
    again = load_json(reproduce("nonlinear_depth", preset="smoke", device="cpu", out=tmp_path, allow_dirty=True)[0])
    assert again["per_seed"]["risk"] == per["risk"]  # resumed from the finished checkpoint: no training


def test_options_and_command():
    for option in (dict(seeds=3), dict(rng="philox")):
        with pytest.raises(ValueError, match="nonlinear_depth"):
            check_options("lecture", None, names=["nonlinear_depth"], **option)
    check_options("lecture", None, names=["nonlinear_depth"], shard=(3, 3))  # the lecture preset's three seeds
    with pytest.raises(ValueError, match="use 3 shards or fewer"):
        check_options("lecture", None, names=["nonlinear_depth"], shard=(1, 4))
    assert command_for("nonlinear_depth_lecture.json").endswith("reproduce nonlinear_depth --preset lecture")
    assert command_for("nonlinear_lecture.json").endswith("reproduce nonlinear --preset lecture")
