"""Lesson 01: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

import torch


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)
