"""Lesson 14: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.contract.errors import explain
from harness.contract.failure import CheckFailed

BATCHNORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


def _pretrained_like(model: nn.Module, seed: int) -> nn.Module:
    """`model` with BatchNorm scales, shifts and statistics drawn at random (as after pretraining), so that a tensor
    left unloaded shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, BATCHNORMS):
                module.weight.copy_(1 + 0.2 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.2 * torch.randn(module.bias.shape, generator=generator))
                module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=generator) * 0.3)
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=generator) + 0.5)
                module.num_batches_tracked.fill_(1000)
    return model


def _attempt(record: dict[str, Any], run: Callable[[], Any]) -> Any:
    """Run the student's code; an exception is recorded (explained, with the student's line), not raised."""
    try:
        return run()
    except CheckFailed:
        raise
    except Exception as error:  # the student's code raised
        record["raised"] = explain(error)[:2000]
        return None


def module_attributes(model: nn.Module) -> list[str]:
    """The names of `model`'s modules ("" for the model itself) that hold a plain `requires_grad` attribute: one
    set by `module.requires_grad = flag`, which lands in the module's __dict__ and changes none of its
    parameters (nn.Module has no such attribute of its own; requires_grad_() sets the parameters')."""
    return sorted(name for name, module in model.named_modules() if "requires_grad" in vars(module))
