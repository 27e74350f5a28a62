"""Lesson 12: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

import torch
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]


def _hooks_on(model: nn.Module) -> int:
    """Forward hooks left on the model's modules, plus global module hooks."""
    from torch.nn.modules import module as module_module

    local = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    return local + len(getattr(module_module, "_global_forward_hooks", {})) + \
        len(getattr(module_module, "_global_forward_pre_hooks", {}))
