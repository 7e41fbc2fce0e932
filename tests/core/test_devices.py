"""Choice of device: auto follows CUDA's presence, explicit choices are honoured, bad names are errors."""
import pytest
import torch

from softmax_as_linear.core.devices import resolve_device


def test_choices():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_bad_device():
    with pytest.raises(ValueError, match="device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            resolve_device("cuda")
