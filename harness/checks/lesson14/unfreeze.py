"""14-unfreeze, the probe.

Call the student's function epoch after epoch on a model that came in trainable, then on one that came in
frozen; record every parameter's flag after each call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from torch import nn

from harness.checks.lesson14.common import module_attributes
from harness.contract.case import Case
from harness.contract.inputs import seeded
from harness.contract.registry import register
from harness.finetune import TransferNet


class _DeepNet(nn.Module):
    """A TransferNet-like model whose backbone has four conv blocks."""

    def __init__(self, width: int) -> None:
        super().__init__()
        blocks = TransferNet(3, width).backbone
        self.backbone = nn.Sequential(*list(blocks)[:3], nn.Sequential(nn.Conv2d(4 * width, 4 * width, 1),
                                                                         nn.BatchNorm2d(4 * width)), *list(blocks)[3:])
        self.head = nn.Linear(4 * width, 3)


class _ShallowNet(nn.Module):
    """A TransferNet-like model whose backbone has two conv blocks."""

    def __init__(self, width: int) -> None:
        super().__init__()
        blocks = list(TransferNet(3, width).backbone)
        self.backbone = nn.Sequential(*blocks[:2], *blocks[3:])
        self.head = nn.Linear(2 * width, 3)


_ARCHITECTURES = {"TransferNet": functools.partial(TransferNet, 3), "two blocks": _ShallowNet,
                  "four blocks": _DeepNet}


def unfreeze_cases(case: Case) -> list[tuple[str, int, int]]:
    """(architecture, width, every): backbones of 2, 3 and 4 blocks in the visible case already."""
    if not case.hidden:
        return [("TransferNet", 4, 2), ("two blocks", 4, 2), ("four blocks", 3, 1)]
    return [("TransferNet", 6, 1), ("four blocks", 4, 3), ("two blocks", 5, 2)]


def unfreeze_model(case: Case, index: int, architecture: str, width: int) -> nn.Module:
    """The case's seeded model of the given architecture and width."""
    return seeded(case.seeded(230 + index), functools.partial(_ARCHITECTURES[architecture], width))


def block_names(model: nn.Module) -> list[str]:
    """The names of the backbone's blocks that hold parameters, bottom (first) to top (last)."""
    return [f"backbone.{name}" for name, block in model.backbone.named_children() if list(block.parameters())]


@register("14-unfreeze")
def probe_unfreeze(gradual_unfreeze: Callable[..., Any], *, case: Case) -> dict:
    """Call the student's function epoch after epoch on a model that came in trainable, then on one that came in
    frozen; record every parameter's flag after each call, and the modules that got a plain `requires_grad`
    attribute (set on the module object, which changes none of its parameters)."""
    runs, attributes = [], []
    for index, (architecture, width, every) in enumerate(unfreeze_cases(case)):
        for came_frozen in (False, True):
            model = unfreeze_model(case, index, architecture, width)
            if came_frozen:
                model.requires_grad_(False)
            flags = []
            for epoch in range(every * len(block_names(model)) + 2):
                gradual_unfreeze(model, epoch, every)
                flags.append([p.requires_grad for p in model.parameters()])
            runs.append(flags)
            attributes.append(module_attributes(model))
    return {"runs": runs, "attributes": attributes}
