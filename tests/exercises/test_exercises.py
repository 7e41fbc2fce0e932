"""Every coding exercise: its reference passes, its skeleton reads "not attempted yet", and each chapter shows it."""
import json
import pathlib

import pytest

from softmax_as_linear import exercises
from softmax_as_linear.exercises import feedback as fb

ROOT = pathlib.Path(__file__).resolve().parents[2]
ALL = exercises.exercises()


def _skeleton(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("name", sorted(ALL))
def test_the_reference_passes_and_the_skeleton_is_not_attempted(name):
    exercise = ALL[name]
    assert fb.diagnose(exercise, exercise.reference).status == fb.PASSED
    assert fb.diagnose(exercise, _skeleton).status == fb.NOT_ATTEMPTED
    assert len(exercise.mistakes) >= 3, "each exercise knows at least three plausible mistakes"


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_known_mistake_is_diagnosed_as_itself(name):
    # the first mistake a wrong implementation matches is its own: no earlier one shadows it
    exercise = ALL[name]
    for mistake in exercise.mistakes:
        answer = fb.diagnose(exercise, mistake.wrong)
        assert answer.status == fb.FAILED and answer.message == mistake.diagnosis, (mistake.diagnosis, answer)


def test_every_chapter_has_at_least_two_exercises_each_with_its_skeleton_check_and_solution():
    for chapter in exercises.CHAPTERS:
        names = [e.function for e in ALL.values() if e.chapter == chapter]
        assert len(names) >= 2, f"chapter {chapter} has {len(names)} coding exercises"
        path = next((ROOT / "notebooks").glob(f"{chapter:02d}_*.ipynb"))
        cells = json.loads(path.read_text())["cells"]
        sources = ["".join(c["source"]) for c in cells]
        for name in names:
            skeleton = [i for i, s in enumerate(sources) if s.startswith(f"def {name}(") and
                        "raise NotImplementedError" in s and "solution" not in cells[i]["metadata"].get("tags", [])]
            assert len(skeleton) == 1, f"{path.name}: one skeleton of {name}"
            i = skeleton[0]
            assert sources[i + 1].strip() == f"exercises.check({name})", f"{path.name}: the check follows {name}"
            assert "not attempted yet" in "".join(cells[i + 1]["outputs"][0]["text"])
            solution = [c for c, s in zip(cells, sources) if s.startswith(f"def {name}(") and
                        "solution" in c["metadata"].get("tags", [])]
            assert len(solution) == 1, f"{path.name}: one folded solution of {name}"
            assert solution[0]["metadata"]["jupyter"] == {"outputs_hidden": True, "source_hidden": True}
            assert f"✓ {name}: all" in "".join(solution[0]["outputs"][0]["text"]), f"{path.name}: {name}'s solution passes"


def test_check_prints_and_never_raises(capsys):
    exercises.check(_skeleton, name="softmax_attention")
    exercises.check(lambda *a: 1 / 0, name="softmax_attention")
    exercises.check(3, name="softmax_attention")
    exercises.check(_skeleton, name="no_such_exercise")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("… softmax_attention: not attempted yet")
    assert "raises ZeroDivisionError" in out[1] and "expected a function" in out[2]
    assert out[3].startswith("✗ name: no coding exercise asks for a function named 'no_such_exercise'")
