"""15-warmup, the probe.

Call `lr_factor` for every step of each schedule; record each value, or the exception it raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.registry import register


def schedule_cases(case: Case) -> list[tuple[int, int, int]]:
    """(warmup_steps, total_steps, steps asked) of each schedule: one with warm-up, one without. Hidden: other
    lengths drawn from the seed, a one-step warm-up, and no warm-up."""
    if not case.hidden:
        return [(4, 12, 16), (0, 5, 8)]
    generator = torch.Generator().manual_seed(case.seeded(159))
    warmup = int(torch.randint(2, 9, (1,), generator=generator))
    total = warmup + int(torch.randint(3, 15, (1,), generator=generator))
    return [(warmup, total, total + 4), (1, 4, 7), (0, 3, 5), (10, 11, 13)]


@register("15-warmup")
def probe_warmup(lr_factor: Callable[[int, int, int], Any], *, case: Case) -> dict:
    """Call `lr_factor` for every step of each schedule; record each value, or the exception it raised."""
    schedules = []
    for warmup, total, steps in schedule_cases(case):
        values: list[Any] = []
        for step in range(steps):
            try:
                values.append(lr_factor(step, warmup, total))
            except Exception as error:  # recorded as data: the judge says which case raised
                values.append({"raised": f"{type(error).__name__}: {error}"[:300]})
                break
        schedules.append(values)
    return {"schedules": schedules}
