"""15-masked-loss, the probe.

Call the loss on each case's inputs and on the same inputs scrambled at the padded positions; record the
values, the gradient reaching the logits, and the inputs after the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register


def loss_inputs(case: Case) -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(description, logits (B, T, V), targets (B, T), mask (B, T)) of each call; targets at padded positions
    are arbitrary classes, and class 0 (the pad token's id in this lesson) is the target of a real token too.
    The last call's logits are bfloat16 (a loss computed in float32 must come back in the logits' dtype).
    Hidden: other shapes, and a batch where one row is all padding."""
    generator = torch.Generator().manual_seed(case.seeded(153 if case.hidden else 152))
    shapes = ([((4, 7, 5), [7, 3, 5, 1]), ((3, 6, 4), [2, 6, 0]), ((3, 5, 6), [5, 1, 3], "bf16")] if case.hidden
              else [((3, 6, 5), [6, 2, 4]), ((3, 5, 4), [3, 5, 2], "bf16")])
    calls = []
    for (batch, time, vocab), lengths, *low in shapes:
        logits = torch.randn(batch, time, vocab, generator=generator) * 2
        targets = torch.randint(0, vocab, (batch, time), generator=generator)
        mask = torch.arange(time) < torch.tensor(lengths)[:, None]
        targets[0, 0], targets[-1, -1] = 0, 0  # class 0 is a real token's target here, and a padded one's there
        description = f"logits of shape {(batch, time, vocab)}, lengths {lengths}"
        if low:
            logits, description = logits.to(torch.bfloat16), f"bfloat16 {description}"
        calls.append((description, logits, targets, mask))
    return calls


def _scrambled(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
               seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same inputs with other logits and targets at the padded positions only (the loss must not change)."""
    generator = torch.Generator().manual_seed(seed)
    other_logits = torch.where(mask[..., None], logits,
                               (torch.randn(logits.shape, generator=generator) * 5).to(logits.dtype))
    other_targets = torch.where(mask, targets, torch.randint(0, logits.shape[-1], targets.shape, generator=generator))
    return other_logits, other_targets


@register("15-masked-loss")
def probe_masked_loss(masked_cross_entropy: Callable[..., Any], *, case: Case) -> dict:
    """Call the loss on each case's inputs and on the same inputs scrambled at the padded positions; record the
    values, the gradient reaching the logits, and the inputs after the call."""
    def record(item: tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]) -> dict:
        _, logits, targets, mask = item
        leaf, targets_in, mask_in = logits.clone().requires_grad_(True), targets.clone(), mask.clone()
        returned = masked_cross_entropy(leaf, targets_in, mask_in)
        grad = None
        if isinstance(returned, torch.Tensor) and returned.numel() == 1 and returned.grad_fn is not None:
            returned.sum().backward()
            grad = leaf.grad
        other_logits, other_targets = _scrambled(logits, targets, mask, case.seeded(7))
        again = masked_cross_entropy(other_logits, other_targets, mask.clone())
        return {"returned": returned, "requires_grad": isinstance(returned, torch.Tensor) and returned.requires_grad,
                "grad": grad, "again": again,
                "after": [leaf.detach().clone(), targets_in, mask_in]}

    return {"results": collect(loss_inputs(case), record)}
