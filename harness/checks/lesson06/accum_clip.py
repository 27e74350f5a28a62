"""06-accum-clip, the probe.

Call the student's step on each round of micro-batches; record the start, threshold, steps' grads.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.checks.lesson05.common import make_batch, make_mlp
from harness.checks.lesson06.common import Batch, _recorded, _sgd, clip_threshold
from harness.contract.case import Case
from harness.contract.instruments import StepRecorder, collect, snapshot
from harness.contract.registry import register


def _micro_batches(seed: int, count: int) -> list[Batch]:
    # different input scales give micro-batch gradients of different lengths: clipping each one separately
    # then changes the direction of their sum, which is what lets the check see it
    scales = [1.0, 4.0, 0.5, 2.0, 8.0, 1.5]
    return [make_batch(seed + i, n=8, scale=scales[i % len(scales)]) for i in range(count)]


def accum_plan(case: Case) -> tuple[int, list[tuple[list[Batch], float]]]:
    """(model seed, [(micro-batches, max_norm as a fraction of the raw norm)]), clipping on then off."""
    seed, plan = (case.seeded(71), [(3, 0.2), (5, 6.0), (2, 0.5)]) if case.hidden else (
        case.seeded(70), [(4, 0.2), (4, 6.0)])
    return seed, [(_micro_batches(seed + 10 * round_, count), fraction)
                  for round_, (count, fraction) in enumerate(plan)]


@register("06-accum-clip")
def probe_accum_clip(accumulate_clip_step: Callable[..., torch.Tensor], *, case: Case) -> dict:
    """Call the student's step on each round of micro-batches; record the start, threshold, steps' grads."""
    seed, plan = accum_plan(case)
    model = make_mlp(seed)
    optimizer = _sgd(model)
    def record(item: tuple[list[Batch], float]) -> dict:
        batches, fraction = item
        start, max_norm = snapshot(model), clip_threshold(model, batches, fraction)
        with StepRecorder(optimizer) as steps:
            got = accumulate_clip_step(model, batches, nn.functional.mse_loss, optimizer, max_norm)
        return {"params": start, "max_norm": max_norm, "returned": got, "steps": _recorded(steps)}

    return {"calls": collect(plan, record)}
