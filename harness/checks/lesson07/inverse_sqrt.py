"""07-inverse-sqrt, the probe.

Call `inverse_sqrt(step, warmup_steps)` at every step of each schedule; record the values or step 0's ZeroDivisionError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.registry import register


def task_inputs(case: Case) -> list[tuple[int, int]]:
    """(warmup_steps, steps) of each schedule; hidden: a warm-up length drawn from the seed, then 2, 1 and 25."""
    generator = torch.Generator().manual_seed(case.seeded(8849 + (1 if case.hidden else 0)))
    warmup = int(torch.randint(3, 13, (1,), generator=generator))
    return [(warmup, 3 * warmup), (2, 9), (1, 5), (25, 60)] if case.hidden else [(4, 16), (10, 30)]


@register("07-inverse-sqrt")
def probe_inverse_sqrt(inverse_sqrt: Callable[..., Any], *, case: Case) -> dict:
    """Call `inverse_sqrt` at steps 0, 1, ... of each schedule; step 0's ZeroDivisionError is data, others raise."""
    schedules = []
    for warmup, steps in task_inputs(case):
        try:
            first = inverse_sqrt(0, warmup)
        except ZeroDivisionError as error:  # the judge says why step 0 must not raise
            schedules.append([{"raised": f"ZeroDivisionError: {error}"[:300]}])
            continue
        schedules.append([first] + [inverse_sqrt(step, warmup) for step in range(1, steps)])
    return {"schedules": schedules}
