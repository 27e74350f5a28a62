"""07-amp-skip, the probe.

Feed the batches, some overflowing; record every real optimizer step, the returns and the scheduler's count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from harness.checks.lesson07.common import SchedulerFactory, _record_steps
from harness.contract.case import Case
from harness.contract.registry import register


@dataclass(frozen=True)
class _AmpSetting:
    """The amp check's inputs: batches (some overflowing), the model's seed, the scheduler."""

    batches: list[tuple[torch.Tensor, torch.Tensor]]
    poisoned: frozenset[int]
    model_seed: int
    make: SchedulerFactory


def amp_setting(case: Case) -> _AmpSetting:
    """The case's batches (the poisoned ones overflow), the model's seed and the scheduler."""
    # both overflow on the first batch and on two batches in a row
    count, poisoned = (12, {0, 5, 6, 10}) if case.hidden else (10, {0, 3, 4, 8})
    generator = torch.Generator().manual_seed(case.seeded(13 if case.hidden else 1))
    batches = []
    for i in range(count):
        inputs = torch.randn(8, 4, generator=generator)
        targets = torch.randn(8, 1, generator=generator)
        if i in poisoned:
            inputs[0, 0] = float("inf")  # an overflow: the scaler finds inf gradients and skips the step
        batches.append((inputs, targets))
    if case.hidden:
        make = lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.8)  # noqa: E731
    else:
        make = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))  # noqa: E731
    return _AmpSetting(batches, frozenset(poisoned), case.seeded(5), make)


def amp_model(seed: int) -> nn.Linear:
    """The linear model of the AMP-skip run, built from `seed` without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Linear(4, 1)


@register("07-amp-skip")
def probe_amp_skip(amp_step: Callable[..., bool], *, case: Case) -> dict:
    """Feed the batches, some overflowing; record every real optimizer step, the returns and the scheduler's count."""
    setting = amp_setting(case)
    model = amp_model(setting.model_seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = setting.make(optimizer)
    # growth_interval=2: the scale also *grows* after two good steps, which must not look like a skip
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)

    def run() -> list[Any]:
        return [amp_step(model, x, y, nn.MSELoss(), optimizer, scaler, scheduler) for x, y in setting.batches]

    seen = _record_steps(run, optimizer)
    seen["last_epoch"] = scheduler.last_epoch
    return seen
