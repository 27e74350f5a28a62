"""12-init-loss, the probe.

Call `loss_at_init` on each case's fresh model; record what it returned, the forward's modes, the mode after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.instruments import ForwardRecorder, collect
from harness.contract.registry import register


def _classifier(seed: int, features: int, classes: int, hidden: int = 32) -> nn.Module:
    """A small MLP classifier with dropout (so the mode matters), default PyTorch init, seeded."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.5), nn.Linear(hidden, classes))


def init_cases(case: Case) -> list[dict[str, Any]]:
    """(seed, features, classes, batch size, the mode the model is in before the call) of each call."""
    shapes = [(20, 7, 48, True), (12, 100, 256, False), (5, 2, 9, True)] if case.hidden else \
        [(16, 10, 64, True), (8, 4, 32, False)]
    return [{"seed": case.seeded(120 + i), "features": f, "classes": c, "batch": b, "training": t}
            for i, (f, c, b, t) in enumerate(shapes)]


def init_inputs(item: dict[str, Any]) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The model (in the item's mode), inputs and targets of one init-loss item."""
    model = _classifier(item["seed"], item["features"], item["classes"]).train(item["training"])
    generator = torch.Generator().manual_seed(item["seed"] + 1)
    inputs = torch.randn(item["batch"], item["features"], generator=generator)
    targets = torch.randint(0, item["classes"], (item["batch"],), generator=generator)
    return model, inputs, targets


@register("12-init-loss")
def probe_init_loss(loss_at_init: Callable[..., Any], *, case: Case) -> dict:
    """Call `loss_at_init` on each case's fresh model; record what it returned, the forward's modes, the mode after."""
    def record(item: dict[str, Any]) -> dict:
        model, inputs, targets = init_inputs(item)
        with ForwardRecorder(model) as forwards:
            got = loss_at_init(model, inputs, targets, item["classes"])
        got = tuple(got) if isinstance(got, (tuple, list)) else got
        return {"returned": got, "training_after": model.training,
                "forwards": [(r.training, r.grad_enabled) for r in forwards.records]}

    return {"calls": collect(init_cases(case), record)}
