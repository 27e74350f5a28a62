"""Parameter-group checks shared by lessons 02 and 10: every trainable parameter in exactly one group, and
weight decay on matrices and kernels only."""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from harness.checks.core import fail


def group_of_each_parameter(model: nn.Module, param_groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The one group holding each trainable parameter of `model`, by name.

    Raises:
        CheckFailed: a frozen parameter in a group (frozen-params-included), a trainable one in none
            (missing-params) or in several (duplicate-params).
    """
    holders: dict[int, list[dict[str, Any]]] = {}
    for group in param_groups:
        for p in group["params"]:
            holders.setdefault(id(p), []).append(group)
    found = {}
    for name, p in model.named_parameters():
        count = len(holders.get(id(p), []))
        if not p.requires_grad:
            if count:
                fail("frozen-params-included", observed=f"frozen parameter {name} is in a group",
                     expected="only the parameters that require grad", cause="no requires_grad filter",
                     where="skip parameters whose p.requires_grad is False")
            continue
        if count == 0:
            fail("missing-params", observed=f"{name} is in no group", expected="every trainable parameter in one group",
                 cause="a kind of parameter that no branch takes, or copies (p.detach(), p.clone()) put in the "
                       "groups instead of the parameters themselves",
                 where="the loop that sorts model.named_parameters() into the groups")
        if count > 1:
            fail("duplicate-params", observed=f"{name} is in {count} groups", expected="exactly one group",
                 cause="overlapping selections (optimizers reject a parameter in two groups, and would update it twice)",
                 where="make the selections disjoint: one test per parameter decides its single group")
        found[name] = holders[id(p)][0]
    return found


def check_weight_decay(model: nn.Module, name: str, group: dict[str, Any], weight_decay: float) -> None:
    """Fail unless parameter `name`'s group decays it by `weight_decay` if it is a matrix or kernel (ndim >= 2),
    and not at all if it is a bias or a normalisation scale (decay-on-bias-or-norm, no-decay-on-weights)."""
    p = model.get_parameter(name)
    wanted = weight_decay if p.ndim >= 2 else 0.0
    if not math.isclose(group["weight_decay"], wanted):
        owner = type(model.get_submodule(name.rpartition(".")[0])).__name__
        fail("decay-on-bias-or-norm" if p.ndim < 2 else "no-decay-on-weights",
             observed=f"{name} (of a {owner}, shape {tuple(p.shape)}) has weight_decay {group['weight_decay']}",
             expected=f"{wanted}: decay the matrices and kernels (ndim >= 2), never biases and norm scales",
             cause="decaying a bias or a normalisation scale pulls it towards 0 for no regularising benefit"
             if p.ndim < 2 else "the group sets no weight_decay (AdamW's default is 0.01), or sorts by name instead of "
             "p.ndim",
             where="decay = p.ndim >= 2; weight_decay set explicitly in every group")
