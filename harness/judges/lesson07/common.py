"""Lesson 07: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

from harness.checks.lesson07.common import LoopSetting, is_number, tiny_regressor
from harness.contract.compare import close_tensors, isclose_number, malformed
from harness.contract.failure import Requirement, fail
from harness.contract.recorded import recorded


def _first_difference(a: Sequence[float], b: Sequence[float]) -> int:
    """The first index where two equally long sequences of numbers differ."""
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=True))
                if not isclose_number(x, y))


def _fmt(values: Sequence[float], limit: int = 8) -> str:
    shown = ", ".join(f"{v:.4g}" for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


def _order_note(warned: Any) -> str:
    if warned is not True:
        return ""
    return " PyTorch also warned: 'Detected call of `lr_scheduler.step()` before `optimizer.step()`'."


def _used_lrs(seen: dict[str, Any]) -> list[float]:
    """The learning rate each recorded optimizer step used (validated as numbers)."""
    lrs = [step["lr"] for step in seen["steps"]]
    if not all(is_number(lr) for lr in lrs):
        malformed("the recorded learning rates are not numbers")
    return [float(lr) for lr in lrs]


def _replay_steps(model: nn.Module, seen: dict[str, Any], batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Verify every recorded SGD step: weights where the previous step left them, gradients of this batch's
    MSE loss at those weights, and the final weights after the last update."""
    expected = [p.detach().clone() for p in model.parameters()]
    for index, (step, (inputs, targets)) in enumerate(zip(seen["steps"], batches, strict=True)):
        params, grads = step["params"], step["grads"]
        fresh = isinstance(params, list) and close_tensors(params, expected, rtol=1e-5, atol=1e-7)
        if fresh:
            with torch.no_grad():
                for parameter, value in zip(model.parameters(), params, strict=True):
                    parameter.copy_(value)
            model.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(inputs), targets).backward()
        if not fresh or not (isinstance(grads, list)
                             and close_tensors(grads, [p.grad for p in model.parameters()], rtol=1e-5, atol=1e-7)):
            fail(
                "steps-inconsistent",
                observed=f"optimizer step {index} saw weights or gradients that are not those of plain SGD on "
                "this batch after the previous steps",
                expected="each optimizer.step() uses the gradients of the current batch's loss only",
                cause="gradients accumulated across batches (zero_grad missing), gradients changed before the step "
                "(clipped, rescaled), the loss computed on other data, or the weights changed outside "
                "optimizer.step()",
                where="the batch loop: zero_grad, forward, loss, backward, optimizer.step()",
            )
        expected = [p - float(step["lr"]) * g for p, g in zip(params, grads, strict=True)]
    if not (isinstance(seen["final"], list) and close_tensors(seen["final"], expected, rtol=1e-5, atol=1e-7)):
        fail(
            "steps-inconsistent",
            observed="the final weights are not those the last optimizer step produced",
            expected="the weights change only through optimizer.step()",
            cause="the weights changed after the last optimizer step",
            where="the end of the training function",
        )


@recorded
def warmup_cosine_reference(step: int, warmup_steps: int, total_steps: int) -> float:
    """The course's warmup-cosine factor (lessons 07, 10, 11, 15, the drills and the showcase use this convention).

    During warmup (`step < warmup_steps`) the factor is `(step + 1) / warmup_steps`: the first optimizer step
    already trains (at `1 / warmup_steps` of the peak) and the last warmup step reaches the peak. Then a half
    cosine falls from 1 at `step == warmup_steps` to 0 at `total_steps`, with
    `progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)` clamped to 1, and stays at 0 after.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _check_train_mode(seen: dict[str, Any]) -> None:
    """Every forward that recorded a graph ran in train mode."""
    modes = seen["train_modes"]
    if not isinstance(modes, list) or not all(isinstance(m, bool) for m in modes):
        malformed("the forward modes")
    if not all(modes):
        fail(
            "not-train-mode",
            observed=f"{modes.count(False)} of {len(modes)} training forwards ran with model.training == False "
            "(the check hands the model over in eval mode, as after an evaluation)",
            expected="model.train() before the batch loop: dropout and batch norm behave differently in eval mode",
            cause="model.train() is never called, or called once before the epoch loop and undone by a "
            "model.eval() inside it",
            where="the top of the epoch loop: model.train()",
        )


def _step_count_failure(observed: int, epochs: int, batches: int) -> None:
    fail(
        "wrong-step-count",
        observed=f"{observed} optimizer steps",
        expected=f"{epochs * batches} ({epochs} epochs x {batches} batches, one optimizer.step() per batch)",
        cause=("more epochs or batches than asked, or optimizer.step() called more than once per batch"
               if observed > epochs * batches else "fewer epochs than asked, batches skipped, or an early return"),
        where="the epoch and batch loops",
    )


def _verify_loop_steps(seen: dict[str, Any], setting: LoopSetting) -> None:
    """Every recorded step is a real SGD step on its batch, from the case's model."""
    _replay_steps(tiny_regressor(setting.model_seed), seen, setting.batches * setting.epochs)


# What every training loop of lesson 07 must do, whatever its scheduler (07-per-epoch, 07-per-step).
LOOP_REQUIREMENTS = {
    "steps-inconsistent": Requirement(
        "each optimizer.step() uses the gradients of the current batch's loss only",
        hint="Compare the gradients of two consecutive batches: what clears .grad before each backward?"),
    "not-train-mode": Requirement(
        "the loop puts the model in train mode (model.train())",
        hint="The model may arrive in eval mode (after an evaluation): which call switches dropout and "
        "batch norm back to training behaviour?"),
    "wrong-step-count": Requirement(
        "one optimizer.step() per batch, for exactly `epochs` epochs",
        hint="Count your optimizer.step() calls: epochs x len(loader)?"),
    "scheduler-not-stepped": Requirement(
        "the scheduler is stepped",
        hint="Print optimizer.param_groups[0]['lr'] after each epoch: does it ever change?"),
    "scheduler-before-optimizer": Requirement(
        "scheduler.step() comes after optimizer.step()",
        hint="Which lr should the very first update use: the schedule's first value or its second?"),
}
