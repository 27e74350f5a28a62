"""00-accuracy, the probe: Call the student's accuracy on each (logits, targets) pair of the case."""

from __future__ import annotations

from typing import Callable

import torch

from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.failure import CheckFailed, Hints, Requirement
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


@register(
    "00-accuracy",
    hints=Hints(
        nudge="The predicted class of each row is the index of its largest logit; compare it with the targets.",
        concept="argmax(dim=1) picks the class of each row of a (batch, classes) tensor; comparing with the "
                "targets gives booleans, and their mean is the fraction correct. .item() makes it a float.",
        solution="return (logits.argmax(dim=1) == targets).float().mean().item()",
        section="3. Exercises"),
    requires={
        "not-a-float": Requirement(
            "returns a Python float",
            hint="Print type(accuracy(logits, targets)): a one-element tensor is not a float yet."),
        "percent-not-fraction": Requirement(
            "a fraction between 0 and 1, not a percentage",
            hint="What should accuracy return when every prediction is right: 1 or 100?"),
        "wrong-accuracy": Requirement(
            "the fraction of rows whose largest logit is at the target class",
            hint="Work the 3-row example of the lesson by hand: which class does each row predict, and how many "
                 "match?"),
    },
)
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
