"""Inputs that probes and judges build the same way from a seed, without touching the student's random stream."""

from __future__ import annotations

from typing import Callable, TypeVar

import torch

T = TypeVar("T")


def randn(*shape: int, seed: int) -> torch.Tensor:
    """A float32 standard-normal tensor of `shape`, drawn from its own generator seeded with `seed`."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def seeded(seed: int, build: Callable[[], T]) -> T:
    """`build()` after torch.manual_seed(seed) (a model's initial weights), leaving the global random stream as
    it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()
