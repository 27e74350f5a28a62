"""07-one-cycle, the judge.

The lr of every optimizer step of the run is that of OneCycleLR(max_lr, total_steps=epochs * len(loader));
when it is not, the sizings people get wrong are replayed to name the one the observation matches.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson07.one_cycle import (
    BASE_LR,
    OneCycleSetting,
    one_cycle_optimizer,
    one_cycle_setting,
    step_through,
)
from harness.contract.case import Case
from harness.contract.compare import isclose_numbers, numbers
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson07.common import _fmt


def _one_cycle_trace(setting: OneCycleSetting, total_steps: int, max_lr: float) -> dict[str, Any]:
    """What the probe records for OneCycleLR(max_lr, total_steps) stepped once per optimizer step of the run."""
    optimizer = one_cycle_optimizer()
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=total_steps)
    return step_through(scheduler, optimizer, setting.steps)


def _sizings(setting: OneCycleSetting) -> list[tuple[str, int, float, str]]:
    """(code, total_steps, max_lr, cause) of the wrong sizings people write, in the order they are tried (the
    case's epochs, batches per epoch and samples all differ, so each sizing gives another schedule)."""
    run, full = setting.steps, setting.epochs * (setting.samples // setting.batch_size)
    return [
        ("sized-in-samples", setting.epochs * setting.samples, setting.max_lr,
         f"total_steps = epochs * len(loader.dataset) = {setting.epochs * setting.samples}: samples, batch_size "
         f"({setting.batch_size}) times the {run} optimizer steps, so the run ends early in the warmup and the lr "
         "never anneals"),
        ("too-few-steps", full, setting.max_lr,
         f"total_steps = epochs * (len(dataset) // batch_size) = {full}: the partial last batch of every epoch is "
         f"not counted (len(loader) = {setting.batches}, not {setting.batches - 1})"),
        ("too-few-steps", setting.batches, setting.max_lr,
         f"total_steps = len(loader) = {setting.batches}: one epoch, not {setting.epochs}"),
        ("too-few-steps", setting.epochs, setting.max_lr,
         f"total_steps = epochs = {setting.epochs}: the schedule is sized in epochs, but it is stepped once per "
         f"optimizer step (batch), so it runs out after {setting.epochs} of the {run} steps"),
        ("too-many-steps", run + 1, setting.max_lr,
         f"total_steps = epochs * len(loader) + 1 = {run + 1}: one step more than the run takes, so the last "
         "step does not reach the end of the cycle"),
        ("wrong-max-lr", run, BASE_LR,
         f"max_lr = the optimizer's lr ({BASE_LR}) instead of the max_lr passed in ({setting.max_lr})"),
    ]


@judges(
    "07-one-cycle",
    hints=Hints(
        nudge="OneCycleLR is stepped once per batch, so total_steps counts batches over the whole run: how many "
        "batches does the loader give per epoch, the last partial one included?",
        concept="A per-step schedule is sized in optimizer steps: epochs * len(loader). len(loader.dataset) "
        "counts samples (batch_size times too many), len(dataset) // batch_size forgets the partial last "
        "batch, and a schedule shorter than the run raises when stepped past its end.",
        solution="return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, "
        "total_steps=epochs * len(loader))",
        section="7. Size a per-step schedule in optimizer steps",
    ),
    requires={
        "not-a-scheduler": Requirement(
            "returns the OneCycleLR scheduler, built on the optimizer passed in",
            hint="What does your function return, and which optimizer does the scheduler change?"),
        "too-few-steps": Requirement(
            "total_steps counts every optimizer step of the run, the partial last batch included: the schedule "
            "does not raise before the run ends",
            hint="How many batches does len(loader) count when the dataset does not divide by the batch size? "
            "And over how many epochs?"),
        "sized-in-samples": Requirement(
            "total_steps counts optimizer steps (batches), not samples",
            hint="What does len(loader.dataset) count, and how many times per batch is the scheduler stepped?"),
        "too-many-steps": Requirement(
            "the schedule ends with the run: total_steps is not larger than epochs * len(loader)",
            hint="Where is the lr at the last optimizer step of your run: at the end of the cycle, or before?"),
        "wrong-max-lr": Requirement(
            "the lr peaks at max_lr",
            hint="Print the largest lr of your schedule: is it the max_lr you were given?"),
        "wrong-schedule": Requirement(
            "the other arguments of OneCycleLR stay at their defaults (cosine annealing, pct_start 0.3)",
            hint="Which arguments besides max_lr and total_steps did you pass? The exercise leaves them at their "
            "defaults."),
    },
)
def judge_one_cycle(seen: dict, *, case: Case) -> str:
    """The lr of every optimizer step follows OneCycleLR(max_lr, total_steps=epochs * len(loader))."""
    setting = one_cycle_setting(case)
    returned, run = seen["returned"], setting.steps
    if returned != "OneCycleLR" or seen["bound"] is not True:
        fail(
            "not-a-scheduler",
            observed=f"make_one_cycle returned a {returned}"
            + (", built on another optimizer than the one passed in" if returned == "OneCycleLR" else ""),
            expected="the OneCycleLR it built on the optimizer passed in (the training loop steps it)",
            cause="a missing return statement, or a scheduler built on a new optimizer" if returned != "OneCycleLR"
            else "a scheduler built on a new optimizer: the training loop's optimizer never sees its lr",
            where="the return statement of make_one_cycle",
        )
    lrs = numbers(seen["lrs"])
    if lrs is None or not isinstance(seen["stopped_at"], (int, type(None))):
        raise ValueError("the observation of the schedule is malformed")
    expected = _one_cycle_trace(setting, run, setting.max_lr)
    if seen["stopped_at"] is None and isclose_numbers(lrs, expected["lrs"]):
        return f"the lr of all {run} optimizer steps ({setting.epochs} epochs x {setting.batches} batches) follows " \
               f"one cycle peaking at {setting.max_lr}"
    for code, total_steps, max_lr, cause in _sizings(setting):
        replay = _one_cycle_trace(setting, total_steps, max_lr)
        if replay["stopped_at"] == seen["stopped_at"] and isclose_numbers(lrs, replay["lrs"]):
            fail(
                code,
                observed=(f"stepping the scheduler raised at optimizer step {seen['stopped_at']} of {run}: "
                          f"{seen['error']}" if seen["stopped_at"] is not None
                          else f"the lr of the {run} optimizer steps was {_fmt(lrs)}, ending at {lrs[-1]:.4g}"),
                expected=f"OneCycleLR(optimizer, max_lr={setting.max_lr}, total_steps={run}): {setting.epochs} "
                f"epochs x len(loader) = {setting.batches} batches (the last one partial)",
                cause=cause,
                where="the total_steps (and max_lr) of the OneCycleLR",
                hint="Your schedule is sized in epochs. How many times is it stepped in one epoch?"
                if total_steps == setting.epochs else None,
            )
    if seen["stopped_at"] is not None:
        fail(
            "too-few-steps",
            observed=f"stepping the scheduler raised at optimizer step {seen['stopped_at']} of {run}: "
            f"{seen['error']}",
            expected=f"a schedule that lasts the whole run: total_steps = epochs * len(loader) = {run}",
            cause="total_steps smaller than the number of optimizer steps the run takes",
            where="the total_steps of the OneCycleLR",
        )
    first = next(i for i, (a, b) in enumerate(zip(lrs, expected["lrs"], strict=False)) if not isclose_numbers([a], [b]))
    fail(
        "wrong-schedule",
        observed=f"optimizer step {first} used lr {lrs[first]:.6g}; the schedule peaked at {max(lrs):.6g} and "
        f"ended at {lrs[-1]:.6g}",
        expected=f"{expected['lrs'][first]:.6g}: OneCycleLR(max_lr={setting.max_lr}, total_steps={run}) with its "
        f"defaults, which peaks at {max(expected['lrs']):.4g} within this run and ends at {expected['lrs'][-1]:.3g}",
        cause="OneCycleLR arguments other than the defaults (anneal_strategy, pct_start, div_factor, "
        "final_div_factor), a max_lr other than the one passed in, or a total_steps other than epochs * len(loader)",
        where="the arguments of the OneCycleLR",
    )
