"""Named settings: the paper's grid of prompt lengths, the sweep presets, the seeds of a sweep, overrides validated."""
import pytest

from softmax_as_linear.experiments import presets


def test_paper_lengths_are_the_papers_grid():
    assert presets.PAPER_LENGTHS == (10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900,
                                     1000)


def test_presets_share_the_papers_task_and_model():
    paper, lecture = presets.sweep_config("paper"), presets.sweep_config("lecture", "kms")
    assert paper.lengths == presets.PAPER_LENGTHS and lecture.lengths == presets.LECTURE_LENGTHS
    for field in ("d", "noise_var", "batch_size", "optimizer", "parametrisation", "init", "seeds"):
        assert getattr(paper, field) == getattr(lecture, field), field
    assert lecture.covariance == "kms" and lecture.rho == 0.5
    assert presets.sweep_config("lecture", seeds=(1, 2)).seeds == (1, 2)


@pytest.mark.parametrize("call, match", [
    (lambda: presets.sweep_config("huge"), "preset"),
    (lambda: presets.sweep_config("paper", "toeplitz"), "covariance"),
    (lambda: presets.sweep_config("paper", lr=-1.0), "lr"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_sweep_seeds():
    assert presets.sweep_seeds(1) == (327,)
    assert presets.sweep_seeds(4) == (327, 0, 1, 2)
    assert len(set(presets.sweep_seeds(400))) == 400
    with pytest.raises(ValueError, match="seeds"):
        presets.sweep_seeds(0)
