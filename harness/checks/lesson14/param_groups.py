"""14-param-groups, the probe.

Call the student's function on each model; record the optimizer's type and its groups by parameter name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from harness.checks.param_groups import describe_groups
from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.inputs import seeded
from harness.contract.registry import register
from harness.contract.wire import type_name
from harness.finetune import TransferNet


def group_settings(case: Case) -> list[tuple[int, int, int, float, float, float]]:
    """(width, classes, frozen conv blocks, head_lr, backbone_lr, weight_decay)."""
    if not case.hidden:
        return [(4, 10, 1, 1e-2, 1e-4, 0.05)]
    return [(6, 3, 2, 3e-3, 3e-5, 0.1), (4, 7, 0, 1e-1, 1e-3, 0.2)]


def group_model(case: Case, index: int, width: int, classes: int, frozen_blocks: int) -> TransferNet:
    """The case's seeded TransferNet with its first `frozen_blocks` backbone blocks frozen."""
    model = seeded(case.seeded(190 + index), functools.partial(TransferNet, classes, width))
    for block in list(model.backbone)[:frozen_blocks]:  # type: ignore[arg-type]
        block.requires_grad_(False)
    return model  # type: ignore[return-value]


@register("14-param-groups")
def probe_param_groups(finetune_optimizer: Callable[..., Any], *, case: Case) -> dict:
    """Call the student's function on each model; record the optimizer's type and its groups by parameter name."""
    described: list[Any] = []
    for index, (width, classes, frozen, head_lr, backbone_lr, weight_decay) in enumerate(group_settings(case)):
        model = group_model(case, index, width, classes, frozen)
        try:
            optimizer = finetune_optimizer(model, head_lr=head_lr, backbone_lr=backbone_lr, weight_decay=weight_decay)
        except ValueError as error:
            if "more than one" not in str(error):
                raise
            fail("duplicate-params", observed=f"building the optimizer raised: {error}",
                 expected="each parameter in exactly one group",
                 cause="overlapping selections: a parameter passes the tests of two groups (for example a group of "
                       "all parameters plus a group of biases and norms)",
                 where="make the selections disjoint: one test per parameter decides its single group")
        if not isinstance(optimizer, torch.optim.AdamW):
            described.append({"type": type_name(optimizer)})
            break
        described.append({"type": "AdamW", "groups": describe_groups(model, optimizer.param_groups)})
    return {"optimizers": described}
