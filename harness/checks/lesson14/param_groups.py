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
from harness.contract.failure import Hints, Requirement, fail
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


@register(
    "14-param-groups",
    hints=Hints(
        nudge="Sort each trainable parameter by two questions: backbone or head (its learning rate), matrix or kernel "
              "(p.ndim >= 2: weight decay) or bias and norm scale (no decay). Each answer pair is one group.",
        concept="An optimizer takes groups: dicts with 'params' and their own options, each parameter in one group "
                "only, options left out taking the optimizer's defaults (AdamW's weight_decay is 0.01). Frozen "
                "parameters stay out: they would only cost memory for their optimizer state.",
        solution="for name, p in model.named_parameters(): if p.requires_grad: groups[(name.startswith('backbone.'), "
                 "p.ndim >= 2)].append(p); return torch.optim.AdamW([{'params': ps, 'lr': backbone_lr if backbone "
                 "else head_lr, 'weight_decay': weight_decay if decay else 0.0} for (backbone, decay), ps in "
                 "groups.items() if ps])",
        section="4. Full fine-tuning with differential learning rates"),
    requires={
        "frozen-params-included": Requirement(
            "frozen parameters are in no group",
            hint="The model you get has a frozen block. Which attribute of a parameter tells, and does your function "
                 "look at it?"),
        "missing-params": Requirement(
            "every trainable parameter is in a group (the parameters themselves, not copies)",
            hint="Count the parameters in your groups and the trainable ones of the model: which kind does no "
                 "selection of yours take?"),
        "duplicate-params": Requirement(
            "each parameter is in exactly one group",
            hint="Can one parameter pass two of your selections (a group of everything plus a group of biases)?"),
        "decay-on-bias-or-norm": Requirement(
            "biases and normalisation weights (ndim < 2) get weight_decay 0.0",
            hint="Print p.ndim for a BatchNorm weight and for a bias: which group do they land in? A BatchNorm "
                 "weight's name does not contain 'bias'."),
        "no-decay-on-weights": Requirement(
            "conv kernels and linear weights (ndim >= 2) get weight_decay, set explicitly in their group",
            hint="A conv kernel has 4 dimensions: does your test for 'a weight matrix' take it? And does every group "
                 "with weights set 'weight_decay' itself?"),
        "wrong-lr": Requirement(
            "backbone parameters get backbone_lr, head parameters head_lr",
            hint="Print each group's lr with the names of its parameters: which get backbone_lr?"),
        "not-adamw": Requirement(
            "returns a torch.optim.AdamW built on those groups",
            hint="Print type(finetune_optimizer(...)): is it the optimizer, or the list of groups you built?"),
    },
)
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
