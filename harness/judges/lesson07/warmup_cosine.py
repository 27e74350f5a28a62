"""07-warmup-cosine, the judge.

The factor matches the closed form on every triple, and LambdaLR gives base lr times the closed form.
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.checks.lesson07.common import is_number
from harness.checks.lesson07.warmup_cosine import lambda_lr_setting, warmup_cases
from harness.contract.case import Case
from harness.contract.compare import isclose_number, isclose_numbers
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson07.common import warmup_cosine_reference


def _ramps_from_zero(values: Sequence[Any], cases: Sequence[tuple[int, int, int]]) -> bool:
    """Every warmup-phase value is `step / warmup_steps`: the ramp one step behind the course's convention."""
    ramp = [(value, step / warmup) for value, (step, warmup, _) in zip(values, cases, strict=True) if step < warmup]
    return bool(ramp) and all(is_number(value) and isclose_number(value, want, rel_tol=1e-6, abs_tol=1e-9)
                              for value, want in ramp)


def _compare_warmup_cosine(value: Any, step: int, warmup: int, total: int, expected: float, *,
                           ramps_from_zero: bool) -> None:
    """Fail with the code of the first thing wrong with one value (`expected`: the reference's); `ramps_from_zero`:
    every warmup value the student gave is `step / warmup_steps`."""
    where = f"warmup_cosine(step={step}, warmup_steps={warmup}, total_steps={total})"
    if not is_number(value):
        fail(
            "not-a-float",
            observed=f"{where} returned a {type_name(value)}",
            expected="a Python float (LambdaLR multiplies the base lr by it)",
            cause="returning a tensor or numpy value; math.cos and plain arithmetic give a float",
            where="the return statement of warmup_cosine",
        )
    if isclose_number(value, expected, rel_tol=1e-6, abs_tol=1e-9):
        return
    if step < warmup and ramps_from_zero:
        fail(
            "warmup-starts-at-zero",
            observed=f"{where} = {value:.6g}, and every warmup value is step / warmup_steps",
            expected=f"{expected:.6g} = (step + 1) / warmup_steps",
            cause="the ramp starts at 0: the first step trains with lr 0 (LambdaLR's factor at step 0 is the lr of "
            "the first optimizer step), and the peak comes one step after the warmup",
            where="the `step < warmup_steps` branch",
        )
    if step < warmup:
        fail(
            "warmup-wrong",
            observed=f"{where} = {value:.6g}",
            expected=f"{expected:.6g} = (step + 1) / warmup_steps (a linear ramp from 1 / warmup_steps at step 0 "
            f"that reaches 1 at step {warmup - 1}, the last warmup step)",
            cause="integer division ((step + 1) // warmup_steps), dividing by total_steps, or another slope "
            "during warmup",
            where="the `step < warmup_steps` branch",
        )
    if step <= total:
        fail(
            "cosine-wrong",
            observed=f"{where} = {value:.6g}",
            expected=(
                f"{expected:.6g} = 0.5 * (1 + cos(pi * progress)) with progress = (step - warmup_steps) / "
                f"(total_steps - warmup_steps) = {(step - warmup) / max(1, total - warmup):.4g}"
            ),
            cause="progress measured from 0 instead of from the end of warmup, a wrong cosine period, or a "
            "branch boundary off by one (step <= warmup_steps)",
            where="the cosine branch: progress and the cosine",
        )
    fail(
        "rises-after-total",
        observed=f"{where} = {value:.6g} (past the end of the schedule)",
        expected="0.0: once step >= total_steps the factor stays at the end of the cosine",
        cause="progress is not clamped to 1, so the cosine comes back up after total_steps",
        where="clamp progress with min(1.0, ...)",
    )


def _judge_zero_division(step: int, warmup: int, total: int, line: str, expected: dict[tuple[int, int, int], float]
                         ) -> None:
    """Fail naming the zero the student's factor divided by: the warm-up length, the decay span, or both
    (`expected`: the reference on each of the case's triples, among which the probe found the one that raised)."""
    if (step, warmup, total) not in expected:
        raise ValueError("the observation of the division by zero names a triple the case does not hold")
    zeros = [name for name, size in (("warmup_steps (no warm-up at all)", warmup),
                                     ("total_steps - warmup_steps (no decay span)", total - warmup)) if size == 0]
    if not zeros:  # the probe records a ZeroDivisionError only where the arguments hold a zero
        raise ValueError("the observation of the division by zero is malformed")
    fail(
        "divides-by-zero",
        observed=f"warmup_cosine(step={step}, warmup_steps={warmup}, total_steps={total}) raised ZeroDivisionError"
        + (f" at: {line.strip()}" if line.strip() else ""),
        expected=f"{expected[step, warmup, total]:.6g}: the text allows no warm-up and no decay span",
        cause=f"a division by {' and by '.join(zeros)}, which is 0 here",
        where="the divisions in warmup_cosine: divide by max(1, total_steps - warmup_steps), and use the ramp "
        "only while step < warmup_steps",
        hint="The formula divides by max(1, total_steps - warmup_steps), never by the bare difference, and by "
        "warmup_steps only inside the `step < warmup_steps` branch: which of your divisions is unguarded?",
    )


@judges(
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
def judge_warmup_cosine(seen: dict, *, case: Case) -> str:
    """The factor matches the closed form on every triple, and LambdaLR gives base lr times the closed form."""
    cases = warmup_cases(case)
    base_lr, warmup, total = lambda_lr_setting(case)
    # every reference value first, from the case alone (the student tree answers these from its recorded table)
    factors = {triple: warmup_cosine_reference(*triple) for triple in cases}
    expected = [base_lr * warmup_cosine_reference(s, warmup, total) for s in range(total + 4)]
    if seen.get("zero_division"):
        _judge_zero_division(*seen["zero_division"], factors)
    ramps_from_zero = _ramps_from_zero(seen["values"], cases)
    for value, triple in zip(seen["values"], cases, strict=True):
        _compare_warmup_cosine(value, *triple, factors[triple], ramps_from_zero=ramps_from_zero)
    lrs = seen["lambda_lrs"]
    if not isinstance(lrs, list) or len(lrs) != len(expected):
        raise TypeError("the observation of the LambdaLR run is malformed")
    if not isclose_numbers(lrs, expected):
        first = next(i for i, lr in enumerate(lrs) if not isclose_numbers([lr], [expected[i]]))
        fail(
            "cosine-wrong",
            observed=f"LambdaLR with your factor gives lr {lrs[first]!r:.12} at step {first}",
            expected=f"{expected[first]:.6g} (base lr {base_lr} x the closed form)",
            cause="the factor depends on something other than its three arguments (a global, or a state kept "
            "between calls)",
            where="warmup_cosine",
        )
    return f"matches the closed form on {len(cases)} seeded cases (boundaries included) and drives LambdaLR correctly"
