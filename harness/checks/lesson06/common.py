"""Lesson 06: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from harness.contract.instruments import StepRecorder

Batch = tuple[torch.Tensor, torch.Tensor]


def flat_grads(grads: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """The gradients present, flattened and concatenated into one float tensor (None entries skipped)."""
    return torch.cat([g.reshape(-1).float() for g in grads if g is not None])


def reference_grads(model: nn.Module, batches: Sequence[Batch],
                    autocast_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The flat gradient of the mean MSE loss over `batches` (averaged), computed on a copy of `model`."""
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    for inputs, targets in batches:
        with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            loss = nn.functional.mse_loss(twin(inputs), targets)
        (loss / len(batches)).backward()
    return flat_grads([p.grad for p in twin.parameters()])


def clip_threshold(model: nn.Module, batches: Sequence[Batch], fraction: float,
                   dtype: torch.dtype | None = None) -> float:
    """The threshold of a call: `fraction` of the true gradient norm (an input, derived alike by probe and judge)."""
    return fraction * float(reference_grads(model, batches, autocast_dtype=dtype).norm())


def _recorded(steps: StepRecorder) -> list[list[torch.Tensor | None]]:
    """Probe side: the gradients the optimizer saw at each step."""
    return [record.grads for record in steps.records]


def _sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01)
