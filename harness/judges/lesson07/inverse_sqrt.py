"""07-inverse-sqrt, the judge.

(step + 1) / warmup_steps during warm-up, then sqrt(warmup_steps / (step + 1)): a Python float at every step, step 0
above 0.
"""

from __future__ import annotations

import math

from harness.checks.lesson07.common import is_number
from harness.checks.lesson07.inverse_sqrt import task_inputs
from harness.contract.case import Case
from harness.contract.compare import isclose_numbers, malformed, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges

# What a decay that is not the reference gives at step s (s >= warmup), each with the cause it shows.
WRONG_DECAYS = (
    (lambda s, w: w / (s + 1), "warmup_steps / (step + 1) has no square root: the lr falls as 1 / step, far too fast"),
    (lambda s, w: (s + 1) ** -0.5, "the decay is not scaled by sqrt(warmup_steps): the factor drops from 1 to "
     "1 / sqrt(step + 1) right after the peak"),
    (lambda s, w: math.sqrt(w / s), "sqrt(warmup_steps / step) is one step behind the ramp's step + 1: the factor "
     "stays at 1 for two steps"),
)


@recorded
def reference_inverse_sqrt(warmup_steps: int, steps: int) -> list[float]:
    """The factor at steps 0 .. steps - 1: min((step + 1) / warmup_steps, sqrt(warmup_steps / (step + 1)))."""
    return [min((s + 1) / warmup_steps, math.sqrt(warmup_steps / (s + 1))) for s in range(steps)]


@judges(
    "07-inverse-sqrt",
    hints=Hints(
        nudge="Count the update being taken, n = step + 1: a linear ramp n / warmup_steps up to the peak, then "
        "sqrt(warmup_steps / n) after it. Both pieces are 1 at n = warmup_steps.",
        concept="LambdaLR calls the factor with step 0 for the very first update, so step 0 must already train. "
        "The inverse square root (the Transformer paper's schedule) never reaches 0: it has no total_steps.",
        solution="n = step + 1; return min(n / warmup_steps, math.sqrt(warmup_steps / n))",
        section="8. Warm-up without an end: the inverse square root",
    ),
    requires={
        "not-a-float": Requirement(
            "returns a Python float at every step",
            hint="Print type(inverse_sqrt(5, 4)): torch.rsqrt and torch.tensor give tensors, math.sqrt a float."),
        "zero-first-step": Requirement(
            "the first update already trains: at step 0 the factor is above 0, computed without raising",
            hint="Call inverse_sqrt(0, 4). LambdaLR calls it with step 0 for the first update: what is 0 ** -0.5?"),
        "wrong-warmup": Requirement(
            "during warm-up (step < warmup_steps) the factor rises linearly as (step + 1) / warmup_steps, reaching 1 "
            "at step warmup_steps - 1",
            hint="Print the factors of steps 0 to warmup_steps - 1: equal steps of 1 / warmup_steps, up to 1.0?"),
        "wrong-decay": Requirement(
            "from step warmup_steps on, the factor decays as sqrt(warmup_steps / (step + 1)), continuous at the peak",
            hint="Print the factors around step warmup_steps: is 1 followed by sqrt(warmup_steps / (warmup_steps + "
            "1))?"),
    },
)
def judge_inverse_sqrt(seen: dict, *, case: Case) -> str:
    """The factor at every step of each schedule is a float and matches the reference: ramp, then decay."""
    schedules, inputs = seen.get("schedules"), task_inputs(case)
    if not isinstance(schedules, list) or len(schedules) != len(inputs):
        malformed("not one schedule per case")
    for (warmup, steps), values in zip(inputs, schedules, strict=True):
        want, what = reference_inverse_sqrt(warmup, steps), f"inverse_sqrt(step, warmup_steps={warmup})"
        if not isinstance(values, list) or not 0 < len(values) <= steps:
            malformed("a schedule's values are missing")
        for step, got in enumerate(values):
            if step == 0 and isinstance(got, dict) and "raised" in got:
                fail("zero-first-step", observed=f"{what} raised {got.get('raised')} at step 0",
                     expected=f"{want[0]:.4g} = 1 / warmup_steps: LambdaLR calls the factor with step 0 for the first "
                     "update", cause="a negative power or a division of step (0 ** -0.5, warmup_steps / step)",
                     where="the expressions of inverse_sqrt that take step alone: use step + 1")
            if not is_number(got):
                fail("not-a-float", observed=f"{what} returned {type_name(got)} at step {step}",
                     expected="a Python float (LambdaLR multiplies the base lr by it)",
                     cause="a branch without a return" if got is None else "torch arithmetic (torch.rsqrt, "
                     "torch.tensor): use math.sqrt, or convert with float(...)", where="the return of inverse_sqrt")
        if len(values) != steps:
            malformed("a schedule stops early without an exception")
        wrong = [s for s in range(steps) if not isclose_numbers([values[s]], [want[s]])]
        if not wrong:
            continue
        step, shown = wrong[0], ", ".join(f"{v:.3g}" for v in values[:warmup + 3])
        observed = f"{what} gives {values[step]:.4g} at step {step}; steps 0.. give {shown}"
        if step == 0 and values[0] <= 0:
            fail("zero-first-step", observed=observed, expected=f"{want[0]:.4g} = 1 / warmup_steps",
                 cause="LambdaLR calls the factor with step 0 for the first update (not before training): a factor "
                 "of 0 wastes it", where="the value of inverse_sqrt at step 0")
        if step < warmup:
            fail("wrong-warmup", observed=observed, expected=f"{want[step]:.4g} = (step + 1) / warmup_steps",
                 cause="the ramp has another shape or end: it reaches 1 at step warmup_steps - 1, in equal steps",
                 where="the warm-up part of inverse_sqrt")
        causes = [cause for decay, cause in WRONG_DECAYS
                  if isclose_numbers(values[warmup:], [decay(s, warmup) for s in range(warmup, steps)])]
        fail("wrong-decay", observed=observed, expected=f"{want[step]:.4g} = sqrt(warmup_steps / (step + 1))",
             cause=causes[0] if causes else "the decay has another exponent, scale or step count than "
             "sqrt(warmup_steps / (step + 1))", where="the decay part of inverse_sqrt")
    return f"a linear warm-up, then sqrt(warmup_steps / (step + 1)), on {len(inputs)} warm-up lengths"
