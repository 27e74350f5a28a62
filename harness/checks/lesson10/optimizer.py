"""10-optimizer, the probe.

Call make_optimizer on a small CNN with norms, biases and a buffer; record its groups and every step's lr.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson10.common import _rng_kept
from harness.checks.param_groups import describe_groups
from harness.contract.case import Case
from harness.contract.registry import register


class _Buffered(nn.Module):
    """Holds a buffer and no parameter, as the capstone's normalisation layer does."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.mean


def optimizer_model(case: Case, freeze_first: bool) -> nn.Module:
    """A small CNN with a buffer, a bias-free conv, norms and biases (its first conv frozen if asked)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(0))
        model = nn.Sequential(
            _Buffered(), nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 5),
        )
    if freeze_first:
        model[1].requires_grad_(False)
    return model


def optimizer_settings(case: Case) -> list[tuple[float, float, int, int, bool]]:
    """(lr, weight_decay, warmup_steps, total_steps, freeze the first conv)."""
    visible = [(1e-2, 0.05, 5, 40, False), (3e-3, 0.1, 0, 25, True)]  # the second: no warm-up, a frozen layer
    if case.hidden:  # other lengths, no weight decay at all
        return [*visible, (2e-2, 0.0, 7, 60, False), (5e-3, 0.02, 3, 30, True)]
    return visible


def _record_optimizer(model: nn.Module, result: Any, total: int) -> dict[str, Any]:
    """What make_optimizer returned, as data: the optimizer's kind and groups, whether the scheduler drives it,
    and the lr of every group at each of total + 3 optimizer steps (no gradients: nothing moves)."""
    if not (isinstance(result, tuple) and len(result) == 2):
        return {"returned": type(result).__name__}
    optimizer, scheduler = result
    record: dict[str, Any] = {"returned": "pair", "optimizer": type(optimizer).__name__,
                              "adamw": isinstance(optimizer, torch.optim.AdamW)}
    if not isinstance(optimizer, torch.optim.Optimizer):
        return record
    record["groups"] = describe_groups(model, optimizer.param_groups)
    record["drives_optimizer"] = getattr(scheduler, "optimizer", None) is optimizer
    if record["drives_optimizer"]:
        record["lrs"] = []
        for _ in range(total + 3):
            record["lrs"].append([group["lr"] for group in optimizer.param_groups])
            optimizer.step()
            scheduler.step()
    return record


@register("10-optimizer")
def probe_optimizer(make_optimizer: Callable[..., tuple[torch.optim.Optimizer, Any]], *, case: Case) -> dict:
    """Call make_optimizer on a small CNN with norms, biases and a buffer; record its groups and every step's lr."""
    records = []
    with _rng_kept():
        for lr, weight_decay, warmup, total, freeze_first in optimizer_settings(case):
            model = optimizer_model(case, freeze_first)
            try:
                result = make_optimizer(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup,
                                        total_steps=total)
                records.append(_record_optimizer(model, result, total))
            except ZeroDivisionError as error:
                if warmup:  # no zero in the arguments: raised as is, with its line
                    raise
                line = traceback.extract_tb(error.__traceback__)[-1].line or ""
                records.append({"returned": "zero-division", "line": line[:200]})
            if records[-1]["returned"] != "pair":
                break
    return {"settings": records}
