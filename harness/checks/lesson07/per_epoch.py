"""07-per-epoch, the probe.

Run the student's loop with a per-epoch scheduler; record the lr, weights and gradients of every step.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.checks.lesson07.common import LOOP_REQUIREMENTS, LoopSetting, _probe_loop, _regression_loader
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register


def per_epoch_setting(case: Case) -> LoopSetting:
    """The epochs, loader, seed, lr and scheduler of the case's per-epoch loop."""
    epochs, batch_size, n = (6, 5, 25) if case.hidden else (5, 8, 32)
    loader = _regression_loader(n, batch_size, seed=case.seeded(5 if case.hidden else 2))
    if case.hidden:
        make = lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[1, 3, 4], gamma=0.3)  # noqa: E731
    else:
        make = lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)  # noqa: E731
    return LoopSetting(epochs, loader, case.seeded(4), 0.04, make)


@register(
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
def probe_per_epoch(train_per_epoch: Callable[..., Any], *, case: Case) -> dict:
    """Run the student's loop with a per-epoch scheduler; record the lr, weights and gradients of every step."""
    return _probe_loop(train_per_epoch, per_epoch_setting(case))
