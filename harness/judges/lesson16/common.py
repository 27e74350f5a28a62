"""Lesson 16: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _reference(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """The eager output of `model` in eval mode (judge side)."""
    model.eval()
    with torch.inference_mode():
        return model(inputs)


def _states_equal(got: Any, want: dict[str, torch.Tensor]) -> bool:
    """Whether `got` (data from the observation) is exactly the state_dict `want`: keys, dtypes and values."""
    return isinstance(got, dict) and set(got) == set(want) and all(
        isinstance(got[k], torch.Tensor) and got[k].dtype == v.dtype and got[k].shape == v.shape
        and torch.equal(got[k], v) for k, v in want.items())
