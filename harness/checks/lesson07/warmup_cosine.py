"""07-warmup-cosine, the probe.

Evaluate the student's factor on the case's triples; if every value is a number, drive LambdaLR with it.
"""

from __future__ import annotations

import traceback
from typing import Callable

import torch

from harness.checks.lesson07.common import is_number, scheduler_trace
from harness.contract.case import Case
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


@register("07-warmup-cosine")
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
