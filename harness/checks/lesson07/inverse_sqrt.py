"""07-inverse-sqrt, the probe.

Call `inverse_sqrt(step, warmup_steps)` at every step of each schedule; record the values, or step 0's
ZeroDivisionError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.registry import register


def task_inputs(case: Case) -> list[tuple[int, int]]:
    """(warmup_steps, steps asked) of each schedule. Hidden: a warm-up length drawn from the seed, the shortest
    one with a ramp (2), a one-step warm-up and a long one."""
    if not case.hidden:
        return [(4, 16), (10, 30)]
    generator = torch.Generator().manual_seed(case.seeded(7107))
    warmup = int(torch.randint(3, 13, (1,), generator=generator))
    return [(warmup, 3 * warmup), (2, 9), (1, 5), (25, 60)]


@register("07-inverse-sqrt")
def probe_inverse_sqrt(inverse_sqrt: Callable[[int, int], Any], *, case: Case) -> dict:
    """Call `inverse_sqrt` for steps 0, 1, ... of each schedule; record each value, or the ZeroDivisionError step 0
    raised (another exception is the student's, with their line)."""
    schedules = []
    for warmup, steps in task_inputs(case):
        try:
            first = inverse_sqrt(0, warmup)
        except ZeroDivisionError as error:  # recorded as data: the judge says why step 0 must not raise
            schedules.append([{"raised": f"ZeroDivisionError: {error}"[:300]}])
            continue
        schedules.append([first] + [inverse_sqrt(step, warmup) for step in range(1, steps)])
    return {"schedules": schedules}
