"""07-amp-skip, the judge.

The scheduler advances exactly once per real optimizer step; skipped steps are reported and leave it alone.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from harness.checks.lesson07.amp_skip import amp_model, amp_setting
from harness.checks.lesson07.common import scheduler_trace
from harness.contract.case import Case
from harness.contract.compare import isclose_number, isclose_numbers, real
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import Opaque
from harness.judges.lesson07.common import _fmt, _order_note, _replay_steps, _used_lrs


def _reference_grads(
    seed: int, params: list[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor
) -> list[torch.Tensor]:
    """The true gradients of the MSE loss of the amp model holding `params` on one batch."""
    model = amp_model(seed)
    with torch.no_grad():
        for parameter, value in zip(model.parameters(), params, strict=True):
            parameter.copy_(value)
    nn.functional.mse_loss(model(inputs), targets).backward()
    return [model.weight.grad, model.bias.grad]


def _as_flag(value: Any) -> bool | None:
    """A returned bool (or a one-element tensor, or a numpy bool) as a bool; None for anything else."""
    if isinstance(value, Opaque) and value.type_name == "bool_" and value.text in ("True", "False"):
        return value.text == "True"
    number = real(value) if not isinstance(value, bool) else float(value)
    return None if number is None else bool(number)


@judges(
    "07-amp-skip", nonfinite=('steps/*', 'final/*'),
    hints=Hints(
        nudge="When scaler.step() finds inf/NaN gradients it skips optimizer.step() and scaler.update() lowers "
        "the scale. If the scheduler still advances, the schedule runs ahead of the real updates.",
        concept="The scale only drops after a skipped step (it grows after growth_interval good steps): compare "
        "scaler.get_scale() before scaler.step and after scaler.update().",
        solution="scale = scaler.get_scale(); scaler.step(optimizer); scaler.update(); "
        "stepped = scaler.get_scale() >= scale; if stepped: scheduler.step(); "
        "optimizer.zero_grad(set_to_none=True); return stepped",
        section="6. When the `GradScaler` skips a step",
    ),
    requires={
        "bypasses-scaler": Requirement(
            "the update goes through scaler.step(optimizer), which skips overflowing steps",
            hint="Did an update happen on a batch whose gradients hold inf? Who decides to skip it?"),
        "wrong-step-count": Requirement(
            "one scaler.step(optimizer) per call, and the gradients reset after it",
            hint="Count the real optimizer steps: one per good batch. Is .grad reset after every call, so that "
            "an inf from a skipped batch does not stay?"),
        "loss-not-scaled": Requirement(
            "backward goes through scaler.scale(loss), scaled once",
            hint="scaler.step unscales the gradients: were they scaled exactly once before?"),
        "steps-inconsistent": Requirement(
            "each optimizer step uses the true gradients of its own batch",
            hint="Between backward and scaler.step, does anything change the gradients (clipping while they "
            "are still scaled, leftovers of an earlier batch)?"),
        "skip-not-reported": Requirement(
            "returns whether the optimizer really stepped",
            hint="The scale also grows after good steps: does your test treat any change of scale as a skip?"),
        "scheduler-not-stepped": Requirement(
            "the scheduler is stepped after every real step",
            hint="Print optimizer.param_groups[0]['lr'] after a few calls: does it ever change?"),
        "scheduler-advanced-on-skip": Requirement(
            "the scheduler is not stepped when the optimizer step was skipped",
            hint="On a batch that overflowed, was there an update? Then should the schedule move?"),
    },
)
def judge_amp_skip(seen: dict, *, case: Case) -> str:
    """The scheduler advances exactly once per real optimizer step; skipped steps are reported and leave it alone."""
    setting = amp_setting(case)
    count, poisoned = len(setting.batches), setting.poisoned
    real = count - len(poisoned)
    steps, warned = seen["steps"], seen["warned"]
    if len(steps) == count:
        fail(
            "bypasses-scaler",
            observed=f"optimizer.step() ran on all {count} batches, including {len(poisoned)} with inf gradients",
            expected=f"{real} optimizer steps: scaler.step(optimizer) skips the overflowing ones",
            cause="calling optimizer.step() directly instead of scaler.step(optimizer)",
            where="the update: scaler.step(optimizer); scaler.update()",
        )
    if len(steps) != real:
        fail(
            "wrong-step-count",
            observed=f"{len(steps)} optimizer steps over {count} batches ({len(poisoned)} overflowing)",
            expected=f"{real}: one per batch whose gradients are finite",
            cause=("optimizer.step() called in addition to scaler.step(optimizer), or a step taken several times "
                   "per call" if len(steps) > real else
                   "the gradients are not reset after each call (zero_grad missing: the inf of a skipped batch "
                   "stays in .grad, so every later step is skipped too), or scaler.step(optimizer) not called "
                   "every time"),
            where="scaler.step(optimizer) once per call, and optimizer.zero_grad(set_to_none=True) after it",
        )
    finite = [batch for i, batch in enumerate(setting.batches) if i not in poisoned]
    for step, (inputs, targets) in zip(steps, finite, strict=True):
        expected_grads = _reference_grads(setting.model_seed, step["params"], inputs, targets)
        grad = step["grads"][0]
        ratio = float(grad.norm() / expected_grads[0].norm()) if isinstance(grad, torch.Tensor) else math.nan
        # a scale missing or applied twice multiplies the gradients by a power of two; anything else is
        # left to the replay below (clipped or accumulated gradients)
        power = math.log2(ratio) if ratio > 0 and math.isfinite(ratio) else math.nan
        if abs(power) >= 0.99 and isclose_number(power, round(power), rel_tol=1e-9, abs_tol=1e-2):
            fail(
                "loss-not-scaled",
                observed=f"gradients at optimizer.step() are {ratio:.3g}x the true ones (2**{round(power)})",
                expected="the true gradients (scaler.step unscales what scaler.scale(loss) scaled)",
                cause="loss.backward() instead of scaler.scale(loss).backward(), or the loss scaled twice",
                where="the backward call",
            )
    returned = [_as_flag(r) for r in seen["returned"]]
    expected_returns = [i not in poisoned for i in range(count)]
    if returned != expected_returns:
        fail(
            "skip-not-reported",
            observed=f"returned {seen['returned']!r:.200}",
            expected=f"{expected_returns} (False where the batch overflowed and the step was skipped)",
            cause="the return value does not say whether the optimizer stepped; note the scale also grows after "
            "good steps, so compare with >=",
            where="compare scaler.get_scale() before and after scaler.update()",
        )
    used = _used_lrs(seen)
    schedule = scheduler_trace(setting.make, 0.1, count)
    last_epoch = seen["last_epoch"]
    if isclose_numbers(used, schedule[:real]) and last_epoch == real:
        _replay_steps(amp_model(setting.model_seed), seen, finite)
        return f"{len(poisoned)} skipped steps left the schedule alone; {real} real steps used {_fmt(schedule[:real])}"
    if len(set(used)) == 1 and last_epoch == 0:
        fail(
            "scheduler-not-stepped",
            observed=f"every optimizer step used lr {used[0]:.4g}",
            expected=f"{_fmt(schedule[:real])}",
            cause="scheduler.step() is never called",
            where="after scaler.update(), when the step was taken",
        )
    fail(
        "scheduler-advanced-on-skip",
        observed=f"after {real} real steps the scheduler had stepped {last_epoch} times; lrs used {_fmt(used)}",
        expected=f"{real} scheduler steps; lrs {_fmt(schedule[:real])}",
        cause="scheduler.step() runs even when scaler.step() skipped the optimizer step, so the schedule runs "
        "ahead of the real updates." + _order_note(warned),
        where="step the scheduler only if the scale did not drop",
    )
