"""Metrics for `fit`: functions `(outputs, targets) -> 0-dim tensor`, the batch mean, left on the device.

Returning a tensor (not a float) keeps the sum over an epoch on the device; `fit` reads it once per epoch.
"""

from __future__ import annotations

import torch


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Fraction of correct predictions in the batch.

    Multi-class: `outputs` (N, C) logits, `targets` (N,) class indices. Binary: `outputs` (N,) or (N, 1)
    logits and `targets` of the same shape holding 0/1 (a logit above 0 predicts 1).

    Raises:
        ValueError: shapes that are neither of the two layouts.
    """
    if outputs.dim() == 2 and outputs.shape[1] > 1 and targets.dim() == 1:
        return (outputs.argmax(dim=1) == targets).float().mean()
    if outputs.shape == targets.shape:
        return ((outputs > 0) == (targets > 0.5)).float().mean()
    raise ValueError(
        f"accuracy got outputs {tuple(outputs.shape)} and targets {tuple(targets.shape)}: expected logits (N, C) "
        "with class indices (N,), or binary logits and 0/1 targets of the same shape."
    )
