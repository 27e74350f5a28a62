"""Lesson 06: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from harness.contract.failure import Requirement
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


_CLIPPING_REQUIREMENTS = {
    "clipped-below-threshold": Requirement(
        "leaves gradients shorter than max_norm unchanged",
        hint="Clipping only ever shrinks. What factor does your code apply when the norm is already below "
        "max_norm?"),
    "not-clipped": Requirement(
        "the optimizer steps on gradients clipped to max_norm",
        hint="Print the total gradient norm right before optimizer.step(): is it at most max_norm? Where does "
        "your clipping sit relative to the step?"),
    "value-not-norm": Requirement(
        "clips by the total norm (one factor for every gradient), not entry by entry",
        hint="Compare the direction before and after your clipping: cutting each entry separately changes it. "
        "Which utility rescales all gradients by one factor?"),
    "wrong-direction": Requirement(
        "rescales every gradient by the same factor",
        hint="Is the factor computed once, from the norm of all gradients together, or once per parameter?"),
    "wrong-threshold": Requirement(
        "clips to exactly max_norm",
        hint="After clipping, the total norm should equal max_norm: which threshold does your call receive?"),
    "not-a-tensor": Requirement(
        "returns the pre-clip norm as a tensor",
        hint="Print type() of what you return: clip_grad_norm_ already returns a tensor; is it converted, or not "
        "returned?"),
    "wrong-return": Requirement(
        "returns the total norm before clipping",
        hint="Which norm do you return: the one measured before clipping (clip_grad_norm_'s return value) or one "
        "measured later?"),
}
