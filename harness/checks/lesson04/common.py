"""Lesson 04: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


@contextmanager
def one_thread() -> Iterator[None]:
    """Run a check's tiny models on one intra-op thread: extra threads only add contention at this size."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _model(features: int, classes: int, seed: int) -> nn.Module:
    """The seeded classifier every check trains or evaluates."""
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the student's global RNG state
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(features, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, classes))


def _data(n: int, features: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` seeded samples and labels."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    y = torch.randint(0, classes, (n,), generator=generator)
    return x, y


def _loader(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> DataLoader:
    """A loader in a fixed order over (x, y)."""
    # shuffle=False: a shuffling sampler calls .tolist() once per epoch, which the sync count would see.
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


META = torch.device("meta")  # a device no check expects: code that ignores the device shows it on any machine
