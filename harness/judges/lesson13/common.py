"""Lesson 13: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1).double() for t in tensors])


