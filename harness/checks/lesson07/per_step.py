"""07-per-step, the probe.

Run the student's loop with a per-step scheduler; record the lr, weights and gradients of every step.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.checks.lesson07.common import LoopSetting, _probe_loop, _regression_loader
from harness.contract.case import Case
from harness.contract.registry import register


def per_step_setting(case: Case) -> LoopSetting:
    """The epochs, loader, seed, lr and scheduler of the case's per-step loop."""
    epochs, batch_size, n = (4, 6, 36) if case.hidden else (3, 8, 48)
    loader = _regression_loader(n, batch_size, seed=case.seeded(11 if case.hidden else 7))
    total = epochs * len(loader)
    if case.hidden:
        make = lambda opt: torch.optim.lr_scheduler.LinearLR(  # noqa: E731
            opt, start_factor=1.0, end_factor=0.05, total_iters=total
        )
    else:
        # no momentum cycling: every step stays a plain SGD step (p - lr * grad) that the judge can verify
        make = lambda opt: torch.optim.lr_scheduler.OneCycleLR(  # noqa: E731
            opt, max_lr=0.05, total_steps=total, cycle_momentum=False
        )
    return LoopSetting(epochs, loader, case.seeded(3), 0.05, make)


@register("07-per-step")
def probe_per_step(train_per_step: Callable[..., Any], *, case: Case) -> dict:
    """Run the student's loop with a per-step scheduler; record the lr, weights and gradients of every step."""
    return _probe_loop(train_per_step, per_step_setting(case))
