"""A reproduction split into shards of seeds: by hand (--shard K/N, then merge) and launched through submitit's
local executor (--shards N --launcher local); the merged files equal those of one process, provenance aside."""
import json
import pathlib

import numpy as np
import pytest

import softmax_as_linear.cli as cli
from softmax_as_linear.engine.sweep import load_sweep
from softmax_as_linear.experiments.presets import shard_seeds

SMOKE = ["--preset", "smoke", "--seeds", "3", "--device", "cpu"]


def _without_provenance(path: pathlib.Path) -> str:
    data = json.loads(path.read_text())
    data.pop("provenance")
    return json.dumps(data, sort_keys=True)


def _assert_same_files(single: pathlib.Path, merged: pathlib.Path, figures, stems):
    for name in figures:
        assert _without_provenance(merged / name) == _without_provenance(single / name), name
    for stem in stems:
        one, joined = load_sweep(single / f"{stem}.npz"), load_sweep(merged / f"{stem}.npz")
        assert joined.config == one.config
        for field in ("steps", "train_risk", "eval_risk", "eval_sd", "diverged_at"):
            np.testing.assert_array_equal(getattr(joined, field), getattr(one, field), err_msg=field)
        for name in one.params:
            np.testing.assert_array_equal(joined.params[name], one.params[name], err_msg=name)
        a, b = (np.load(folder / f"{stem}_final.npz") for folder in (single, merged))
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_shard_seeds_split_the_seeds_in_order():
    seeds = (327, 0, 1, 2, 3, 4, 5)
    for n in range(1, len(seeds) + 1):
        parts = [shard_seeds(seeds, k, n) for k in range(1, n + 1)]
        assert sum(parts, ()) == seeds
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    with pytest.raises(ValueError, match="shard"):
        shard_seeds(seeds, 3, 8)


@pytest.mark.slow
def test_shards_by_hand_merge_into_the_files_of_one_process(tmp_path, run_cli):
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    figures = ["fig2", "fig3", "fig4", "fig6"]
    code, out, err = run_cli("reproduce", *figures, *SMOKE, "--sampler", "published", "--out", str(single))
    assert code == 0, out + err
    code, out, err = run_cli("merge", *figures, *SMOKE, "--sampler", "published", "--shards", "3", "--out", str(sharded))
    assert code == cli.EXIT_ERROR
    assert "shard 1/3" in out + err and "--shard 1/3" in out + err and not list(sharded.glob("fig*"))  # nothing merged yet
    for k in (3, 1, 2):  # in any order
        code, out, err = run_cli("reproduce", *figures, *SMOKE, "--sampler", "published", "--out", str(sharded),
                         "--shard", f"{k}/3")
        assert code == 0, out + err
        assert f"merge {' '.join(figures)}" in out + err
    assert sorted(p.name for p in (sharded / "shards").iterdir()) == ["1-of-3", "2-of-3", "3-of-3"]
    code, out, err = run_cli("merge", *figures, *SMOKE, "--sampler", "published", "--shards", "3", "--out", str(sharded))
    assert code == 0, out + err
    names = ["fig2_smoke.json", "fig3_smoke.json", "fig4_smoke.json", "fig6_smoke_published.json"]
    _assert_same_files(single, sharded, names, ["sweep_isotropic_smoke", "sweep_kms_published_smoke"])
    origin = json.loads((sharded / "fig2_smoke.json").read_text())["provenance"]
    assert [s["shard"] for s in origin["shards"]] == ["1/3", "2/3", "3/3"]
    assert [s["seeds"] for s in origin["shards"]] == [[327], [0], [1]]
    assert origin["settings"]["seeds"] == [327, 0, 1] and "merged" in origin
    single_origin = json.loads((single / "fig2_smoke.json").read_text())["provenance"]
    assert origin["engine_path"] == single_origin["engine_path"] == "cpu"  # the path the shards took, not "unknown"
    # The merged sweep is the one-process sweep: the same command without shards finds it up to date.
    code, out, err = run_cli("reproduce", "fig2", *SMOKE, "--out", str(sharded))
    assert code == 0 and "up to date" in out + err


def test_merge_names_an_unfinished_shard(tmp_path, run_cli, monkeypatch):
    from softmax_as_linear.experiments import reproduce

    for k in (1, 2):
        assert run_cli("reproduce", "fig2", *SMOKE, "--out", str(tmp_path), "--shard", f"{k}/2")[0] == 0
    clock = iter([0.0] + [1e9] * 10_000)  # shard 2, trained again, stops at its time limit
    monkeypatch.setattr(reproduce.time, "monotonic", lambda: next(clock))
    code, out, err = run_cli("reproduce", "fig2", *SMOKE, "--out", str(tmp_path), "--shard", "2/2", "--max-minutes", "1",
                     "--restart")
    assert code == cli.EXIT_PARTIAL
    code, out, err = run_cli("merge", "fig2", *SMOKE, "--out", str(tmp_path), "--shards", "2")
    assert code == cli.EXIT_ERROR and "shard 2/2 stopped at step" in out + err and "--shard 2/2" in err
    assert not (tmp_path / "fig2_smoke.json").exists()


@pytest.mark.slow
def test_shards_through_submitit_equal_one_process(tmp_path, run_cli):
    """The sweep split into two shards launched with submitit's local executor (two processes) and merged: the same
    files as one process, bit for bit on the CPU, provenance aside. One figure: the figures of a sweep are read from
    its merged file as in one process (the merge by hand, above, checks three)."""
    single, launched = tmp_path / "single", tmp_path / "launched"
    smoke = ["--preset", "smoke", "--seeds", "2", "--device", "cpu"]
    assert run_cli("reproduce", "fig2", *smoke, "--out", str(single))[0] == 0
    code, out, err = run_cli("reproduce", "fig2", *smoke, "--out", str(launched), "--shards", "2",
                             "--launcher", "local", "--job-minutes", "10")
    assert code == 0, out + err
    _assert_same_files(single, launched, ["fig2_smoke.json"], ["sweep_isotropic_smoke"])
    shards = json.loads((launched / "fig2_smoke.json").read_text())["provenance"]["shards"]
    assert [s["shard"] for s in shards] == ["1/2", "2/2"] and all(s["device"] == "cpu" for s in shards)
    assert list((launched / "shards" / "logs").iterdir())  # submitit's job folders and logs


def test_the_merged_provenance_marks_every_key_on_which_shards_differ():
    """One rule for every key of where the shards ran: the same on every shard, it is kept; different (device, GPU,
    machine, Python as well as torch or commit), it is marked "several (see shards)", never shard 1's alone."""
    from softmax_as_linear.experiments.shard_files import MERGE_OWN, common_origin

    ORIGIN_KEYS = ("device", "device_name", "gpu", "torch", "python", "commit", "uncommitted_changes", "engine_path",
                   "machine", "torch_threads", "final_prompts", "seed_rule")  # any key, not a list of known ones
    first = {key: f"{key}-1" for key in ORIGIN_KEYS}
    assert common_origin([first, dict(first)]) == first
    for key in ORIGIN_KEYS:
        top = common_origin([first, {**first, key: f"{key}-2"}])
        assert top[key] == "several (see shards)", key
        assert all(top[other] == first[other] for other in ORIGIN_KEYS if other != key)
    second = {k: v for k, v in first.items() if k != "gpu"}  # one shard ran without a GPU
    assert common_origin([second, first])["gpu"] == "several (see shards)"
    assert "seeds" not in common_origin([{**first, "seeds": [0]}, {**first, "seeds": [1]}], MERGE_OWN)


@pytest.mark.parametrize("figure", [pytest.param("fig3", marks=pytest.mark.slow), "fig7"])
def test_a_figure_merged_alone_says_where_its_shards_ran(figure, tiny_presets, tmp_path, run_cli):
    """A figure other than its sweep's first (Figure 3 of the isotropic sweep, Figure 7 of the KMS sweep), trained and
    merged alone: its provenance says where the shards ran (commit, device, torch), read from its own shard files."""
    run = ["reproduce", figure, "--preset", "smoke", "--seeds", "2", "--device", "cpu", "--out", str(tmp_path)]
    for k in (1, 2):
        assert run_cli(*run, "--shard", f"{k}/2")[0] == cli.EXIT_COMPLETE
    code, out, err = run_cli("merge", *run[1:], "--shards", "2")
    assert code == cli.EXIT_COMPLETE, err
    origin = json.loads((tmp_path / f"{figure}_smoke.json").read_text())["provenance"]
    assert {"commit", "device", "torch", "python"} <= set(origin), sorted(origin)
    assert all({"commit", "device", "torch"} <= set(shard) for shard in origin["shards"])
