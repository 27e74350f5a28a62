"""07-warmup-cosine, the probe.

Evaluate the student's factor on the case's triples; if every value is a number, drive LambdaLR with it.
"""

from __future__ import annotations

import traceback
from typing import Callable

import torch

from harness.checks.lesson07.common import is_number, scheduler_trace
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register


def warmup_cases(case: Case) -> list[tuple[int, int, int]]:
    """(step, warmup, total) triples: fixed landmarks first, then seeded draws that favour the boundaries."""
    hidden = case.hidden
    # landmarks: the ramp's ends, the peak, the end, past the end, no warmup at all, no decay span at all
    cases = [(0, 5, 50), (4, 5, 50), (5, 5, 50), (50, 5, 50), (80, 5, 50), (0, 0, 10), (3, 0, 10), (5, 5, 5), (9, 5, 5)]
    generator = torch.Generator().manual_seed(case.seeded(23 if hidden else 19))

    def draw(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=generator))

    for _ in range(400 if hidden else 150):
        warmup = draw(0 if hidden else 1, 200 if hidden else 20)
        total = draw(warmup + (0 if hidden else 1), warmup + (2000 if hidden else 200))
        anywhere = draw(0, total + (500 if hidden else 50))
        steps = [anywhere] * 3 + [max(0, warmup - 1), warmup, total, total + 1]
        cases.append((steps[draw(0, 6)], warmup, total))
    return cases


def lambda_lr_setting(case: Case) -> tuple[float, int, int]:
    """Base lr, warmup and total steps of the LambdaLR run."""
    return (0.3, 7, 40) if case.hidden else (0.3, 5, 30)


@register(
    "07-warmup-cosine",
    hints=Hints(
        nudge="Two pieces: a linear ramp while step < warmup_steps that already trains at step 0 and reaches 1 at "
        "the last warmup step, then a half cosine from 1 down to 0 over the remaining total_steps - warmup_steps "
        "steps, and 0 after that.",
        concept="The ramp is (step + 1) / warmup_steps (step counts the optimizer steps already taken, so the step "
        "being taken is step + 1); the cosine is 0.5 * (1 + cos(pi * progress)) where progress goes from 0 at "
        "step warmup_steps to 1 at total_steps and is clamped there.",
        solution="if step < warmup_steps: return (step + 1) / warmup_steps; progress = min(1.0, (step - "
        "warmup_steps) / max(1, total_steps - warmup_steps)); return 0.5 * (1.0 + math.cos(math.pi * progress))",
        section="2. Warmup then cosine, as a `LambdaLR`",
    ),
    requires={
        "not-a-float": Requirement(
            "returns a Python float",
            hint="What type does your return statement produce? torch.cos and torch.tensor give tensors; "
            "math.cos and plain arithmetic give floats."),
        "warmup-starts-at-zero": Requirement(
            "the first step already trains: the factor at step 0 is 1 / warmup_steps, not 0",
            hint="LambdaLR's factor at step 0 is the learning rate of the very first optimizer step. What does your "
            "function give at step 0, and how many steps has the optimizer taken once that step is done?"),
        "warmup-wrong": Requirement(
            "during warmup the factor is (step + 1) / warmup_steps: 1 / warmup_steps at step 0, reaching 1 at step "
            "warmup_steps - 1",
            hint="Print the factors of steps 0 to warmup_steps - 1: do they rise in equal steps of 1 / warmup_steps "
            "and reach 1.0 at the last warmup step? Does Python's // round the ramp down?"),
        "cosine-wrong": Requirement(
            "after warmup the factor is 0.5 * (1 + cos(pi * progress)), progress measured from the end of warmup",
            hint="At step == warmup_steps the factor must be exactly 1: where does your progress start, and "
            "what does it reach at total_steps?"),
        "rises-after-total": Requirement(
            "after total_steps the factor stays at 0",
            hint="Evaluate your function at 2 * total_steps: the cosine comes back up unless progress stops at 1."),
        "divides-by-zero": Requirement(
            "no warm-up at all (warmup_steps = 0) and no decay span (total_steps = warmup_steps) are valid: the "
            "factor never divides by zero",
            hint="Call your function with warmup_steps = 0 and with total_steps = warmup_steps: which division "
            "meets a zero? The formula's max(1, total_steps - warmup_steps) is there for it."),
    },
)
def probe_warmup_cosine(factor: Callable[[int, int, int], float], *, case: Case) -> dict:
    """Evaluate the student's factor on the case's triples; if every value is a number, drive LambdaLR with it."""
    values = []
    for step, warmup, total in warmup_cases(case):
        try:
            values.append(factor(step, warmup, total))
        except ZeroDivisionError as error:
            if warmup and total != warmup:  # no zero in the arguments: raised as is, with its line
                raise
            # the judge names the zero it met: no warm-up, or no decay span
            line = traceback.extract_tb(error.__traceback__)[-1].line or ""
            return {"values": values, "zero_division": [step, warmup, total, line[:200]], "lambda_lrs": None}
    if not all(is_number(value) for value in values):  # LambdaLR would fail on it: the judge names the value
        return {"values": values, "lambda_lrs": None}
    base_lr, warmup, total = lambda_lr_setting(case)
    make = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: factor(s, warmup, total))  # noqa: E731
    return {"values": values, "lambda_lrs": scheduler_trace(make, base_lr, total + 3)}
