"""03-split-normalize, the probe: Call split_and_normalize twice with the same seed; record both results as data."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils.data import TensorDataset

from harness.contract.case import Case
from harness.contract.registry import register


def split_problem(case: Case) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    """(x, ids, val_fraction, seed): inputs with offsets and scales per feature, the last one constant (std 0),
    labels a permutation of row ids, rows sorted by the first feature."""
    # N * val_fraction has a fraction part above .5 (20.6, 39.75): int() and round() give different sizes.
    n, features, fraction, seed = (159, 5, 0.25, 11) if case.hidden else (103, 4, 0.2, 0)
    seed = case.seeded(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, features, generator=generator) * torch.linspace(0.5, 3.0, features) + torch.arange(features)
    # Rows sorted by the first feature, as files often come sorted: an unshuffled split is then biased.
    x = x[x[:, 0].argsort()]
    x[:, -1] = 4.0
    ids = torch.randperm(n, generator=generator)
    return x, ids, fraction, seed


def _split_record(result: Any) -> dict:
    """What split_and_normalize returned, as data: each split's tensors (and its type), mean and std."""
    if not (isinstance(result, (tuple, list)) and len(result) == 4):
        return {"result": result}
    train_set, val_set, mean, std = result
    return {"splits": [list(s.tensors) if isinstance(s, TensorDataset) else None for s in (train_set, val_set)],
            "split_types": [type(s).__name__ for s in (train_set, val_set)], "mean": mean, "std": std}


@register("03-split-normalize")
def probe_split_normalize(split_and_normalize: Callable, *, case: Case) -> dict:
    """Call split_and_normalize twice with the same seed; record both results as data."""
    x, ids, fraction, seed = split_problem(case)
    first = _split_record(split_and_normalize(x.clone(), ids.clone(), val_fraction=fraction, seed=seed))
    again = _split_record(split_and_normalize(x.clone(), ids.clone(), val_fraction=fraction, seed=seed))
    return {"first": first, "again": again}
