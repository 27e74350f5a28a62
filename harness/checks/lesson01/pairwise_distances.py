"""01-pairwise-distances, the probe.

Record the student's distances for each (x, y) pair of the case, and how many torch calls each made.
"""

from __future__ import annotations

from typing import Callable

import torch

from harness.checks.lesson01.common import _randn
from harness.contract.case import Case
from harness.contract.forbidden import CallRecorder
from harness.contract.registry import register


def distance_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(x, y) pairs: float32 and float64, single rows, and a set of points against itself."""
    seed = case.seeded
    if not case.hidden:
        same = _randn(30, 3, seed=seed(2)) * 3
        return [(_randn(5, 3, seed=seed(0)), _randn(7, 3, seed=seed(1))),
                (_randn(4, 2, seed=seed(3), dtype=torch.float64), _randn(6, 2, seed=seed(4), dtype=torch.float64)),
                (same, same), (_randn(1, 1, seed=seed(5)), _randn(4, 1, seed=seed(6)))]
    same = _randn(50, 8, seed=seed(14)) * 10
    return [(_randn(1, 1, seed=seed(10)), _randn(4, 1, seed=seed(11))),
            (_randn(9, 16, seed=seed(12), dtype=torch.float64), _randn(2, 16, seed=seed(13), dtype=torch.float64)),
            (same, same.clone()),
            (_randn(6, 4, seed=seed(15)), _randn(1, 4, seed=seed(16)))]


@register("01-pairwise-distances")
def probe_pairwise_distances(pairwise_distances: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *,
                             case: Case) -> dict:
    """Record the student's distances for each (x, y) pair of the case, and how many torch calls each made."""
    results, calls = [], []
    for x, y in distance_inputs(case):
        with CallRecorder() as counter:
            results.append(pairwise_distances(x, y))
        calls.append(counter.count)
    return {"results": results, "calls": calls}
