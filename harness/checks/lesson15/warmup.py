"""15-warmup, the probe.

Call `lr_factor` for every step of each schedule; record each value, or the exception it raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register(
    "15-warmup",
    hints=Hints(
        nudge="Two pieces: before warmup_steps, (step + 1) / warmup_steps; from there, the share of the decay "
        "still to go, (total_steps - step) / (total_steps - warmup_steps), never below 0.",
        concept="LambdaLR multiplies the base learning rate by your function of the step count (0 for the first "
        "optimizer step). Warm-up rises linearly so that the first step already learns and step warmup_steps - 1 "
        "reaches the full rate; the decay then falls linearly to 0 at total_steps and stays there.",
        solution="if step < warmup_steps: return (step + 1) / warmup_steps\n"
        "return max(0.0, (total_steps - step) / (total_steps - warmup_steps))",
        section="4. A small transformer against an LSTM",
    ),
    requires={
        "not-a-number": Requirement("returns a Python number (LambdaLR multiplies the learning rate by it)",
                                    hint="Print type(lr_factor(0, 4, 12)): a tensor or None is not a factor."),
        "zero-first-step": Requirement(
            "the first step (step 0) already has a learning rate above 0",
            hint="What is your factor at step 0? A step with learning rate 0 is a wasted step."),
        "wrong-warmup": Requirement(
            "during warm-up the factor is (step + 1) / warmup_steps, reaching 1 at step warmup_steps - 1",
            hint="Print the factors of steps 0 to warmup_steps: they should rise by 1/warmup_steps and reach 1.0 "
            "exactly at step warmup_steps - 1."),
        "wrong-decay": Requirement(
            "after warm-up it falls linearly from 1 at step warmup_steps to 0 at step total_steps",
            hint="Print the factor at step warmup_steps (1.0?) and at step total_steps (0.0?); is the fall in "
            "between a straight line, counted from the end of the warm-up?"),
        "negative-after-end": Requirement(
            "it is 0 from total_steps on, never negative",
            hint="Print the factor at total_steps + 3: a negative learning rate climbs the loss."),
        "no-warmup-case": Requirement(
            "warmup_steps = 0 means no warm-up (decay from step 0), without dividing by zero",
            hint="Call lr_factor(0, 0, 5): which division has warmup_steps in its denominator, and does that line "
            "run when there is no warm-up?"),
    },
)
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
