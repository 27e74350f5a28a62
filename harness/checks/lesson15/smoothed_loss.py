"""15-smoothed-loss, the probe.

Call the loss on each case's logits (a leaf that requires grad) with the torch calls recorded; record the
value and the gradient reaching the logits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.forbidden import CallRecorder
from harness.contract.instruments import collect
from harness.contract.registry import register


def smoothed_calls(case: Case) -> list[tuple[str, torch.Tensor, torch.Tensor, float]]:
    """(description, logits (N, C), targets (N,), smoothing) of each call: ordinary logits, smoothing 0, logits in
    the hundreds (where softmax then log gives log(0)), and bfloat16 logits (a loss computed in float32 must come
    back in the logits' dtype). Hidden: other sizes and smoothings."""
    generator = torch.Generator().manual_seed(case.seeded(157 if case.hidden else 156))
    plan = ([(8, 7, 0.05, 1.0), (5, 2, 0.3, 1.0), (3, 6, 0.0, 3.0), (6, 5, 0.15, 150.0), (7, 3, 0.1, 2.0, "bf16")]
            if case.hidden else [(6, 5, 0.1, 1.0), (4, 3, 0.0, 1.0), (4, 4, 0.2, 100.0), (5, 4, 0.1, 1.0, "bf16")])
    calls = []
    for n, classes, smoothing, scale, *low in plan:
        logits = torch.randn(n, classes, generator=generator) * scale
        targets = torch.randint(0, classes, (n,), generator=generator)
        size = "logits in the hundreds" if scale > 10 else f"logits of shape {(n, classes)}"
        if low:
            logits, size = logits.to(torch.bfloat16), f"bfloat16 {size}"
        calls.append((f"{size}, smoothing={smoothing}", logits, targets, smoothing))
    return calls


@register("15-smoothed-loss")
def probe_smoothed_loss(smoothed_cross_entropy: Callable[..., Any], *, case: Case) -> dict:
    """Call the loss on each case's logits (a leaf that requires grad) with the torch calls recorded; record the
    value and the gradient reaching the logits."""
    recorder = CallRecorder()

    def record(item: tuple[str, torch.Tensor, torch.Tensor, float]) -> dict:
        _, logits, targets, smoothing = item
        leaf = logits.clone().requires_grad_(True)
        with recorder:
            returned = smoothed_cross_entropy(leaf, targets.clone(), smoothing)
        grad = None
        if isinstance(returned, torch.Tensor) and returned.numel() == 1 and returned.grad_fn is not None:
            returned.sum().backward()
            grad = leaf.grad
        return {"returned": returned, "grad": grad}

    results = collect(smoothed_calls(case), record)
    return {"results": results, "calls": recorder.seen}
