"""05-scale-trace, the judge: Each trace equals the scales a real GradScaler holds after each step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from harness.checks.lesson05.scale_trace import scale_cases
from harness.contract.case import Case
from harness.contract.compare import isclose_number, judged, type_name
from harness.contract.compare import number as _number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges


@recorded
def real_scale_trace(
    overflows: Sequence[bool], *, init_scale: float, growth_factor: float, backoff_factor: float, growth_interval: int
) -> list[float]:
    """The scale a real torch.amp.GradScaler holds after each update, driven with real inf gradients."""
    weight = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.0)
    scaler = torch.amp.GradScaler(
        "cpu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
        growth_interval=growth_interval,
    )
    trace = []
    for overflow in overflows:
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(weight.sum() * (float("inf") if overflow else 1.0)).backward()
        scaler.step(optimizer)
        scaler.update()
        trace.append(float(scaler.get_scale()))
    return trace


@recorded  # one line from the answer (the count restarted on an overflow): withheld from the student course too
def _trace_without_reset(overflows: Sequence[bool], *, init_scale: float, growth_factor: float, backoff_factor: float,
                         growth_interval: int) -> list[float]:
    """The scales of the rule whose count of clean steps an overflow does not restart ([tracker-not-reset])."""
    scale, tracker, trace = init_scale, 0, []
    for overflow in overflows:
        if overflow:
            scale *= backoff_factor
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * growth_factor, 0
        trace.append(scale)
    return trace


def _trace_by_step_index(overflows: Sequence[bool], *, init_scale: float, growth_factor: float,
                         backoff_factor: float, growth_interval: int) -> list[float]:
    """The rule with growth on every growth_interval-th step (1-based) that is finite, whatever came before."""
    scale, trace = init_scale, []
    for step, overflow in enumerate(overflows, 1):
        if overflow:
            scale *= backoff_factor
        elif step % growth_interval == 0:
            scale *= growth_factor
        trace.append(scale)
    return trace


def _floats(value: Any) -> list[float] | None:
    """A returned trace as a list of floats (a list, a tuple or a 1-D tensor of numbers); None otherwise."""
    if isinstance(value, torch.Tensor) and value.dim() == 1 and value.is_floating_point():
        return [float(v) for v in value]
    if not isinstance(value, (list, tuple)):
        return None
    numbers = [_number(v) for v in value]
    return None if any(n is None for n in numbers) else numbers  # type: ignore[return-value]


def _same_trace(a: Sequence[float], b: Sequence[float]) -> bool:
    """Equal step for step, up to float32 rounding (the real scaler holds its scale in float32)."""
    return len(a) == len(b) and all(isclose_number(x, y, rel_tol=1e-6, abs_tol=0.0) for x, y in zip(a, b, strict=True))


@judges(
    "05-scale-trace",
    hints=Hints(
        nudge="Keep two numbers: the scale and a count of finite steps in a row. An overflow multiplies the scale by "
        "backoff_factor and restarts the count; growth_interval finite steps in a row multiply it by "
        "growth_factor.",
        concept="scaler.update() after each step: on an overflow, scale *= backoff_factor and the count of clean "
        "steps restarts; after growth_interval clean steps in a row, scale *= growth_factor and the count restarts.",
        solution="for overflow in overflows: if overflow: scale *= backoff_factor; tracker = 0  else: tracker += 1; "
        "if tracker == growth_interval: scale *= growth_factor; tracker = 0 -- append scale after every step.",
        section="4. The GradScaler",
    ),
    requires={
        "not-a-list": Requirement("returns a list of scales",
                                  hint="Print what your function returns for three steps: a list of three numbers?"),
        "wrong-length": Requirement("returns one scale per step (the value after that step's update)",
                                    hint="For overflows=[] what should come back? For [False]? Is the initial "
                                    "scale in your list?"),
        "no-backoff": Requirement("an overflow lowers the scale",
                                  hint="What must happen to the scale on a step whose gradients overflowed?"),
        "wrong-backoff": Requirement("an overflow multiplies the scale by backoff_factor",
                                     hint="Which factor does your code use on an overflow: the argument, or a "
                                     "number of your own?"),
        "tracker-not-reset": Requirement("an overflow restarts the count of clean steps",
                                         hint="After an overflow, how many clean steps in a row have there been?"),
        "wrong-growth": Requirement("the scale grows by growth_factor after growth_interval clean steps in a row",
                                    hint="Trace [False] * 4 with growth_interval=2 by hand: at which steps must the "
                                    "scale grow, and by which factor?"),
    },
)
def judge_scale_trace(seen: dict, *, case: Case) -> str:
    """Each trace equals the scales a real GradScaler holds after each step."""
    for (overflows, settings), result in judged(scale_cases(case), seen["traces"]):
        returned = result["returned"]
        got = _floats(returned)
        if got is None:
            fail(
                "not-a-list",
                observed=f"scale_trace returned {type_name(returned)} {returned!r}"[:200],
                expected="a list of floats, one scale per step",
                cause="the function returns something other than the list of scales",
                where="the return statement of scale_trace",
            )
        want = real_scale_trace(overflows, **settings)
        unreset = _trace_without_reset(overflows, **settings)  # on every case: the release records what the tree needs
        if len(got) != len(want):
            fail(
                "wrong-length",
                observed=f"{len(got)} scales for {len(overflows)} steps",
                expected="one scale per step: the value after that step's update()",
                cause="the initial scale is included, or a step is not appended",
                where="where scale_trace appends to its list",
            )
        if _same_trace(got, want):
            continue
        step = next(i for i, (g, w) in enumerate(zip(got, want, strict=True))
                    if not isclose_number(g, w, rel_tol=1e-6, abs_tol=0.0))
        situation = f"with {settings} and overflows={[int(o) for o in overflows]}, after step {step}"
        before = got[step - 1] if step else settings["init_scale"]
        if overflows[step] and got[step] >= before:
            code, cause = "no-backoff", "an overflowing step must multiply the scale by backoff_factor"
        elif overflows[step]:
            factor, wanted = got[step] / before, settings["backoff_factor"]
            code, cause = "wrong-backoff", (f"the scale went from {before:g} to {got[step]:g}, a factor of {factor:g}, "
                                            f"not backoff_factor={wanted:g}")
        elif _same_trace(got, unreset):
            code, cause = "tracker-not-reset", "an overflow must restart the count of finite steps at zero"
        elif _same_trace(got, _trace_by_step_index(overflows, **settings)):
            code, cause = "wrong-growth", (
                "growth decided by the step number (step % growth_interval == 0), not by a count of finite steps in "
                "a row: the scale grows on every growth_interval-th step whatever overflowed before it"
            )
        else:
            code, cause = "wrong-growth", (
                "the scale must grow by growth_factor (the argument), exactly when growth_interval finite steps have "
                "passed in a row since the last growth or overflow: another factor, an off-by-one in the count, or "
                "a count not restarted after a growth"
            )
        fail(
            code,
            observed=f"{situation} your scale is {got[step]:g}",
            expected=f"{want[step]:g}, what torch.amp.GradScaler holds (whole trace: {want})",
            cause=cause,
            where="the update rule inside the loop of scale_trace",
        )
    return "the traced scales equal a real GradScaler's, step for step (backoff, growth, counter reset)"
