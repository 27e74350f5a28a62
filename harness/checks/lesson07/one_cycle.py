"""07-one-cycle, the probe.

Build the student's OneCycleLR on a fresh optimizer and a loader whose last batch is partial, then step it once
per optimizer step of the run; record the lr each step used and where stepping raised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.contract.case import Case
from harness.contract.registry import register

BASE_LR = 0.01  # the optimizer's own lr: OneCycleLR replaces it with max_lr / div_factor at once


@dataclass(frozen=True)
class OneCycleSetting:
    """The run the schedule is sized for: samples, batch size (the last batch partial), epochs, peak lr."""

    samples: int
    batch_size: int
    epochs: int
    max_lr: float

    @property
    def batches(self) -> int:
        """len(loader): the optimizer steps of one epoch, the partial last batch included."""
        return -(-self.samples // self.batch_size)

    @property
    def steps(self) -> int:
        """The optimizer steps of the whole run."""
        return self.epochs * self.batches


def one_cycle_setting(case: Case) -> OneCycleSetting:
    """The dataset size, batch size, epochs and max_lr of the case's OneCycle run."""
    # 50 samples in batches of 8: 7 batches, the last of 2 (len(dataset) // batch_size gives 6)
    return OneCycleSetting(45, 6, 4, 0.05) if case.hidden else OneCycleSetting(50, 8, 3, 0.2)


def one_cycle_optimizer() -> torch.optim.SGD:
    """An SGD optimizer with momentum over one parameter, for the scheduler's trace."""
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=BASE_LR, momentum=0.9)


def _one_cycle_loader(setting: OneCycleSetting, case: Case) -> DataLoader:
    generator = torch.Generator().manual_seed(case.seeded(31))
    inputs = torch.randn(setting.samples, 4, generator=generator)
    return DataLoader(TensorDataset(inputs, inputs.sum(1, keepdim=True)), batch_size=setting.batch_size)


def step_through(scheduler: Any, optimizer: torch.optim.Optimizer, calls: int) -> dict[str, Any]:
    """The lr of `optimizer` before each of `calls` scheduler steps (one per optimizer step of a run), and the
    call that raised (OneCycleLR raises once stepped past total_steps), if one did."""
    lrs, stopped_at, error = [], None, None
    for call in range(calls):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        try:
            scheduler.step()
        except ValueError as raised:
            stopped_at, error = call, str(raised)[:200]
            break
    return {"lrs": lrs, "stopped_at": stopped_at, "error": error}


@register("07-one-cycle")
def probe_one_cycle(make_one_cycle: Callable[..., Any], *, case: Case) -> dict:
    """Build the student's schedule for the case's run and step it once per optimizer step of that run."""
    setting = one_cycle_setting(case)
    optimizer = one_cycle_optimizer()
    scheduler = make_one_cycle(optimizer, _one_cycle_loader(setting, case), setting.epochs, setting.max_lr)
    seen: dict[str, Any] = {"returned": type(scheduler).__name__,
                            "bound": getattr(scheduler, "optimizer", None) is optimizer}
    if not isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler) or not seen["bound"]:
        return {**seen, "lrs": [], "stopped_at": None, "error": None}  # nothing the run's optimizer would see
    return {**seen, **step_through(scheduler, optimizer, setting.steps)}
