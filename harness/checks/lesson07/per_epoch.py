"""07-per-epoch, the probe.

Run the student's loop with a per-epoch scheduler; record the lr, weights and gradients of every step.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.checks.lesson07.common import LoopSetting, _probe_loop, _regression_loader
from harness.contract.case import Case
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


@register("07-per-epoch")
def probe_per_epoch(train_per_epoch: Callable[..., Any], *, case: Case) -> dict:
    """Run the student's loop with a per-epoch scheduler; record the lr, weights and gradients of every step."""
    return _probe_loop(train_per_epoch, per_epoch_setting(case))
