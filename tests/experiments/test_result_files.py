"""Result files have one home: names, loaders and the command that rebuilds each, with core knowing nothing of them."""
import json
import pathlib
import subprocess

import pytest

import softmax_as_linear
from softmax_as_linear.core import artifacts
from softmax_as_linear.experiments import result_files

CORE = pathlib.Path(softmax_as_linear.__file__).parent / "core"
ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAPTER_7 = ROOT / "notebooks" / "07_depth.ipynb"


@pytest.mark.parametrize("filename, command", [
    ("fig1_paper.json", "reproduce fig1 --preset paper"),
    ("fig2_lecture.json", "reproduce fig2 fig3 fig4 --preset lecture"),
    ("fig8_paper.json", "reproduce fig6 fig7 fig8 --preset paper"),
    ("fig6_paper_published.json", "reproduce fig6 fig7 fig8 --preset paper --sampler published"),
    ("beyond_uniform_paper.json", "reproduce beyond --covariates uniform --preset paper"),
    ("beyond_rademacher_paper_3seeds_L10-30-100-300-1000.json",
     "reproduce beyond --covariates rademacher --preset paper --seeds 3 --lengths 10 30 100 300 1000"),
    ("depth_lecture.json", "reproduce depth --preset lecture"),
    ("depth_paper_10seeds.json", "reproduce depth --preset paper --seeds 10"),
])
def test_every_result_file_names_the_command_that_rebuilds_it(filename, command):
    assert result_files.command_for(filename) == f"python -m softmax_as_linear {command}"


def test_a_file_of_no_known_kind_is_an_error():
    for name in ("fig9_paper.json", "fig2_huge.json", "beyond_uniform_huge.json", "depth_huge.json", "notes.json"):
        with pytest.raises(ValueError):
            result_files.command_for(name)


def test_core_knows_nothing_of_the_paper():
    assert not hasattr(artifacts, "default_command")
    for path in CORE.glob("*.py"):
        text = path.read_text()
        for word in ("fig1", "fig2", "beyond_", "--preset"):
            assert word not in text, (path.name, word)


def test_a_missing_file_names_absolute_folders_and_its_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(artifacts.ENV_VAR, "relative-results")
    with pytest.raises(FileNotFoundError) as caught:
        result_files.load_result("fig6_lecture_published.json")  # a file the course does not ship
    message = str(caught.value)
    assert str(tmp_path / "relative-results") in message
    assert "reproduce fig6 fig7 fig8 --preset lecture --sampler published" in message


def test_run_names_record_what_differs_from_the_preset():
    from softmax_as_linear.experiments.presets import beyond_config, sweep_seeds

    paper = beyond_config("paper")
    assert result_files.run_name("paper") == "paper"
    assert result_files.run_name("paper", paper.seeds, paper.lengths) == "paper"
    assert result_files.run_name("paper", sweep_seeds(3), (10, 30, 100, 300, 1000)) == "paper_3seeds_L10-30-100-300-1000"
    assert result_files.run_name("lecture", sweep_seeds(5)) == "lecture_5seeds"
    assert result_files.parse_run("paper_3seeds_L10-1000") == ("paper", 3, (10, 1000))
    with pytest.raises(ValueError, match="first N seeds"):
        result_files.run_name("paper", (4, 5))


def test_saved_beyond_falls_back_on_the_largest_reduced_run_of_the_preset(tmp_path):
    assert result_files.saved_beyond("uniform", "paper", tmp_path) is None
    artifacts.save_json(tmp_path / "beyond_uniform_paper_2seeds.json", {"run": "paper_2seeds"})
    artifacts.save_json(tmp_path / "beyond_uniform_paper_3seeds_L10-1000.json", {"run": "paper_3seeds_L10-1000"})
    artifacts.save_json(tmp_path / "beyond_uniform_lecture_5seeds.json", {"run": "lecture_5seeds"})
    assert result_files.saved_beyond("uniform", "paper", tmp_path)["run"] == "paper_3seeds_L10-1000"
    artifacts.save_json(tmp_path / "beyond_uniform_paper.json", {"run": "paper"})
    assert result_files.saved_beyond("uniform", "paper", tmp_path)["run"] == "paper"
    assert result_files.saved_beyond("rademacher", "paper", tmp_path) is None


def test_committed_chapter_6_files_are_named_after_what_they_ran():
    from softmax_as_linear.experiments.presets import beyond_config

    root = pathlib.Path(softmax_as_linear.__file__).parents[2] / "results"
    files = sorted(root.glob("beyond_*.json"))
    assert files
    for path in files:
        data = result_files.beyond_with_current_names(artifacts.load_json(path))
        where = data["provenance"]
        assert path.name == result_files.beyond_file(data["covariates"], data["run"]) and where["run"] == data["run"]
        preset, seeds, lengths = result_files.parse_run(data["run"])
        expected = beyond_config(preset, data["covariates"])
        assert where["preset"] == data["preset"] == preset
        assert len(where["settings"]["seeds"]) == (seeds or len(expected.seeds))
        assert tuple(where["settings"]["lengths"]) == (lengths or expected.lengths)
        overrides = dict(where["overrides"])
        if seeds is None and overrides.get("seeds") == len(expected.seeds):
            del overrides["seeds"]  # the preset's own number of seeds, asked for on the command line
        assert overrides == {**({} if seeds is None else {"seeds": seeds}),
                             **({} if lengths is None else {"lengths": list(lengths)})}
        if where["uncommitted_changes"]:
            assert where["allow_dirty"] is True, path.name
    # Chapter 6 asks for the paper preset's files: the full run's when there is one (committed), else a reduced run
    assert result_files.saved_beyond("uniform", "paper")["run"] == "paper"


def test_chapter_6_files_written_before_the_rename_of_law_read_with_todays_names():
    """The committed files hold the covariate law as ``law`` (kept as written); they are read as ``covariates``."""
    from softmax_as_linear.engine.sweep import TrainConfig, config_fields

    root = pathlib.Path(softmax_as_linear.__file__).parents[2] / "results"
    raw = artifacts.load_json(root / "beyond_uniform_paper.json")
    assert raw["law"] == raw["tracking"]["law"] == raw["provenance"]["settings"]["law"] == "uniform"
    data = result_files.saved_beyond("uniform", "paper")
    assert data["covariates"] == "uniform" and "law" not in data
    for part in ("tracking", "limits", "final"):
        assert data[part]["covariates"] == "uniform" and "law" not in data[part], part
    settings = data["provenance"]["settings"]
    assert settings["covariates"] == "uniform" and "law" not in settings
    config = TrainConfig(**{k: tuple(v) if isinstance(v, list) else v
                            for k, v in config_fields(raw["provenance"]["settings"]).items()})
    assert config.covariates == "uniform" and config.task().covariates == "uniform"
    assert data["tracking"]["distance"] == raw["tracking"]["distance"]  # the numbers as written
    new = {"covariates": "rademacher", "tracking": {"covariates": "rademacher"}, "provenance": {"settings": {}}}
    assert result_files.beyond_with_current_names(new) == new



def test_committed_chapter_7_file_is_up_to_date_for_its_settings_whatever_it_calls_the_covariate_law():
    """``reproduce depth`` reuses a complete depth file whose settings are the run's: the committed one is, and so is
    one written when the covariate law was called ``law`` (read through the renamed fields)."""
    from softmax_as_linear.engine.sweep import config_fields
    from softmax_as_linear.experiments.depth_regression import depth_settings

    root = pathlib.Path(softmax_as_linear.__file__).parents[2] / "results"
    settings = artifacts.load_json(root / "depth_lecture.json")["provenance"]["settings"]
    assert config_fields(settings) == depth_settings("lecture").as_dict()
    older = {("law" if key == "covariates" else key): value for key, value in settings.items()}
    assert older["law"] == "gaussian" and config_fields(older) == depth_settings("lecture").as_dict()


def _partial_depth(folder: pathlib.Path, last_step: int = 1_100) -> pathlib.Path:
    """The committed ``depth_lecture.json`` as a run stopped at ``last_step`` writes it: its sweep partial, no warm
    stage."""
    data = json.loads((ROOT / "results" / "depth_lecture.json").read_text())
    data = {"experiment": "depth", "complete": False, "stages_complete": [], "stopped_in": "the sweep",
            "stopped_at": [last_step, 4_000], "provenance": data["provenance"]}
    folder.mkdir(parents=True, exist_ok=True)
    return artifacts.save_json(folder / "depth_lecture.json", data)


def test_a_partial_file_is_refused_where_a_claim_reads_it_naming_its_step_and_the_command_that_finishes_it(tmp_path):
    path = _partial_depth(tmp_path)
    with pytest.raises(result_files.PartialResultError) as caught:
        result_files.saved_depth("lecture", tmp_path, required=True)
    message = str(caught.value)
    assert f"{path} is partial (step 1,100 of 4,000): run" in message
    assert f"python -m softmax_as_linear reproduce depth --preset lecture --out {tmp_path}\nagain to finish it" in message
    assert result_files.saved_depth("lecture", tmp_path)["complete"] is False  # returned as it is, unless required
    # the sweep finished, its warm stage stopped: said as such
    data = json.loads(path.read_text())
    artifacts.save_json(path, {**data, "stages_complete": ["the sweep"], "stopped_in": "its warm stage",
                               "stopped_at": [500, 2_000]})
    with pytest.raises(result_files.PartialResultError,
                       match=r"the sweep complete, stopped in its warm stage at step 500 of 2,000"):
        result_files.saved_depth("lecture", tmp_path, required=True)


def test_a_partial_figure_file_is_drawn_as_it_is_but_refused_to_a_claim(tmp_path):
    data = json.loads((ROOT / "results" / "fig2_paper.json").read_text())
    artifacts.save_json(tmp_path / "fig2_paper.json", {**data, "complete": False, "steps": 83_000})
    assert result_files.saved_figure("fig2", "paper", tmp_path)["complete"] is False  # its figure says "partial"
    with pytest.raises(result_files.PartialResultError, match=r"partial \(step 83,000 of 300,000\)") as caught:
        result_files.saved_figure("fig2", "paper", tmp_path, required=True)
    assert "reproduce fig2 fig3 fig4 --preset paper --out" in str(caught.value)
    with pytest.raises(result_files.PartialResultError):
        result_files.load_result("fig2_paper.json", tmp_path)


def test_a_damaged_committed_file_is_restored_by_git_checkout_and_its_rerun_time_is_said(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    results = tmp_path / "results"
    results.mkdir()
    (results / "depth_lecture.json").write_text(json.dumps({"provenance": {"wall_seconds": 819.5,
                                                                           "device_name": "AMD EPYC"}}))
    git("init", "-q")
    git("add", "results")
    git("-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "results")
    (results / "depth_lecture.json").write_text('{"provenance": {"wall_')
    with pytest.raises(artifacts.DamagedFileError) as caught:
        result_files.saved_depth("lecture", results, required=True)
    message = str(caught.value)
    assert f"restore the committed file with\n    git -C {tmp_path.resolve()} checkout -- results/depth_lecture.json" \
        in message
    assert "or write it again with\n    python -m softmax_as_linear reproduce depth --preset lecture" in message
    assert "(the committed run took 14 min on AMD EPYC)" in message
    # a file no repository holds: delete it and write it again
    (results / "fig2_paper.json").write_text("{")
    with pytest.raises(artifacts.DamagedFileError, match="delete it and write it again with"):
        result_files.saved_figure("fig2", "paper", results)


def test_chapter_7_on_a_partial_file_stops_with_the_refusal_not_a_key_error(tmp_path, monkeypatch):
    """Chapter 7's cells that read its result file, run as the chapter runs them with ``SOFTMAX_AS_LINEAR_RESULTS``
    pointing at the folder of a run stopped at its time limit (what ``reproduce depth --max-minutes`` suggests)."""
    _partial_depth(tmp_path)
    monkeypatch.setenv(artifacts.ENV_VAR, str(tmp_path))
    cells = {cell["id"]: "".join(cell["source"]) for cell in json.loads(CHAPTER_7.read_text())["cells"]}
    namespace = {}
    exec(cells["ch7-02"], namespace)   # the chapter's imports
    with pytest.raises(result_files.PartialResultError) as caught:
        for cell in ("fed5c413", "083b1007", "26291f53"):  # the reading, the settled runs, the figure
            exec(cells[cell], namespace)
    assert "is partial (step 1,100 of 4,000)" in str(caught.value)
    assert f"reproduce depth --preset lecture --out {tmp_path}" in str(caught.value)
    # the complete file is read by the same cells
    monkeypatch.setenv(artifacts.ENV_VAR, str(ROOT / "results"))
    for cell in ("fed5c413", "083b1007"):
        exec(cells[cell], namespace)
    assert namespace["regression"]["complete"] is True


@pytest.mark.parametrize("name", ["nonlinear_lecture.json", "nonlinear_depth_lecture.json", "nonlinear_window_lecture.json",
                                  "depth_lecture.json"])
def test_a_result_file_without_a_field_a_chapter_reads_names_the_file_and_the_field(name, tmp_path):
    """A file that is valid JSON but lacks what a chapter reads (``{"preset": "lecture"}``) is named, with the field
    and what to do, not a bare ``KeyError``."""
    from softmax_as_linear.core.artifacts import DamagedFileError

    (tmp_path / name).write_text(json.dumps({"preset": "lecture", "complete": True}))
    with pytest.raises(DamagedFileError, match="lacks the field") as caught:
        result_files.load_result(name, tmp_path)
    assert str(tmp_path / name) in str(caught.value) and "write it again" in str(caught.value)
    readers = {"nonlinear_lecture.json": result_files.saved_nonlinear,
               "nonlinear_depth_lecture.json": result_files.saved_nonlinear_depth,
               "nonlinear_window_lecture.json": result_files.saved_nonlinear_window,
               "depth_lecture.json": result_files.saved_depth}
    whole = json.loads((pathlib.Path(result_files.__file__).parents[3] / "results" / name).read_text())
    del whole["provenance"]
    (tmp_path / name).write_text(json.dumps(whole))
    with pytest.raises(DamagedFileError, match="lacks the field 'provenance'"):
        readers[name]("lecture", tmp_path, required=True)


def test_chapter_8_optima_presets_are_those_of_the_experiment():
    from softmax_as_linear.experiments import nonlinear_optima
    from softmax_as_linear.experiments.reproductions import REPRODUCTIONS

    assert REPRODUCTIONS["nonlinear_optima"].presets == tuple(nonlinear_optima.SETTINGS)


def test_chapter_8_optima_file_names_its_command_and_is_read(tmp_path):
    command = "python -m softmax_as_linear reproduce nonlinear_optima --preset lecture"
    assert result_files.command_for("nonlinear_optima_lecture.json") == command
    from softmax_as_linear.experiments.reproductions import REPRODUCTIONS

    assert REPRODUCTIONS["nonlinear_optima"].file("smoke") == "nonlinear_optima_smoke.json"
    with pytest.raises(ValueError, match="preset"):
        REPRODUCTIONS["nonlinear_optima"].file("huge")
    with pytest.raises(FileNotFoundError, match="nonlinear_optima --preset smoke"):
        result_files.saved_nonlinear_optima("smoke", folder=tmp_path, required=True)
    (tmp_path / "nonlinear_optima_smoke.json").write_text('{"lengths": [10, 100]}')
    assert result_files.saved_nonlinear_optima("smoke", folder=tmp_path)["lengths"] == [10, 100]


def test_every_file_names_the_command_of_its_own_reproduction():
    """No prefix rule: each reproduction says which file names are its own."""
    assert result_files.command_for("nonlinear_lecture.json").endswith("reproduce nonlinear --preset lecture")
    assert result_files.command_for("nonlinear_depth_paper.json").endswith("nonlinear_depth --preset paper")
    assert result_files.command_for("depth_lecture_7seeds.json").endswith("depth --preset lecture --seeds 7")
    with pytest.raises(ValueError, match="filename"):
        result_files.command_for("nonlinear_huge.json")
    assert result_files.command_for("nonlinear_window_lecture.json").endswith("nonlinear_window --preset lecture")
