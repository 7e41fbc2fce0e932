"""The pieces of a stage every reproduction shares: the "up to date" short-cut."""
import json
from types import SimpleNamespace

from softmax_as_linear.experiments.stages import same_settings, up_to_date


def test_up_to_date_is_a_complete_readable_file_of_the_same_settings(tmp_path):
    settings = SimpleNamespace(as_dict=lambda: {"steps": 4, "seeds": [0, 1]})
    path = tmp_path / "result.json"
    same = same_settings(settings)
    assert not up_to_date(path, same)  # no file
    for data, expected in (({"complete": True, "provenance": {"settings": {"steps": 4, "seeds": [0, 1]}}}, True),
                           ({"complete": False, "provenance": {"settings": {"steps": 4, "seeds": [0, 1]}}}, False),
                           ({"complete": True, "provenance": {"settings": {"steps": 8, "seeds": [0, 1]}}}, False),
                           ({"complete": True}, False)):
        path.write_text(json.dumps(data))
        assert up_to_date(path, same) is expected, data
    path.write_text('{"complete": tr')  # damaged: written again, not up to date
    assert not up_to_date(path, same)


def test_up_to_date_compares_every_stage_s_settings(tmp_path):
    """A file whose first stage is of this call's settings but whose later stage is not is not up to date."""
    settings = SimpleNamespace(as_dict=lambda: {"steps": 4})
    path = tmp_path / "result.json"
    same = same_settings(settings, dependence_settings=[{"steps": 2}])
    for later, expected in (([{"steps": 2}], True), ([{"steps": 3}], False), ([], False), (None, False)):
        path.write_text(json.dumps({"complete": True, "provenance": {"settings": {"steps": 4},
                                                                     "dependence_settings": later}}))
        assert up_to_date(path, same) is expected, later
