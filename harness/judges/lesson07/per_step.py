"""07-per-step, the judge.

The lr used by optimizer step i must be the schedule's i-th value, and every step a real SGD step.
"""

from __future__ import annotations

from harness.checks.lesson07.common import scheduler_trace
from harness.checks.lesson07.per_step import per_step_setting
from harness.contract.case import Case
from harness.contract.compare import isclose_numbers
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson07.common import (
    LOOP_REQUIREMENTS,
    _check_train_mode,
    _first_difference,
    _fmt,
    _order_note,
    _step_count_failure,
    _used_lrs,
    _verify_loop_steps,
)


@judges(
    "07-per-step",
    hints=Hints(
        nudge="A per-step scheduler (OneCycleLR, warmup) moves once per batch, right after the optimizer used "
        "the current lr.",
        concept="The lr an update uses is the one in the optimizer when optimizer.step() runs; a schedule sized "
        "in optimizer steps needs exactly one scheduler.step() per optimizer.step(), after it.",
        solution="in the batch loop: optimizer.zero_grad(set_to_none=True); loss_fn(model(inputs), "
        "targets).backward(); optimizer.step(); scheduler.step()",
        section="4. Per step or per epoch?",
    ),
    requires={
        **LOOP_REQUIREMENTS,
        "wrong-lr-trace": Requirement(
            "one scheduler.step() per optimizer.step()",
            hint="Count your scheduler.step() calls per batch: exactly one, every batch?"),
        "stepped-per-epoch": Requirement(
            "a per-step scheduler is stepped once per batch, not once per epoch",
            hint="This schedule is sized in optimizer steps: how often does your loop call scheduler.step()?"),
    },
)
def judge_per_step(seen: dict, *, case: Case) -> str:
    """The lr used by optimizer step i must be the schedule's i-th value, and every step a real SGD step."""
    setting = per_step_setting(case)
    epochs, batches = setting.epochs, len(setting.loader)
    total = epochs * batches
    used, warned = _used_lrs(seen), seen["warned"]
    expected = scheduler_trace(setting.make, setting.lr, total)
    if len(used) != total:
        _step_count_failure(len(used), epochs, batches)
    _check_train_mode(seen)
    if isclose_numbers(used, expected[:total]):
        _verify_loop_steps(seen, setting)
        return f"lr used at each of {total} optimizer steps follows the per-step schedule"
    if len(set(used)) == 1:
        fail(
            "scheduler-not-stepped",
            observed=f"every optimizer step used lr {used[0]:.4g}",
            expected=f"the schedule {_fmt(expected)}",
            cause="scheduler.step() is never called, or only after the last optimizer.step()",
            where="after optimizer.step() inside the batch loop",
        )
    if isclose_numbers(used, expected[1 : total + 1]):
        fail(
            "scheduler-before-optimizer",
            observed=f"lrs used {_fmt(used)}: the first step already used the second value of the schedule",
            expected=f"{_fmt(expected)}: step 0 uses the initial lr",
            cause="scheduler.step() is called before optimizer.step(), so every step uses the next lr."
            + _order_note(warned),
            where="swap the two calls: optimizer.step() first, then scheduler.step()",
        )
    per_epoch = [expected[e] for e in range(epochs) for _ in range(batches)]
    if isclose_numbers(used, per_epoch) or all(used[i] == used[i - 1] for i in range(1, total) if i % batches):
        fail(
            "stepped-per-epoch",
            observed=f"the lr changed only between epochs: {_fmt(used, 12)}",
            expected=f"a new lr at every batch: {_fmt(expected, 12)}",
            cause="scheduler.step() sits in the epoch loop; a per-step schedule is sized in optimizer steps",
            where="move scheduler.step() into the batch loop, after optimizer.step()",
        )
    first = _first_difference(used, expected)
    fail(
        "wrong-lr-trace",
        observed=f"optimizer step {first} used lr {used[first]:.6g}",
        expected=f"{expected[first]:.6g}; the whole schedule is {_fmt(expected)}",
        cause="scheduler.step() is called more or less than once per optimizer step." + _order_note(warned),
        where="the batch loop: exactly one scheduler.step() after each optimizer.step()",
    )
