"""Lesson 03: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader


def _in_order(dataset: Any, **options: Any) -> DataLoader:
    """A DataLoader without shuffling that leaves the global RNG alone (each iterator draws a base seed: from
    the loader's own generator when it has one)."""
    return DataLoader(dataset, batch_size=4, generator=torch.Generator().manual_seed(0), **options)
