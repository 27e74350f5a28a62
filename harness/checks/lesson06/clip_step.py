"""06-clip-step, the probe.

Call the student's step on each batch of the plan, the model in eval mode first; record the start, the
threshold, the forwards' training mode and the gradients each optimizer step saw.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.checks.lesson05.common import make_batch, make_mlp
from harness.checks.lesson06.common import _CLIPPING_REQUIREMENTS, Batch, _recorded, _sgd, clip_threshold
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.instruments import ForwardRecorder, StepRecorder, collect, snapshot
from harness.contract.registry import register


def clip_plan(case: Case) -> tuple[int, list[tuple[Batch, float]]]:
    """(model seed, [(batch, max_norm as a fraction of the raw norm)]): clipping on, then off."""
    seed, plan = (case.seeded(62), [(1, 4.0), (2, 0.3), (3, 0.05), (4, 10.0)]) if case.hidden else (
        case.seeded(61), [(1, 0.25), (2, 4.0)])
    return seed, [(make_batch(seed + batch_seed, scale=5.0), fraction) for batch_seed, fraction in plan]


@register(
    "06-clip-step",
    hints=Hints(
        nudge="Clip between backward() and optimizer.step(): the gradients must be complete, and the optimizer must "
        "see the clipped ones. Clip by the total norm, and return the norm it reports.",
        concept="clip_grad_norm_(parameters, max_norm) rescales all gradients by max_norm / N when their total norm "
        "N exceeds max_norm, and returns N (before clipping).",
        solution="optimizer.zero_grad(set_to_none=True); loss_fn(model(x), y).backward(); "
        "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); optimizer.step(); return norm",
        section="2. Clipping by norm, clipping by value",
    ),
    requires={
        "eval-mode": Requirement(
            "puts the model in training mode",
            hint="The check hands you a model in eval mode. Which call switches it to training behaviour?"),
        "no-step": Requirement(
            "takes one optimizer step",
            hint="Does every path of your function reach optimizer.step()?"),
        "wrong-step-count": Requirement(
            "takes exactly one optimizer step per call",
            hint="Count the optimizer.step() calls one call of your function makes: is one inside a loop?"),
        "missing-zero-grad": Requirement(
            "each step uses only its batch's gradients (cleared before backward)",
            hint="backward() adds into .grad. What clears the previous step's gradients before this one's backward?"),
        **_CLIPPING_REQUIREMENTS,
    },
)
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
