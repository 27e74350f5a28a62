"""Lesson 13: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1).double() for t in tensors])


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-4) -> bool:
    return float((a - b).norm()) <= rtol * float(b.norm()) + 1e-9
