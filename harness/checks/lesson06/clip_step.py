"""06-clip-step, the probe.

Call the student's step on each batch of the plan, the model in eval mode first; record the start, the
threshold, the forwards' training mode and the gradients each optimizer step saw.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.checks.lesson05.common import make_batch, make_mlp
from harness.checks.lesson06.common import Batch, _recorded, _sgd, clip_threshold
from harness.contract.case import Case
from harness.contract.instruments import ForwardRecorder, StepRecorder, collect, snapshot
from harness.contract.registry import register


def clip_plan(case: Case) -> tuple[int, list[tuple[Batch, float]]]:
    """(model seed, [(batch, max_norm as a fraction of the raw norm)]): clipping on, then off."""
    seed, plan = (case.seeded(62), [(1, 4.0), (2, 0.3), (3, 0.05), (4, 10.0)]) if case.hidden else (
        case.seeded(61), [(1, 0.25), (2, 4.0)])
    return seed, [(make_batch(seed + batch_seed, scale=5.0), fraction) for batch_seed, fraction in plan]


@register("06-clip-step")
def probe_clip_step(clip_train_step: Callable[..., torch.Tensor], *, case: Case) -> dict:
    """Call the student's step on each batch of the plan, the model in eval mode first; record the start, the
    threshold, the forwards' training mode and the gradients each optimizer step saw."""
    seed, plan = clip_plan(case)
    model = make_mlp(seed)
    optimizer = _sgd(model)
    def record(item: tuple[Batch, float]) -> dict:
        batch, fraction = item
        start, max_norm = snapshot(model), clip_threshold(model, [batch], fraction)
        model.eval()
        with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards:
            got = clip_train_step(model, batch, nn.functional.mse_loss, optimizer, max_norm)
        return {"params": start, "max_norm": max_norm, "returned": got, "steps": _recorded(steps),
                "training": [r.training for r in forwards.records]}

    return {"calls": collect(plan, record)}
