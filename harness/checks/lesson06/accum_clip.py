"""06-accum-clip, the probe.

Call the student's step on each round of micro-batches; record the start, threshold, steps' grads.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.checks.lesson05.common import make_batch, make_mlp
from harness.checks.lesson06.common import _CLIPPING_REQUIREMENTS, Batch, _recorded, _sgd, clip_threshold
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register(
    "06-accum-clip",
    hints=Hints(
        nudge="Accumulate first, clip once: backward every micro-batch (each loss divided by the number of "
        "micro-batches), then clip the complete gradient, then take one optimizer step.",
        concept="With accumulation, .grad adds up over the micro-batches; the optimizer step, and so the clipping, "
        "belongs after the last one. Clipping a partial sum depends on how the batch was split.",
        solution="optimizer.zero_grad(set_to_none=True)\nfor x, y in micro_batches: "
        "(loss_fn(model(x), y) / len(micro_batches)).backward()\n"
        "norm = clip_grad_norm_(model.parameters(), max_norm); optimizer.step(); return norm",
        section="4. Clipping with gradient accumulation",
    ),
    requires={
        "no-step": Requirement(
            "takes one optimizer step per call",
            hint="Does your function reach optimizer.step() after the loop?"),
        "steps-per-micro-batch": Requirement(
            "takes exactly one optimizer step per call, after the last micro-batch",
            hint="Count the optimizer.step() calls one call makes: is the step inside the micro-batch loop?"),
        "missing-zero-grad": Requirement(
            "each call starts from cleared gradients",
            hint="Call your function twice: does the second call's gradient still hold the first call's? What "
            "clears it, and where?"),
        "only-last-micro-batch": Requirement(
            "accumulates every micro-batch's gradient (cleared once, before the loop)",
            hint="Which micro-batches' gradients are in .grad when the loop ends? Where are they cleared, and "
            "where does backward run?"),
        "loss-not-averaged": Requirement(
            "the accumulated gradient is that of the mean loss (each loss divided by the number of micro-batches)",
            hint="With k micro-batches, .grad holds k terms. How do you make their sum the gradient of one big "
            "batch's mean loss?"),
        "clipped-per-micro-batch": Requirement(
            "clips once, after the last micro-batch",
            hint="How many times does your clipping run per optimizer step?"),
        **_CLIPPING_REQUIREMENTS,
    },
)
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
