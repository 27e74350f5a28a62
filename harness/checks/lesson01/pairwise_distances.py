"""01-pairwise-distances, the probe.

Record the student's distances for each (x, y) pair of the case, and how many torch calls each made.
"""

from __future__ import annotations

from typing import Callable

import torch

from harness.checks.lesson01.common import _randn
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register("01-pairwise-distances", nonfinite=('results/*',), hints=Hints(
    nudge="Give x a new axis so that x is (n, 1, d) and y is (1, m, d): their difference broadcasts to (n, m, d).",
    concept="Broadcasting aligns shapes from the right and stretches the axes of size 1, so one subtraction "
            "computes every x_i - y_j; reduce over the feature axis only. If you use |x|^2 - 2 x.y + |y|^2, clamp "
            "it at 0 before the square root.",
    solution="return (x[:, None, :] - y[None, :, :]).pow(2).sum(dim=-1).sqrt()",
    section="3. Broadcasting"),
    requires={
        "not-a-tensor": Requirement("returns a torch.Tensor", hint="Keep the result a tensor: no .tolist()."),
        "wrong-shape": Requirement("returns the (n, m) matrix: one distance per (row of x, row of y)",
                                   hint="Write the shape of each intermediate for x (5, 3) and y (7, 3)."),
        "dtype-changed": Requirement("keeps the inputs' dtype",
                                     hint="Call it on two float64 tensors and print the result's dtype."),
        "non-finite": Requirement("the distance of a point to itself is 0, not nan",
                                  hint="Can a squared distance computed by your formula come out slightly "
                                       "negative? What is the square root of that?"),
        "wrong-values": Requirement("D[i, j] is the Euclidean distance ||x[i] - y[j]||",
                                    hint="Check D[0, 0] by hand against (x[0] - y[0]).norm()."),
        "python-loop": Requirement("uses no Python loop (one broadcast operation)",
                                   hint="How many tensor operations does your function run for 30 points? One "
                                        "broadcast subtraction can replace every iteration."),
    })
def probe_pairwise_distances(pairwise_distances: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *,
                             case: Case) -> dict:
    """Record the student's distances for each (x, y) pair of the case, and how many torch calls each made."""
    results, calls = [], []
    for x, y in distance_inputs(case):
        with CallRecorder() as counter:
            results.append(pairwise_distances(x, y))
        calls.append(counter.count)
    return {"results": results, "calls": calls}
