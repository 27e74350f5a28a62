"""02-param-groups, the probe.

Build an AdamW from the student's groups (with defaults that a forgotten option makes visible); record
its groups by parameter name.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn

from harness.checks.lesson02.common import _isolated_rng
from harness.checks.param_groups import describe_groups
from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.inputs import seeded
from harness.contract.registry import register


class _GroupModel(nn.Module):
    def __init__(self, freeze_first: bool) -> None:
        super().__init__()
        # a BatchNorm's buffers before backbone parameters: names zipped from state_dict() with parameters()
        # shift by three and give head parameters backbone names
        self.backbone = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 8), nn.LayerNorm(8), nn.BatchNorm1d(8),
                                      nn.Linear(8, 8, bias=False))
        self.head = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))
        if freeze_first:
            self.backbone[0].requires_grad_(False)


def group_settings(case: Case) -> list[tuple[bool, float, float, float]]:
    """(freeze the embedding, lr, weight_decay, backbone_lr): the visible model has a frozen parameter too."""
    return [(True, 1e-3, 0.1, 1e-4)] if not case.hidden else [(True, 3e-3, 0.05, 3e-5), (False, 0.1, 0.2, 0.01)]


def group_model(case: Case, freeze_first: bool) -> nn.Module:
    """The case's seeded model, its first layer frozen when `freeze_first`."""
    return seeded(case.seeded(0), functools.partial(_GroupModel, freeze_first))


# The optimizer's defaults in the probe: a group that leaves an option out gets these, visibly wrong.
DEFAULT_LR, DEFAULT_WEIGHT_DECAY = 12345.0, 0.777


@register("02-param-groups")
@_isolated_rng
def probe_param_groups(make_param_groups: Callable[..., list[dict[str, Any]]], *, case: Case) -> dict:
    """Build an AdamW from the student's groups (with defaults that a forgotten option makes visible); record
    its groups by parameter name."""
    described = []
    for freeze_first, lr, weight_decay, backbone_lr in group_settings(case):
        model = group_model(case, freeze_first)
        groups = make_param_groups(model, lr=lr, weight_decay=weight_decay, backbone_lr=backbone_lr)
        try:
            optimizer = torch.optim.AdamW(groups, lr=DEFAULT_LR, weight_decay=DEFAULT_WEIGHT_DECAY)
        except ValueError as error:
            if "more than one" not in str(error):
                raise
            fail("duplicate-params", observed=f"torch.optim.AdamW(groups) raised: {error}",
                 expected="each parameter in exactly one group",
                 cause="overlapping selections: a parameter passes the tests of two groups (for example a group of "
                       "all parameters plus a group of biases)",
                 where="make the selections disjoint: one test per parameter decides its single group")
        described.append(describe_groups(model, optimizer.param_groups))
    return {"groups": described}
