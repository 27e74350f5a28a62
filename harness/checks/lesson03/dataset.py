"""03-dataset, the probe.

Build datasets with and without a counting transform; record lengths, items, transform calls, a
DataLoader batch, and what building one with mismatched lengths raised.
"""

from __future__ import annotations

import torch

from harness.checks.lesson03.common import _in_order
from harness.contract.case import Case
from harness.contract.registry import register


class _CountingTransform:
    """A transform that records how often it runs: per item, never at construction."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return check_transform(x)


def check_transform(x: torch.Tensor) -> torch.Tensor:
    """The transform the check passes to the dataset: x * 2 + 1."""
    return x * 2 + 1


def dataset_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """(features, labels): 10 rows of (2, 4) visibly, 23 rows of (3, 5) hidden (rows of more than one
    dimension, like images, in both)."""
    generator = torch.Generator().manual_seed(case.seeded(5 if case.hidden else 1))
    shape = (23, 3, 5) if case.hidden else (10, 2, 4)
    features = torch.randn(*shape, generator=generator)
    return features, torch.randint(0, 3, (shape[0],), generator=generator)


def read_indices(n: int) -> tuple[int, ...]:
    """The indices read from a dataset of n items: the first, the last and the middle one."""
    return (0, n - 1, n // 2)


@register("03-dataset")
def probe_dataset(cls: type, *, case: Case) -> dict:
    """Build datasets with and without a counting transform; record lengths, items, transform calls, a
    DataLoader batch, and what building one with mismatched lengths raised."""
    features, labels = dataset_inputs(case)
    plain = cls(features, labels)
    transform = _CountingTransform()
    augmented = cls(features, labels, transform=transform)
    calls_at_construction = transform.calls
    augmented_item = augmented[3]
    try:
        cls(features, labels[:-1])
    except Exception as error:  # noqa: BLE001 - which exception, if any, is what the judge decides on
        mismatch = {"type": type(error).__name__, "value_error": isinstance(error, ValueError),
                    "message": str(error)[:200]}
    else:
        mismatch = None
    return {
        "name": cls.__name__,
        "length": len(plain),
        "items": [plain[index] for index in read_indices(len(features))],
        "calls_at_construction": calls_at_construction,
        "augmented_item": augmented_item,
        "calls_after_read": transform.calls,
        "batch": next(iter(_in_order(plain))),
        "mismatch": mismatch,
    }
