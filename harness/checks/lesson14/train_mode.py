"""14-train-mode, the probe.

Call the student's function on each model; record the flags, the modes, then the output of a seeded forward
pass and the BatchNorm statistics after it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson14.common import _attempt, _pretrained_like
from harness.contract.case import Case
from harness.contract.inputs import seeded
from harness.contract.registry import register
from harness.finetune import TransferNet


class ModeNet(nn.Module):
    """A TransferNet backbone (some blocks frozen), a frozen pretrained neck whose BatchNorm1d sits four modules
    deep (neck.0.1.0) and whose last BatchNorm1d (neck.1) is half frozen (its weight frozen, its bias trainable:
    not all of its parameters are frozen, so it trains), and a head that has its own (trainable) BatchNorm1d and
    dropout."""

    def __init__(self, width: int, frozen_blocks: int, classes: int) -> None:
        super().__init__()
        self.backbone = TransferNet(classes, width).backbone
        features = 4 * width
        self.neck = nn.Sequential(nn.Sequential(nn.Linear(features, features),
                                                nn.Sequential(nn.BatchNorm1d(features), nn.ReLU())),
                                  nn.BatchNorm1d(features))
        self.neck.requires_grad_(False)
        self.neck[1].bias.requires_grad_(True)
        self.head = nn.Sequential(nn.Linear(features, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3),
                                  nn.Linear(8, classes))
        for block in list(self.backbone)[:frozen_blocks]:
            block.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.neck(self.backbone(x)))


def mode_cases(case: Case) -> list[tuple[int, int, bool]]:
    """(width, frozen conv blocks, the model comes in eval mode)."""
    if not case.hidden:
        return [(4, 2, True)]
    return [(6, 1, False), (4, 3, True)]


def mode_model(case: Case, index: int, width: int, frozen_blocks: int, starts_in_eval: bool) -> ModeNet:
    """The case's seeded ModeNet with pretrained-like BatchNorm statistics, in train or eval mode."""
    model = seeded(case.seeded(150 + index), functools.partial(ModeNet, width, frozen_blocks, 3))
    _pretrained_like(model, case.seeded(160 + index))
    return model.eval() if starts_in_eval else model.train()  # type: ignore


def mode_input(case: Case, index: int) -> torch.Tensor:
    """The case's batch of 8 images of 3 x 16 x 16."""
    return torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(case.seeded(170 + index)))


def seeded_forward(model: nn.Module, x: torch.Tensor, seed: int) -> torch.Tensor:
    """model(x) with dropout's masks drawn from `seed` (the global stream restored after)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model(x).detach()


@register("14-train-mode")
def probe_train_mode(train_mode: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Call the student's function on each model; record the flags, the modes, then the output of a seeded forward
    pass and the BatchNorm statistics after it."""
    records = []
    for index, setting in enumerate(mode_cases(case)):
        model = mode_model(case, index, *setting)
        record: dict[str, Any] = {}
        _attempt(record, functools.partial(train_mode, model))
        record["requires_grad"] = {n: p.requires_grad for n, p in model.named_parameters()}
        record["training"] = {n or "model": m.training for n, m in model.named_modules()}
        if record.get("raised") is None:
            record["out"] = _attempt(record, functools.partial(seeded_forward, model, mode_input(case, index),
                                                               case.seeded(180 + index)))
            record["buffers"] = {n: b.detach().clone() for n, b in model.named_buffers()}
        records.append(record)
    return {"models": records}
