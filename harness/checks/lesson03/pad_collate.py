"""03-pad-collate, the probe.

Record pad_collate's output on each batch of the case, and what a DataLoader using it yields.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from harness.checks.lesson03.common import _in_order
from harness.contract.case import Case
from harness.contract.registry import register

Batch = list[tuple[torch.Tensor, torch.Tensor]]


def _random_batch(rng: np.random.Generator, size: int, max_len: int, features: int) -> Batch:
    lengths = rng.integers(1, max_len + 1, size=size)
    return [
        (torch.from_numpy(rng.standard_normal((int(n), features)).astype(np.float32)),
         torch.tensor(int(rng.integers(0, 5))))
        for n in lengths
    ]


def collate_batches(case: Case) -> list[Batch]:
    """Property-based: many random batches (sizes, lengths and feature counts drawn from a seeded generator)
    plus the edge cases a hand-picked example misses: one item, all lengths equal, length-1 sequences."""
    rng = np.random.default_rng(case.seeded(1 if case.hidden else 0))
    examples = 60 if case.hidden else 20
    features_max = 4 if case.hidden else 2
    # First a batch whose dimensions all differ, so a wrong layout shows as a wrong shape.
    batches = [[(torch.ones(3, 2), torch.tensor(0)), (torch.full((5, 2), 2.0), torch.tensor(1))]]
    batches += [
        _random_batch(rng, int(rng.integers(1, 9)), int(rng.integers(1, 13)), int(rng.integers(1, features_max + 1)))
        for _ in range(examples)
    ]
    batches += [_random_batch(rng, 1, 5, 2), _random_batch(rng, 4, 1, 3)]
    same_length = torch.from_numpy(rng.standard_normal((3, 6, 2)).astype(np.float32))
    batches.append([(same_length[i], torch.tensor(i)) for i in range(3)])
    return batches


def loader_dataset(case: Case) -> Batch:
    """Ten sequences for a DataLoader with batch_size=4 (batches of 4, 4 and 2, in order)."""
    return _random_batch(np.random.default_rng(case.seeded(3)), 10, 9, 3)


@register("03-pad-collate")
def probe_pad_collate(pad_collate: Callable, *, case: Case) -> dict:
    """Record pad_collate's output on each batch of the case, and what a DataLoader using it yields."""
    loader = _in_order(loader_dataset(case), collate_fn=pad_collate)
    return {"outputs": [pad_collate(batch) for batch in collate_batches(case)], "loader": list(loader)}
