"""Choice of the device every computation runs on: CUDA when present, else CPU."""
from __future__ import annotations

import torch

from ..registry import DEVICES
from . import checks


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` gives CUDA when available and the CPU otherwise; ``"cuda"`` without a GPU is an error."""
    if isinstance(device, torch.device):
        return device
    name = checks.one_of("device", device, DEVICES)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but no CUDA device is available; use 'auto' or 'cpu'")
    return torch.device(name)
