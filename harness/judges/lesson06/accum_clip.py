"""06-accum-clip, the judge.

One optimizer step per call, on the averaged gradient clipped once after the last micro-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from harness.checks.lesson05.common import make_mlp
from harness.checks.lesson06.accum_clip import accum_plan
from harness.checks.lesson06.common import Batch, clip_threshold, reference_grads
from harness.contract.case import Case
from harness.contract.compare import close_norm, judged
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson06.common import (
    _CLIPPING_REQUIREMENTS,
    _check_clipped,
    _clip_to,
    _cosine,
    _fail_stale,
    _only_step,
    _returned_norm,
    _same_input,
    _stale_added,
    _start_at,
)


def _clipped_in_loop(model: nn.Module, batches: Sequence[Batch], max_norm: float) -> torch.Tensor:
    """The gradient a loop that calls clip_grad_norm_ after every micro-batch's backward leaves behind."""
    running = torch.zeros(())
    for batch in batches:
        running = running + reference_grads(model, [batch]) / len(batches)
        running = running * min(1.0, max_norm / (float(running.norm()) + 1e-6))
    return running


@judges(
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
def judge_accum_clip(seen: dict, *, case: Case) -> str:
    """One optimizer step per call, on the averaged gradient clipped once after the last micro-batch."""
    seed, plan = accum_plan(case)
    model = make_mlp(seed)
    previous = None
    for i, ((batches, fraction), call) in enumerate(judged(plan, seen["calls"])):
        _start_at(model, call["params"], first=i == 0)
        raw = reference_grads(model, batches)
        max_norm = clip_threshold(model, batches, fraction)
        _same_input(call["max_norm"], max_norm)
        grads = _only_step(call["steps"], model, "accumulate_clip_step", many_code="steps-per-micro-batch")
        _accum_failures(grads, raw, previous, model, batches, max_norm, call["returned"])
        _returned_norm(call["returned"], float(raw.norm()), max_norm, "accumulate_clip_step")
        previous = grads
    return "one optimizer step per call, the averaged gradient clipped once after the last micro-batch"


def _accum_failures(seen: torch.Tensor, raw: torch.Tensor, previous: torch.Tensor | None, model: nn.Module,
                    batches: Sequence[Batch], max_norm: float, returned: Any) -> None:
    """Fail on an accumulation mistake the optimizer's gradient shows, before judging the clipping itself."""
    count = len(batches)
    if _stale_added(seen, raw, previous) and not close_norm(seen, raw, rel=2e-3, floor=1e-7):
        _fail_stale("accumulate_clip_step")
    last = reference_grads(model, batches[-1:]) / count
    only_last = (close_norm(seen, last, rel=2e-3, floor=1e-7)
                 or close_norm(seen, _clip_to(last, max_norm), rel=2e-3, floor=1e-7))
    if (only_last and not close_norm(seen, raw, rel=2e-3, floor=1e-7)
            and not close_norm(last, raw, rel=2e-3, floor=1e-7)):
        fail(
            "only-last-micro-batch",
            observed=f"the optimizer saw only the last micro-batch's gradient (of {count})",
            expected="the sum over all micro-batches (each loss divided by their number)",
            cause="either the gradients are cleared inside the micro-batch loop (zero_grad before each backward), so "
            "each backward replaces the previous ones, or backward runs once, after the loop, on the last "
            "micro-batch's loss only",
            where="where optimizer.zero_grad is called (once, before the loop), and the indentation of the backward "
            "line (inside the loop)",
        )
    summed_norm = count * float(raw.norm())
    returned_summed = (isinstance(returned, torch.Tensor) and returned.numel() == 1
                       and abs(float(returned.detach()) - summed_norm) <= 1e-3 * summed_norm)
    if returned_summed or (float(raw.norm()) <= max_norm and close_norm(seen, raw * count, rel=2e-3, floor=1e-7)):
        fail(
            "loss-not-averaged",
            observed=f"the optimizer saw {count} times the mean gradient",
            expected="the gradient of the mean loss over the micro-batches (as one big batch would give)",
            cause="each micro-batch loss is backpropagated as is; divide it by len(micro_batches) first",
            where="the backward line inside the micro-batch loop",
        )
    _divided_by_size(seen, raw, batches, max_norm, returned)
    per_micro = _clipped_in_loop(model, batches, max_norm)
    clipped_once = _clip_to(raw, max_norm)
    if (float(raw.norm()) > max_norm and close_norm(seen, per_micro, rel=2e-3, floor=1e-7)
            and not close_norm(per_micro, clipped_once, rel=2e-3, floor=1e-7)):
        fail(
            "clipped-per-micro-batch",
            observed="the optimizer saw a gradient clipped after each micro-batch "
            f"(cosine {_cosine(seen, raw):.4f} with the true gradient)",
            expected="the accumulated gradient, clipped once to max_norm",
            cause="clipping runs inside the micro-batch loop: it clips partial sums, so the threshold and "
            "the direction both depend on how the batch was split",
            where="move the clipping after the loop, right before optimizer.step()",
        )
    _check_clipped(seen, raw, max_norm, "accumulate_clip_step")


def _divided_by_size(seen: torch.Tensor, raw: torch.Tensor, batches: Sequence[Batch], max_norm: float,
                     returned: Any) -> None:
    """Fail when each micro-batch loss was divided by the micro-batch size instead of the number of micro-batches:
    the pre-clip norm (returned, or seen by the optimizer when nothing was clipped) is count / size times the
    right one. The case's micro-batches hold another number of samples than there are micro-batches."""
    count, size = len(batches), len(batches[0][0])
    if size == count:
        return
    wrong = raw * (count / size)
    wrong_norm = float(wrong.norm())
    returned_wrong = (isinstance(returned, torch.Tensor) and returned.numel() == 1
                      and abs(float(returned.detach()) - wrong_norm) <= 2e-3 * wrong_norm)
    if returned_wrong or (wrong_norm <= max_norm and close_norm(seen, wrong, rel=2e-3, floor=1e-7)):
        fail(
            "loss-not-averaged",
            observed=f"the pre-clip gradient was {count}/{size} of the mean gradient: each micro-batch loss was "
            f"divided by {size}, the number of samples in a micro-batch, not by the {count} micro-batches",
            expected="the gradient of the mean loss over the micro-batches (as one big batch would give)",
            cause="the loss is divided by the micro-batch size (len(inputs)) instead of the number of "
            "micro-batches; loss_fn already averages within a micro-batch",
            where="the backward line inside the micro-batch loop: loss / len(micro_batches)",
            hint="loss_fn already takes the mean over a micro-batch's samples. What is left to average over?",
        )
