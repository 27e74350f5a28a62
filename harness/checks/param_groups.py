"""Parameter-group checks shared by lessons 02 and 10: every trainable parameter in exactly one group, and
weight decay on matrices and kernels only.

The probe describes an optimizer's groups as data (`describe_groups`: each parameter by its name in the
model, the group's options as numbers); the judge rebuilds the model from the case and checks that
description against it (`group_of_each_parameter`, `check_weight_decay`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from harness.contract.failure import fail

# Group options a description carries (absent ones are recorded as None).
OPTIONS = ("lr", "weight_decay", "initial_lr")


def describe_groups(model: nn.Module, param_groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups as data, for the judge: each parameter's name in `model` (None for a tensor that is not one of
    the model's parameters, such as a copy), and the options in `OPTIONS` as they are."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [{"params": [names.get(id(p)) for p in group["params"]],
             **{option: group.get(option) for option in OPTIONS}} for group in param_groups]


def _number(value: Any, what: str) -> float:
    """`value` as a float if it is a real number (a bool is not); ValueError for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is {type(value).__name__}, not a number")
    return float(value)


def group_of_each_parameter(model: nn.Module, groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The one group (as `describe_groups` wrote it) holding each trainable parameter of `model`, by name.

    Raises:
        CheckFailed: a frozen parameter in a group (frozen-params-included), a trainable one in none
            (missing-params) or in several (duplicate-params).
        ValueError: a description that is not one of `describe_groups`.
    """
    if not (isinstance(groups, list) and all(isinstance(g, dict) for g in groups)
            and all(isinstance(g.get("params"), list) for g in groups)):
        raise ValueError("the groups are not a list of described groups")
    holders: dict[str | None, list[dict[str, Any]]] = {}
    for group in groups:
        for name in group["params"]:
            if name is not None and not isinstance(name, str):
                raise ValueError(f"a parameter described as {type(name).__name__}")
            holders.setdefault(name, []).append(group)
    found = {}
    for name, p in model.named_parameters():
        count = len(holders.get(name, []))
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
                 cause="overlapping selections (optimizers reject a parameter in two groups, and would update it "
                 "twice)",
                 where="make the selections disjoint: one test per parameter decides its single group")
        found[name] = holders[name][0]
    return found


def check_weight_decay(model: nn.Module, name: str, group: dict[str, Any], weight_decay: float, *,
                       default: float, default_is: str) -> None:
    """Fail unless parameter `name`'s group decays it by `weight_decay` if it is a matrix or kernel (ndim >= 2),
    and not at all if it is a bias or a normalisation scale (decay-on-bias-or-norm, no-decay-on-weights).

    Args:
        default: the weight_decay the optimizer gives a group that sets none (a group at exactly this value
            is named as one that sets none).
        default_is: how the message names that default ("AdamW's default", "the optimizer's default in
            this check").
    """
    p: torch.Tensor = model.get_parameter(name)
    decayed = p.ndim >= 2
    wanted = weight_decay if decayed else 0.0
    decay = _number(group["weight_decay"], f"{name}'s weight_decay")
    if math.isclose(decay, wanted):
        return
    if math.isclose(decay, default):
        cause = f"its group sets no weight_decay, so it takes {default_is} ({default:g})"
    elif decayed:
        cause = ("the test that picks the decayed parameters misses this matrix (the rule is p.ndim >= 2: an "
                 "Embedding's weight and every Linear and conv weight are decayed)" if decay == 0 else
                 f"its group's weight_decay is {decay:g}, not the weight_decay argument")
    else:
        cause = ("the test that picks the decayed parameters also takes this bias or norm weight (decay on every "
                 "parameter, or a test that is not p.ndim >= 2)")
    owner = type(model.get_submodule(name.rpartition(".")[0])).__name__
    fail("no-decay-on-weights" if decayed else "decay-on-bias-or-norm",
         observed=f"{name} (of a {owner}, shape {tuple(p.shape)}) has weight_decay {group['weight_decay']}",
         expected=f"{wanted}: decay the matrices and kernels (ndim >= 2), never biases and normalisation scales",
         cause=cause, where="decay = p.ndim >= 2; weight_decay set explicitly in every group")


def group_lr(group: dict[str, Any], name: str, *, initial: bool = False) -> float:
    """The group's lr (its `initial_lr` first when `initial` and a scheduler set one), validated as a number."""
    value = group["initial_lr"] if initial and group.get("initial_lr") is not None else group["lr"]
    return _number(value, f"{name}'s lr")
