"""07-inverse-sqrt, the judge.

A Python float at every step: (step + 1) / warmup_steps during warm-up, then sqrt(warmup_steps / (step + 1)).
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

WRONG_DECAYS = {  # the cause a decay shows, and what it gives at step s >= warmup_steps w
    "warmup_steps / (step + 1) has no square root: the lr falls as 1 / step": lambda s, w: w / (s + 1),
    "1 / sqrt(step + 1) is not scaled by sqrt(warmup_steps): it drops after the peak": lambda s, w: (s + 1) ** -0.5,
    "sqrt(warmup_steps / step) is one step behind the ramp's step + 1: 1 for two steps": lambda s, w: math.sqrt(w / s),
}


@recorded
def reference_inverse_sqrt(warmup_steps: int, steps: int) -> list[float]:
    """The factor at steps 0 .. steps - 1: min((step + 1) / warmup_steps, sqrt(warmup_steps / (step + 1)))."""
    return [min((s + 1) / warmup_steps, math.sqrt(warmup_steps / (s + 1))) for s in range(steps)]


@judges(
    "07-inverse-sqrt",
    hints=Hints(
        nudge="Count the update being taken, n = step + 1: a ramp n / warmup_steps, then sqrt(warmup_steps / n).",
        concept="LambdaLR calls the factor with step 0 for the first update; the Transformer's schedule has no end.",
        solution="n = step + 1; return min(n / warmup_steps, math.sqrt(warmup_steps / n))",
        section="8. Warm-up without an end: the inverse square root",
    ),
    requires={
        "not-a-float": Requirement("returns a Python float at every step", hint="Print type(inverse_sqrt(5, 4))."),
        "zero-first-step": Requirement("the first update already trains: at step 0 the factor is above 0, computed "
                                       "without raising", hint="Call inverse_sqrt(0, 4). What is 0 ** -0.5?"),
        "wrong-warmup": Requirement("during warm-up (step < warmup_steps) the factor rises linearly as (step + 1) / "
                                    "warmup_steps, reaching 1 at step warmup_steps - 1",
                                    hint="Print steps 0 to warmup_steps - 1: equal steps of 1 / warmup_steps to 1?"),
        "wrong-decay": Requirement("from step warmup_steps on, the factor decays as sqrt(warmup_steps / (step + 1)), "
                                   "continuous at the peak", hint="Print the factors around step warmup_steps."),
    },
)
def judge_inverse_sqrt(seen: dict, *, case: Case) -> str:
    """Every schedule's factors: step 0 above 0, floats, the ramp, then the decay."""
    schedules, inputs = seen.get("schedules"), task_inputs(case)
    if not isinstance(schedules, list) or len(schedules) != len(inputs) or not all(v and isinstance(v, list)
                                                                                   for v in schedules):
        malformed("not one list of factors per schedule")
    for (warmup, steps), values in zip(inputs, schedules, strict=True):
        want, what, first = reference_inverse_sqrt(warmup, steps), f"inverse_sqrt(step, {warmup})", values[0]
        if isinstance(first, dict) and "raised" in first or is_number(first) and first <= 0:
            said, why = (f"raised {first['raised']}", "0 ** -0.5 or a division by step raises there") if isinstance(
                first, dict) else (f"is {first}", "a factor of 0 wastes it")
            fail("zero-first-step", observed=f"{what} {said} at step 0", expected=f"{want[0]:.4g} = 1 / warmup_steps",
                 cause=f"LambdaLR calls the factor with step 0 for the first update, not before training: {why}",
                 where="inverse_sqrt at step 0: count the update being taken, step + 1")
        bad = next((s for s, v in enumerate(values) if not is_number(v)), None)
        if bad is not None:
            fail("not-a-float", observed=f"{what} returned {type_name(values[bad])} at step {bad}",
                 expected="a Python float", cause="a branch without return, or torch arithmetic (use math.sqrt)",
                 where="the return statements of inverse_sqrt")
        if len(values) != steps:
            malformed("a schedule of another length")
        step = next((s for s in range(steps) if not isclose_numbers([values[s]], [want[s]])), None)
        if step is None:
            continue
        observed = f"{what} is {values[step]:.4g} at step {step} (from 0: {[round(v, 3) for v in values[:step + 3]]})"
        if step < warmup:
            fail("wrong-warmup", observed=observed, expected=f"{want[step]:.4g} = (step + 1) / warmup_steps",
                 cause="the ramp has another shape or end", where="the warm-up part of inverse_sqrt")
        causes = [cause for cause, decay in WRONG_DECAYS.items()
                  if isclose_numbers(values[warmup:], [decay(s, warmup) for s in range(warmup, steps)])]
        fail("wrong-decay", observed=observed, expected=f"{want[step]:.4g} = sqrt(warmup_steps / (step + 1))",
             cause=(causes or ["another exponent, scale or step count"])[0], where="the decay part of inverse_sqrt")
    return f"a linear warm-up, then sqrt(warmup_steps / (step + 1)), on {len(inputs)} warm-up lengths"
