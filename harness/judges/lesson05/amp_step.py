"""05-amp-step, the judge.

An inf gradient skips the step and halves the scale; two steps match the reference's losses and weights.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.checks.lesson05.amp_step import TWO_STEP_SCALE, amp_cases, amp_parts, amp_setup, two_batches
from harness.checks.lesson05.common import make_batch, make_mlp
from harness.contract.case import Case
from harness.contract.compare import judged, matching_tensors, same_values, type_name
from harness.contract.compare import number as _number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import snapshot
from harness.contract.recorded import recorded
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson05.common import (
    AMP_SCALER_REQUIREMENTS,
    AMP_SCOPE_REQUIREMENTS,
    _name,
    fail_autocast_dtype,
    other_dtype,
)


@judges(
    "05-amp-step", nonfinite=('runs/*/params_after_inf/*',), unjudged=('runs/*/stale/*',),  # for the message
    hints=Hints(
        nudge="The order is: training mode; zero the gradients; forward and loss inside torch.autocast; backward on "
        "the scaled loss outside autocast; let the scaler step the optimizer; update the scale.",
        concept="autocast wraps forward and loss only; scaler.scale(loss).backward() outside it; scaler.step "
        "unscales and skips steps with inf/NaN; scaler.update adapts the scale. Return a detached tensor: "
        ".item() would wait for the device every step.",
        solution="model.train(); optimizer.zero_grad(set_to_none=True); with torch.autocast(device_type, "
        "dtype=dtype): loss = loss_fn(model(x), y)  -- then, outside the block: scaler.scale(loss).backward(); "
        "scaler.step(optimizer); scaler.update(); return loss.detach()",
        section="5. The AMP training step",
    ),
    requires={
        "eval-mode": Requirement("puts the model in training mode",
                                 hint="The check hands your step a model in eval mode. Which call switches it to "
                                 "training behaviour?"),
        **AMP_SCOPE_REQUIREMENTS,
        **AMP_SCALER_REQUIREMENTS,
        "inf-step-not-skipped": Requirement("a step whose gradients hold inf leaves the parameters unchanged",
                                            hint="Does anything of yours change the parameters outside "
                                            "scaler.step(optimizer)?"),
        "scale-not-reduced": Requirement("an overflow halves the scale (scaler.update() after scaler.step)",
                                         hint="What is scaler.get_scale() after your step with an inf gradient, and "
                                         "what sets it afterwards?"),
        "returns-graph": Requirement("returns the loss detached",
                                     hint="Does the tensor you return still have a grad_fn?"),
        "not-a-tensor": Requirement("returns a tensor, not a Python number (no .item())",
                                    hint="Print type() of what your step returns: which call turned it into a "
                                    "number, and why does that cost a device sync every step?"),
        "wrong-return": Requirement("returns this batch's loss, computed before the update",
                                    hint="Which value do you return: the loss itself, or something derived from it "
                                    "(the scaled loss, a loss recomputed after the step)?"),
        "missing-zero-grad": Requirement("clears the gradients before backward",
                                         hint="backward() adds into .grad. What clears the previous step's "
                                         "gradients?"),
        "wrong-autocast-dtype": Requirement("runs autocast in the dtype it is given",
                                            hint="Which dtype does your autocast use: the argument, or one you "
                                            "wrote yourself?"),
        "wrong-update": Requirement("the update is the canonical one (the unscaled gradient of this batch's loss)",
                                    hint="Between backward and scaler.step, does anything of yours change the "
                                    "gradients?"),
    },
)
def judge_amp_step(seen: dict, *, case: Case) -> str:
    """An inf gradient skips the step and halves the scale; two steps match the reference's losses and weights."""
    for (seed, dtype, part), run in judged(amp_parts(case), seen["runs"]):
        start = snapshot(make_mlp(seed))
        if part == "skip":
            _judge_skip(run, start)
        else:
            _judge_two_steps(run, start, seed, dtype)
    kinds = " and ".join(_name(d) for _, d in amp_cases(case))
    return (f"{kinds}: forward and loss under autocast, backward outside, scale/step/update used, an inf gradient "
            "skips the step and halves the scale, two steps match the reference")


def _judge_skip(skip: dict, start: list[torch.Tensor]) -> None:
    """With an inf gradient: no optimizer step, the parameters as they started, the scale 1024 -> 512."""
    steps_taken, scale = skip["steps_taken"], skip["scale"]
    if not isinstance(steps_taken, int) or not isinstance(scale, float):
        raise WireError("malformed observation: steps_taken or scale")
    skipped = matching_tensors(skip["params_after_inf"], start, "params_after_inf")
    unchanged = all(same_values(a, b, dtype=False) for a, b in zip(start, skipped, strict=True))
    if steps_taken or not unchanged:
        fail(
            "inf-step-not-skipped",
            observed=f"with an inf gradient the optimizer stepped {steps_taken} time(s); parameters "
            f"{'unchanged' if unchanged else 'changed'}",
            expected="the step skipped (scaler.step sees the inf and does not call optimizer.step), "
            "parameters unchanged",
            cause="the parameters were changed outside scaler.step (an update written by hand), which no inf check "
            "protects" if steps_taken == 0 else "the optimizer stepped although a gradient held inf: the gradients "
            "were replaced or cleared before scaler.step could see the inf",
            where="every line between backward and scaler.step(optimizer)",
        )
    if scale != 512.0:
        fail(
            "scale-not-reduced",
            observed=f"scale after an overflowing step: {scale:g}",
            expected="512 (1024 times the backoff factor 0.5)",
            cause="scaler.update() runs before scaler.step (it then sees no overflow yet), or the scale is set by "
            "hand (scaler.update(new_scale) or a second update)",
            where="the scaler.update() line: once, after scaler.step(optimizer), without an argument",
        )


@recorded
def _reference_two_steps(seed: int, dtype: torch.dtype) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The canonical AMP step (the lesson's solution) run twice from the seeded start: its losses and the
    parameters after both. Recorded as one call on the case's seed and dtype: the step changes the model,
    optimizer and scaler it is given, and only the effects it leaves (losses and parameters) are judged."""
    model, optimizer, scaler = amp_setup(seed, init_scale=TWO_STEP_SCALE)
    losses = []
    for inputs, targets in two_batches(seed):
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype):
            loss = nn.functional.mse_loss(model(inputs), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.detach())
    return losses, snapshot(model)


def _judge_two_steps(two_steps: dict, start: list[torch.Tensor], seed: int, dtype: torch.dtype) -> None:
    """Each returned loss is the batch's detached loss; the parameters after two steps are the reference's.

    The second step's loss depends on the first update, so it is compared only once the update is verified.
    """
    ref_losses, ref_params = _reference_two_steps(seed, dtype)
    returned = two_steps["returned"]
    if not isinstance(returned, list) or len(returned) != len(ref_losses):
        raise WireError("malformed observation: not one returned value per step")
    for i, got in enumerate(returned):
        _judge_returned_type(i, got)
    _judge_autocast_dtype(returned[0], ref_losses[0], seed, dtype)
    _judge_returned_loss(0, returned[0], ref_losses[0])
    params = matching_tensors(two_steps["params"], ref_params, "params")
    stale = matching_tensors(two_steps["stale"], start, "stale")
    drift = max(float((a - b).abs().max()) for a, b in zip(params, ref_params, strict=True))
    if not drift <= 1e-5:
        moved = max(float((a - b).abs().max()) for a, b in zip(stale, start, strict=True))
        stale_kept = moved > 1.0
        fail(
            "missing-zero-grad" if stale_kept else "wrong-update",
            observed=f"after two steps the parameters differ from the reference by up to {drift:.3g}"
            + ("; a step that starts with stale gradients moved the parameters by up to "
               f"{moved:.3g}: the stale gradients were used" if stale_kept else ""),
            expected="the same parameters as the canonical step (zero_grad, autocast forward+loss, scaled backward, "
            "scaler.step, scaler.update)",
            cause="gradients left in .grad from before the step are added to this batch's: optimizer.zero_grad("
            "set_to_none=True) is missing before backward" if stale_kept
            else "the gradients the optimizer applies are not this batch's unscaled gradients: they were changed "
            "between backward and scaler.step (clipped while still scaled, divided, replaced), or backward ran on "
            "another loss",
            where="the start of amp_train_step" if stale_kept else "the lines between backward and scaler.step",
        )
    _judge_returned_loss(1, returned[1], ref_losses[1])


def _judge_autocast_dtype(got: Any, ref: torch.Tensor, seed: int, dtype: torch.dtype) -> None:
    """Fail when the first returned loss is that of an autocast forward in the other 16-bit dtype, not `dtype`'s."""
    value, inputs, targets = _number(got), *make_batch(seed)
    with torch.no_grad(), torch.autocast("cpu", dtype=other_dtype(dtype)):
        other = float(nn.functional.mse_loss(make_mlp(seed)(inputs), targets))
    def close(a: float, b: float) -> bool:
        return abs(a - b) <= 1e-6 * (1 + abs(b))
    if value is not None and close(value, other) and not close(value, float(ref)):
        fail_autocast_dtype(dtype, "amp_train_step")


def _judge_returned_type(i: int, got: Any) -> None:
    """Fail unless step `i` returned a tensor without a graph."""
    if isinstance(got, torch.Tensor) and got.requires_grad:
        fail(
            "returns-graph",
            observed="the returned loss still requires grad",
            expected="loss.detach(): a value to log, not the graph",
            cause="returning the loss itself keeps the whole step's autograd graph alive",
            where="the return statement of amp_train_step",
        )
    if not isinstance(got, torch.Tensor):
        fail(
            "not-a-tensor",
            observed=f"step {i} returned {type_name(got)} {got!r}"[:200],
            expected="the loss as a detached tensor: `return loss.detach()`",
            cause="nothing is returned (a missing return statement)" if got is None
            else "the loss was turned into a Python number (.item() or float()), which waits for the device "
            "at every step" if isinstance(got, (int, float)) else "something other than the loss is returned",
            where="the return statement of amp_train_step",
        )


def _judge_returned_loss(i: int, got: torch.Tensor, ref: torch.Tensor) -> None:
    """Fail unless step `i` returned the batch's loss `ref` (before the update)."""
    value = _number(got)
    if value is None or not abs(value - float(ref)) <= 1e-3 * (1 + abs(float(ref))):
        scaled = value is not None and abs(value - float(ref) * TWO_STEP_SCALE) <= 1e-3 * (1 + abs(float(ref)))
        fail(
            "wrong-return",
            observed=f"step {i} returned {value:.6g}" if value is not None
            else f"step {i} returned a tensor of shape {tuple(got.shape)}",
            expected=f"the batch's loss before the update, about {float(ref):.4f} (a detached tensor)",
            cause=f"the scaled loss (the loss times the scale, {TWO_STEP_SCALE:g}) is returned" if scaled
            else "another value than this batch's loss: a loss recomputed after the step, a sum instead of the "
            "mean, or another tensor",
            where="the return statement of amp_train_step",
        )
