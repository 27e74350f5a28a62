"""15-warmup, the judge.

(step + 1) / warmup_steps, then linear decay to 0 at total_steps, 0 after; no warm-up when warmup_steps = 0.
"""

from __future__ import annotations

import math

from harness.checks.lesson15.warmup import schedule_cases
from harness.contract.case import Case
from harness.contract.compare import isclose_number, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges
from harness.contract.wire import WireError


@recorded
def reference_lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up ((step + 1) / warmup_steps), then linear decay to 0 at total_steps, 0 after."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / (total_steps - warmup_steps))


@judges(
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
def judge_warmup(seen: dict, *, case: Case) -> str:
    """(step + 1) / warmup_steps, then linear decay to 0 at total_steps, 0 after; no warm-up when warmup_steps = 0."""
    schedules = seen["schedules"]
    if not isinstance(schedules, list) or len(schedules) != len(schedule_cases(case)):
        raise WireError("malformed observation: not one schedule per case")
    for (warmup, total, steps), values in zip(schedule_cases(case), schedules, strict=True):
        if not isinstance(values, list) or not values or len(values) > steps:
            raise WireError("malformed observation: a schedule's values are missing")
        what = f"lr_factor(step, warmup_steps={warmup}, total_steps={total})"
        for step, got in enumerate(values):
            if isinstance(got, dict) and "raised" in got:
                if warmup == 0 and "ZeroDivisionError" in str(got["raised"]):
                    fail("no-warmup-case", observed=f"{what} raised {got['raised']} at step {step}",
                         expected=f"{reference_lr_factor(step, warmup, total):g}: no warm-up, the decay from step 0",
                         cause="the warm-up division by warmup_steps runs even when warmup_steps is 0",
                         where="the warm-up branch of lr_factor (its condition)")
                fail("raised", observed=f"{what} raised {got['raised']} at step {step}",
                     expected="a number for every step", cause="see the error above",
                     where="the line of lr_factor that raised")
            if isinstance(got, bool) or not isinstance(got, (int, float)):
                fail("not-a-number", observed=f"{what} returned {type_name(got)} at step {step}",
                     expected="a Python float (or int)",
                     cause="a branch has no return statement" if got is None else
                     "a tensor was built (torch.tensor, torch.cos, a tensor step): convert with float(...) or use math"
                     if type_name(got) == "Tensor" else "another type than a number: convert it with float(...)",
                     where="the return statements of lr_factor")
        if len(values) != steps:
            raise WireError("malformed observation: a schedule stops early without an exception")
        want = [reference_lr_factor(step, warmup, total) for step in range(steps)]
        wrong = [step for step in range(steps)
                 if not isclose_number(values[step], want[step], rel_tol=1e-6, abs_tol=1e-6)]
        if not wrong:
            continue
        step = wrong[0]
        shown = ", ".join(f"{v:.3g}" for v in values[: min(steps, total + 2)])
        expected = ", ".join(f"{v:.3g}" for v in want[: min(steps, total + 2)])
        hint = None
        if step < warmup and step == 0 and abs(values[0]) < 1e-12:
            code, cause = "zero-first-step", "step / warmup_steps: the first step gets learning rate 0 (count from " \
                "step + 1)"
        elif step < warmup:
            code, cause = "wrong-warmup", "the warm-up ramp has another slope or end: (step + 1) / warmup_steps " \
                "reaches 1 at step warmup_steps - 1"
        elif step >= total and values[step] < 0:
            code, cause = "negative-after-end", "the decay formula keeps going past total_steps: clamp it at 0"
        elif warmup == 0 and step == 0 and abs(values[0]) < 1e-12:
            code, cause = "no-warmup-case", "with warmup_steps = 0 the first step got factor 0: without warm-up the " \
                "schedule starts at 1"
        elif step >= warmup and all(isclose_number(values[s], 1.0) for s in range(warmup, min(steps, total))):
            code, cause = "wrong-decay", "no decay: the factor stays at 1 after the warm-up"
        else:
            cosine = 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) if step < total else 0.0
            over_total = max(0.0, (total - step) / total)
            early = total > warmup and all(
                isclose_number(values[s], max(0.0, (total - s - 1) / (total - warmup)), abs_tol=1e-6)
                for s in range(warmup, min(steps, total)))
            cause = ("a cosine decay: the exercise asks for a straight line" if abs(values[step] - cosine) < 1e-6
                     else "the decay counts from step 0 over total_steps, not from the end of the warm-up"
                     if abs(values[step] - over_total) < 1e-6 else
                     "the decay runs one step early, (total_steps - step - 1) / (total_steps - warmup_steps): it is "
                     "below 1 at step warmup_steps and reaches 0 at total_steps - 1; the decay is "
                     "(total_steps - step) / (total_steps - warmup_steps)" if early else
                     "the decay starts, ends or falls elsewhere than from 1 at warmup_steps to 0 at total_steps")
            code = "wrong-decay"
            hint = ("Print lr_factor(warmup_steps, warmup_steps, total_steps) and lr_factor(total_steps - 1, "
                    "warmup_steps, total_steps): the first should be 1, the second 1 / (total_steps - warmup_steps). "
                    "What does your decay subtract?") if early else None
        fail(code, observed=f"{what} gives {values[step]:.4g} at step {step}; steps 0.. give {shown}",
             expected=f"{want[step]:.4g}; steps 0.. give {expected}", cause=cause,
             where="the warm-up branch of lr_factor" if step < warmup else "the decay branch of lr_factor",
             hint=hint)
    return "(step + 1) / warmup_steps, then a linear decay to 0 at total_steps, with and without warm-up"
