"""Lesson 12: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch

from harness.contract.compare import real


# Not compare.real alone: this lesson's numbers (losses, norms, fractions) are floating: an integer tensor is refused.
def _scalar(value: Any) -> float | None:
    """A returned number as a float (a Python number or a one-element floating tensor, NaN and inf included); None
    for anything else."""
    if isinstance(value, torch.Tensor) and not value.is_floating_point():
        return None
    return real(value)
