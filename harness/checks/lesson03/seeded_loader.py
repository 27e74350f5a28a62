"""03-seeded-loader, the probe.

Record the batches of two epochs of two loaders built with the same seed (the global RNG reseeded
differently before each, and drawn from between the second one's epochs, as a model's initialisation and
dropout would) and of one epoch with the next seed; and the global RNG's seed after each build.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.data import DataLoader, TensorDataset

from harness.contract.case import Case
from harness.contract.registry import register


def loader_setting(case: Case) -> tuple[int, int, int]:
    """(dataset size, batch size, seed): a last, partial batch in both, so drop_last shows."""
    n, batch_size, seed = (53, 8, 2024) if case.hidden else (42, 10, 0)
    return n, batch_size, case.seeded(seed)


def _epoch_batches(loader: DataLoader) -> list[list[int]]:
    """The item indices of each batch of one epoch."""
    return [[int(i) for i in (batch[0] if isinstance(batch, (tuple, list)) else batch)] for batch in loader]


@register("03-seeded-loader")
def probe_seeded_loader(make_loader: Callable, *, case: Case) -> dict:
    """Record the batches of two epochs of two loaders built with the same seed (the global RNG reseeded
    differently before each, and drawn from between the second one's epochs, as a model's initialisation and
    dropout would) and of one epoch with the next seed; and the global RNG's seed after each build."""
    n, batch_size, seed = loader_setting(case)
    dataset = TensorDataset(torch.arange(n))
    # Inside fork_rng, so the student's own global RNG state is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(1))
        first = make_loader(dataset, batch_size, seed)
        global_seeds = [torch.initial_seed()]
        first_epochs = [_epoch_batches(first), _epoch_batches(first)]
        torch.manual_seed(case.seeded(2))
        second = make_loader(dataset, batch_size, seed)
        global_seeds.append(torch.initial_seed())
        torch.randn(16)  # a model's initialisation after the loader was built
        second_epochs = [_epoch_batches(second)]
        torch.rand(8)  # dropout during the first epoch
        second_epochs.append(_epoch_batches(second))
        other = _epoch_batches(make_loader(dataset, batch_size, seed + 1))
    return {"first": first_epochs, "second": second_epochs, "other": other, "global_seeds": global_seeds}
