"""A damaged file's message is short enough to read: one line of the reader's error, the file and what to do."""
from softmax_as_linear.core import artifacts


def test_a_damaged_file_quotes_one_short_line_of_the_readers_error(tmp_path):
    reason = "UnpicklingError: Weights only load failed. " + "x" * 400 + "\nCheck the documentation of torch.load\n..."
    error = artifacts.DamagedFileError(tmp_path / "a.pt", reason, "delete it")
    assert str(error).startswith(f"{tmp_path / 'a.pt'} is damaged and cannot be read (UnpicklingError: Weights only")
    assert len(str(error)) < 300 and "torch.load" not in str(error) and str(error).endswith("...): delete it")
    assert error.reason == reason and error.advise("again").reason == reason
