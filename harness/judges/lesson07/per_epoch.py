"""07-per-epoch, the judge.

Every batch of epoch e must use the schedule's e-th value, and every step be a real SGD step.
"""

from __future__ import annotations

from harness.checks.lesson07.common import scheduler_trace
from harness.checks.lesson07.per_epoch import per_epoch_setting
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
    "07-per-epoch",
    hints=Hints(
        nudge="StepLR, MultiStepLR and ExponentialLR count epochs: the lr stays the same for every batch of an "
        "epoch.",
        concept="A schedule sized in epochs moves once per epoch: after the last optimizer.step() of the epoch, "
        "outside the batch loop.",
        solution="for each epoch: model.train(); the batch loop (zero_grad, forward, loss, backward, "
        "optimizer.step()); then scheduler.step() once, after the batch loop",
        section="4. Per step or per epoch?",
    ),
    requires={
        **LOOP_REQUIREMENTS,
        "wrong-lr-trace": Requirement(
            "one scheduler.step() per epoch",
            hint="Count your scheduler.step() calls per epoch: exactly one, every epoch?"),
        "stepped-per-batch": Requirement(
            "an epoch-sized scheduler is stepped once per epoch, after the batch loop",
            hint="Print the lr at each batch of one epoch: should it change within an epoch?"),
    },
)
def judge_per_epoch(seen: dict, *, case: Case) -> str:
    """Every batch of epoch e must use the schedule's e-th value, and every step be a real SGD step."""
    setting = per_epoch_setting(case)
    epochs, batches = setting.epochs, len(setting.loader)
    total = epochs * batches
    used, warned = _used_lrs(seen), seen["warned"]
    per_epoch = scheduler_trace(setting.make, setting.lr, epochs)
    expected = [per_epoch[e] for e in range(epochs) for _ in range(batches)]
    if len(used) != total:
        _step_count_failure(len(used), epochs, batches)
    _check_train_mode(seen)
    if isclose_numbers(used, expected):
        _verify_loop_steps(seen, setting)
        return f"every batch of each of {epochs} epochs used that epoch's lr"
    if len(set(used)) == 1:
        fail(
            "scheduler-not-stepped",
            observed=f"every optimizer step used lr {used[0]:.4g}",
            expected=f"the lr per epoch {_fmt(per_epoch[:epochs])}",
            cause="scheduler.step() is never called, or only after the last optimizer.step()",
            where="the end of the epoch loop",
        )
    per_batch = scheduler_trace(setting.make, setting.lr, total)[:total]
    if isclose_numbers(used, per_batch):
        fail(
            "stepped-per-batch",
            observed=f"the lr changed within an epoch: {_fmt(used, 12)} (it decays {batches}x too fast)",
            expected=f"one lr per epoch ({batches} batches each): {_fmt(expected, 12)}",
            cause="scheduler.step() is inside the batch loop, but this scheduler counts epochs",
            where="move scheduler.step() out of the batch loop, to the end of the epoch",
        )
    shifted = [per_epoch[e + 1] for e in range(epochs) for _ in range(batches)]
    if isclose_numbers(used, shifted):
        fail(
            "scheduler-before-optimizer",
            observed=f"epoch 0 already used lr {used[0]:.4g}",
            expected=f"epoch 0 uses the initial lr {expected[0]:.4g}",
            cause="scheduler.step() runs at the start of the epoch, before any optimizer.step()."
            + _order_note(warned),
            where="call scheduler.step() at the end of the epoch",
        )
    first = _first_difference(used, expected)
    fail(
        "wrong-lr-trace",
        observed=f"optimizer step {first} (epoch {first // batches}) used lr {used[first]:.6g}",
        expected=f"{expected[first]:.6g}; lr per epoch {_fmt(per_epoch[:epochs])}",
        cause="scheduler.step() is not called exactly once per epoch." + _order_note(warned),
        where="the end of the epoch loop",
    )
