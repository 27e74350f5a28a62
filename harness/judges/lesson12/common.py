"""Lesson 12: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch


def _scalar(value: Any) -> float | None:
    """A returned number as a float (a Python number or a one-element tensor); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
        return float(value.detach())
    return None
