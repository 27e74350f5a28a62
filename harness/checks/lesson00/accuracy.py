"""00-accuracy, the probe: Call the student's accuracy on each (logits, targets) pair of the case."""

from __future__ import annotations

from typing import Callable

import torch

from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.failure import CheckFailed
from harness.contract.registry import register


def accuracy_cases(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Seeded (logits, targets) pairs: a batch, a single sample and two classes (other sizes hidden)."""
    generator = torch.Generator().manual_seed(case.seeded(1 if case.hidden else 0))
    shapes = [(1, 4), (33, 10), (5, 2)] if case.hidden else [(16, 5), (1, 4), (6, 2)]
    cases = []
    for batch, classes in shapes:
        logits = torch.randn(batch, classes, generator=generator)
        targets = torch.randint(0, classes, (batch,), generator=generator)
        cases.append((logits, targets))
    return cases


@register("00-accuracy")
def probe_accuracy(accuracy: Callable[[torch.Tensor, torch.Tensor], float], *, case: Case) -> dict:
    """Call the student's accuracy on each (logits, targets) pair of the case; an exception of the student's code
    ends the calls and is recorded (explained, with the student's line) for the judge to read with the shapes."""
    results: list = []
    for logits, targets in accuracy_cases(case):
        try:
            results.append(accuracy(logits.clone(), targets.clone()))
        except CheckFailed:
            raise
        except Exception as error:  # noqa: BLE001 - the judge reports it with the shapes that explain it
            return {"results": results, "raised": explain(error)[:2000]}
    return {"results": results, "raised": None}
