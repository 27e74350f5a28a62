"""02-freeze-backbone, the probe.

Freeze each model with the student's function; record the flags, which modules got a plain `requires_grad`
attribute and which are in eval mode (to name the slip), then the gradients and the parameters after one SGD
step on the parameters that require grad.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn

from harness.checks.lesson02.common import _attempt, _isolated_rng, _snapshot
from harness.contract.case import Case
from harness.contract.inputs import randn, seeded
from harness.contract.registry import register


class BackboneModel(nn.Module):
    """A backbone (with BatchNorm and a nested block) and a head: the model whose backbone is frozen."""
    def __init__(self, width: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, width), nn.BatchNorm1d(width), nn.ReLU(),
                                      nn.Sequential(nn.Linear(width, width), nn.ReLU()), nn.Linear(width, width))
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.backbone(x)))


def backbone_settings(case: Case) -> list[tuple[int, int, bool]]:
    """(seed, width, head frozen before the student's function runs): both kinds of head, visible and hidden."""
    settings = [(0, 8, False), (3, 5, True)] if not case.hidden else [(1, 16, False), (2, 4, True)]
    return [(case.seeded(seed), width, frozen) for seed, width, frozen in settings]


@register("02-freeze-backbone")
@_isolated_rng
def probe_freeze_backbone(freeze_backbone: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Freeze each model with the student's function; record the flags, which modules got a plain `requires_grad`
    attribute and which are in eval mode (to name the slip), then the gradients and the parameters after one SGD
    step on the parameters that require grad."""
    records = []
    for seed, width, head_frozen_before in backbone_settings(case):
        model = seeded(seed, functools.partial(BackboneModel, width))
        if head_frozen_before:
            model.head.requires_grad_(False)
        freeze_backbone(model)
        record: dict[str, Any] = {
            "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
            "attribute_set": [n or "model" for n, m in model.named_modules() if "requires_grad" in vars(m)],
            "eval_mode": [n or "model" for n, m in model.named_modules() if not m.training],
        }
        _attempt(record, functools.partial(_step_frozen, model, record, randn(16, 6, seed=seed)))
        records.append(record)
    return {"models": records}


def _step_frozen(model: nn.Module, record: dict[str, Any], x: torch.Tensor) -> None:
    """One SGD step on the parameters that require grad; record the backbone's gradients and every parameter."""
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model.train()
    model(x).square().mean().backward()
    optimizer.step()
    record["backbone_grads"] = [p.grad for p in model.backbone.parameters()]
    record["after"] = {n: _snapshot(p) for n, p in model.named_parameters()}
