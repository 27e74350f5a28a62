"""Lesson 06 checks reject plausible mistakes with the right code and message, and accept correct variants.

MISTAKES and CORRECT are data (tests/test_requirements.py reads them); the two parametrized tests run them.
The clipping mistakes are shared by three exercises: each is a clipping strategy (`clip(parameters, max_norm)`,
returning the pre-clip norm) plugged into that exercise's otherwise correct step.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.nn.utils import clip_grad_norm_, clip_grad_value_, get_total_norm

from harness.checks.lesson06.accum_clip import accum_plan
from harness.checks.testing import Correct, Mistake, assert_mistake, solution_cell
from harness.contract.case import Case
from tests.exercises import notebook_namespace

Clip = Callable[[list[torch.nn.Parameter], float], torch.Tensor]


# ---------------------------------------------------------------- clipping strategies
def clip_by_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    return clip_grad_norm_(params, max_norm)


def clip_none(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    return get_total_norm([p.grad for p in params])


def clip_by_value(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    norm = get_total_norm([p.grad for p in params])
    clip_grad_value_(params, max_norm / 10)
    return norm


def clip_each_parameter(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    norm = get_total_norm([p.grad for p in params])
    for p in params:
        clip_grad_norm_(p, max_norm)
    return norm


def clip_always(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    grads = [p.grad for p in params]
    norm = get_total_norm(grads)
    torch._foreach_mul_(grads, max_norm / norm)
    return norm


def clip_half(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    return clip_grad_norm_(params, max_norm / 2)


def clip_then_measure(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    clip_grad_norm_(params, max_norm)
    return get_total_norm([p.grad for p in params])


def clip_as_float(params: list[torch.nn.Parameter], max_norm: float) -> float:
    return clip_grad_norm_(params, max_norm).item()


# ---------------------------------------------------------------- 06-grad-norm
def norm_stack(parameters):
    grads = [p.grad for p in parameters if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def norm_squares(parameters):
    total = torch.zeros(())
    for p in parameters:
        if p.grad is not None:
            total = total + p.grad.double().pow(2).sum()
    return total.sqrt()


def norm_count_first(parameters):
    print("parameters:", sum(1 for _ in parameters))  # a first pass empties a generator
    return norm_squares(parameters)


def norm_peek_first(parameters):
    first = next(iter(parameters))  # reads the first parameter off a generator
    total = torch.zeros((), device=first.device)
    for p in parameters:
        if p.grad is not None:
            total = total + p.grad.pow(2).sum()
    return total.sqrt()


def norm_in_place(parameters):
    parameters = [p for p in parameters if p.grad is not None]
    for p in parameters:
        p.grad.pow_(2)
    return sum(p.grad.sum() for p in parameters).sqrt()


def norm_keepdim(parameters):
    flat = torch.cat([p.grad.flatten() for p in parameters if p.grad is not None])
    return torch.linalg.vector_norm(flat, dim=0, keepdim=True)


# ---------------------------------------------------------------- 06-clip-step
def clip_step_using(clip: Clip, *, train: bool = True, zero: bool = True):
    """A clip_train_step with `clip` in its place (and optionally without model.train() or zero_grad)."""
    def clip_train_step(model, batch, loss_fn, optimizer, max_norm):
        if train:
            model.train()
        if zero:
            optimizer.zero_grad(set_to_none=True)
        loss_fn(model(batch[0]), batch[1]).backward()
        norm = clip(list(model.parameters()), max_norm)
        optimizer.step()
        return norm
    return clip_train_step


def clip_step_by_hand(model, batch, loss_fn, optimizer, max_norm):
    model.train()
    loss_fn(model(batch[0]), batch[1]).backward()
    grads = [p.grad for p in model.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    factor = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    torch._foreach_mul_(grads, factor)
    optimizer.step()
    optimizer.zero_grad()
    return norm


def clip_after_step(model, batch, loss_fn, optimizer, max_norm):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(batch[0]), batch[1]).backward()
    optimizer.step()
    return clip_grad_norm_(model.parameters(), max_norm)


def clip_step_no_step(model, batch, loss_fn, optimizer, max_norm):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(batch[0]), batch[1]).backward()
    return clip_grad_norm_(model.parameters(), max_norm)


def clip_step_in_loop(model, batch, loss_fn, optimizer, max_norm):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(batch[0]), batch[1]).backward()
    norm = get_total_norm([p.grad for p in model.parameters()])
    for p in model.parameters():
        clip_grad_norm_(p, max_norm)
        optimizer.step()  # indented one level too deep
    return norm


# ---------------------------------------------------------------- 06-amp-clip
def amp_clip_divided_by_hand(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scale = scaler.get_scale()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.div_(scale)
    norm = clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return norm


def amp_clip_using(clip: Clip = clip_by_norm, *, zero: bool = True, forward: str = "call", autocast: bool = True,
                   fixed_dtype: torch.dtype | None = None,
                   loss_inside: bool = True, backward_inside: bool = False, scale: bool = True,
                   unscale: str = "before", steps: int = 1, update: bool = True, hand_update: bool = False):
    """An amp_clip_step with one thing changed: the clipping, or a line of the AMP recipe."""
    def amp_clip_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
        model.train()
        if zero:
            optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=fixed_dtype or dtype, enabled=autocast):
            out = model(batch[0]) if forward == "call" else model.forward(batch[0])
            if loss_inside:
                loss = loss_fn(out, batch[1])
            if backward_inside:
                scaler.scale(loss).backward()
        if not loss_inside:
            loss = loss_fn(out, batch[1])
        if not backward_inside:
            (scaler.scale(loss) if scale else loss).backward()
        if unscale == "before":
            scaler.unscale_(optimizer)
        norm = clip(list(model.parameters()), max_norm)
        if unscale == "after":
            scaler.unscale_(optimizer)
        if hand_update:
            with torch.no_grad():
                for p in model.parameters():
                    p.sub_(0.0 * p.grad)
        for _ in range(steps):
            scaler.step(optimizer)
            if update:
                scaler.update()
        return norm
    return amp_clip_step


def amp_clip_direct_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def amp_clip_scaled_norm(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaled_norm = get_total_norm([p.grad for p in model.parameters()])
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return scaled_norm


def amp_clip_scaled_threshold(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    """Clips the scaled gradients with a threshold scaled the same way: equivalent, if unusual."""
    with torch.autocast(device_type=device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scale = scaler.get_scale()
    norm = clip_grad_norm_(model.parameters(), max_norm * scale) / scale
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return norm


def amp_clip_no_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()  # the step is forgotten
    return norm


# ---------------------------------------------------------------- 06-accum-clip
def accum_using(clip: Clip = clip_by_norm, *, zero: str = "before", average: bool = True, clip_inside: bool = False,
                step_inside: bool = False, step: bool = True):
    """An accumulate_clip_step with one thing changed: the clipping, or where a line sits."""
    def accumulate_clip_step(model, micro_batches, loss_fn, optimizer, max_norm):
        if zero == "before":
            optimizer.zero_grad(set_to_none=True)
        norm = None
        for inputs, targets in micro_batches:
            if zero == "inside" or step_inside:
                optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), targets)
            (loss / len(micro_batches) if average else loss).backward()
            if clip_inside or step_inside:
                norm = clip(list(model.parameters()), max_norm)
            if step_inside:
                optimizer.step()
        if not (clip_inside or step_inside):
            norm = clip(list(model.parameters()), max_norm)
        if step and not step_inside:
            optimizer.step()
        return norm
    return accumulate_clip_step


def accum_backward_after(model, micro_batches, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets) / len(micro_batches)
    loss.backward()  # dedented: outside the loop
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def accum_by_micro_batch_size(model, micro_batches, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(inputs)).backward()  # the batch size, not the number of batches
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def accum_weighted_by_samples(model, micro_batches, loss_fn, optimizer, max_norm):
    total = sum(len(targets) for _, targets in micro_batches)
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) * (len(targets) / total)).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def accum_sum_then_scale(model, micro_batches, loss_fn, optimizer, max_norm):
    for x, y in micro_batches:
        loss_fn(model(x), y).backward()
    for p in model.parameters():
        p.grad.div_(len(micro_batches))
    norm = clip_grad_norm_(list(model.parameters()), max_norm=max_norm, norm_type=2.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


# What the notebook's other cells define, for the planted cells that use it
NOTEBOOK = notebook_namespace("06_gradient_clipping")

MISTAKES = [
    # 06-grad-norm
    Mistake("06-grad-norm", "wrong-norm", "per-parameter norms were added",
            (lambda ps: sum(p.grad.norm() for p in ps if p.grad is not None),),
            story="adds the norms of each parameter (the forum's most common total-norm bug)"),
    Mistake("06-grad-norm", "wrong-norm", "a mean instead of a sum of squares",
            (lambda ps: torch.cat([p.grad.flatten() for p in ps if p.grad is not None]).pow(2).mean().sqrt(),),
            story="takes the RMS of the entries instead of the norm"),
    Mistake("06-grad-norm", "not-a-tensor", "host sync", (lambda ps: float(norm_stack(ps)),),
            story="returns float(norm) to print it"),
    Mistake("06-grad-norm", "grads-modified", "in-place", (norm_in_place,),
            story="squares the gradients in place to save memory"),
    Mistake("06-grad-norm", "generator-consumed", "saw none of the 3 parameters", (norm_count_first,),
            story="counts the parameters first, emptying model.parameters()"),
    Mistake("06-grad-norm", "generator-consumed", "after the first 1 of 3", (norm_peek_first,),
            story="peeks at next(iter(parameters)) for the device, losing one parameter (7.26 read as 5.47)"),
    Mistake("06-grad-norm", "not-0-dim", "shape (1,)", (norm_keepdim,),
            story="keepdim=True leaves a shape-(1,) tensor"),
    Mistake("06-grad-norm", "raised", "NoneType",
            (lambda ps: torch.cat([p.grad.flatten() for p in ps]).norm(),),
            story="forgets parameters without .grad (frozen or unused)"),
    Mistake("06-grad-norm", "wrong-norm", "per-parameter norms were added", solution_cell(
        "def total_grad_norm(parameters):\n"
        "    return sum(p.grad.norm() for p in parameters if p.grad is not None)\n",
        "total_grad_norm"),
        story="the per-parameter norms are added instead of taking the norm of all entries together", planted=True),
    # 06-clip-step
    Mistake("06-clip-step", "eval-mode", "training mode", (clip_step_using(clip_by_norm, train=False),),
            story="leaves out model.train(): the model stays in eval mode after validation"),
    Mistake("06-clip-step", "no-step", "never ran", (clip_step_no_step,),
            story="clips and returns, forgetting optimizer.step()"),
    Mistake("06-clip-step", "wrong-step-count", "inside a loop", (clip_step_in_loop,),
            story="optimizer.step() indented into a loop over the parameters"),
    Mistake("06-clip-step", "missing-zero-grad", "zero_grad", (clip_step_using(clip_by_norm, zero=False),),
            story="forgets zero_grad: gradients accumulate across steps"),
    Mistake("06-clip-step", "clipped-below-threshold", "always rescaled", (clip_step_using(clip_always),),
            story="multiplies by max_norm / norm without capping the factor at 1"),
    Mistake("06-clip-step", "not-clipped", "clipping is missing", (clip_step_using(clip_none),),
            story="measures the norm but never clips"),
    Mistake("06-clip-step", "not-clipped", "after optimizer.step()", (clip_after_step,),
            story="clips after the step, when the update is already applied"),
    Mistake("06-clip-step", "value-not-norm", "clip_grad_value_", (clip_step_using(clip_by_value),),
            story="uses clip_grad_value_ where clipping by norm was asked"),
    Mistake("06-clip-step", "wrong-direction", "each parameter clipped on its own",
            (clip_step_using(clip_each_parameter),), story="calls clip_grad_norm_ once per parameter"),
    Mistake("06-clip-step", "wrong-threshold", "another threshold", (clip_step_using(clip_half),),
            story="passes another threshold than max_norm"),
    Mistake("06-clip-step", "not-a-tensor", ".item() or float()", (clip_step_using(clip_as_float),),
            story="returns norm.item() to log it"),
    Mistake("06-clip-step", "wrong-return", "measured after clipping", (clip_step_using(clip_then_measure),),
            story="returns the norm measured after clipping"),
    Mistake("06-clip-step", "value-not-norm", "clip_grad_value_", solution_cell(
        "def clip_train_step(model, batch, loss_fn, optimizer, max_norm):\n"
        "    inputs, targets = batch\n"
        "    model.train()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    loss_fn(model(inputs), targets).backward()\n"
        "    norm = get_total_norm([p.grad for p in model.parameters()])\n"
        "    clip_grad_value_(model.parameters(), max_norm / 10)\n"
        "    optimizer.step()\n"
        "    return norm\n",
        "clip_train_step", given=NOTEBOOK),
        story="clip_grad_value_ where clipping by norm was asked: the direction of the update changes", planted=True),
    # 06-amp-clip
    Mistake("06-amp-clip", "no-forward", "model.forward(inputs)", (amp_clip_using(forward="method"),),
            story="calls model.forward(x) directly"),
    Mistake("06-amp-clip", "no-autocast", "autocast off", (amp_clip_using(autocast=False),),
            story="forgets the autocast block"),
    Mistake("06-amp-clip", "backward-in-autocast", "indentation", (amp_clip_using(backward_inside=True),),
            story="backward indented inside the autocast block"),
    Mistake("06-amp-clip", "loss-outside-autocast", "loss function ran with autocast off",
            (amp_clip_using(loss_inside=False),), story="computes the loss after the autocast block"),
    Mistake("06-amp-clip", "step-bypasses-scaler", "called directly", (amp_clip_direct_step,),
            story="calls optimizer.step() after unscale_, bypassing the scaler"),
    Mistake("06-amp-clip", "missing-scale", "scaler.scale(loss)", (amp_clip_using(scale=False),),
            story="calls loss.backward() on the unscaled loss"),
    Mistake("06-amp-clip", "missing-step", "scaler.step()", (amp_clip_no_step,),
            story="forgets scaler.step(optimizer) after clipping"),
    Mistake("06-amp-clip", "missing-update", "scaler.update()", (amp_clip_using(update=False),),
            story="forgets scaler.update()"),
    Mistake("06-amp-clip", "wrong-step-count", "ran 2 times", (amp_clip_using(steps=2),),
            story="runs scaler.step/update twice per call"),
    Mistake("06-amp-clip", "wrong-autocast-dtype", "instead of the dtype argument",
            (amp_clip_using(fixed_dtype=torch.bfloat16),), story="hard-codes dtype=torch.bfloat16 in autocast"),
    Mistake("06-amp-clip", "missing-zero-grad", "divided by the scale", (amp_clip_using(zero=False),),
            story="forgets zero_grad in the AMP step"),
    Mistake("06-amp-clip", "clip-before-unscale", "unscale_(optimizer) before clip_grad_norm_",
            (amp_clip_using(unscale="after"),), story="clips the still-scaled gradients (the lesson's pitfall)"),
    Mistake("06-amp-clip", "clip-before-unscale", "divided by the scale twice", (amp_clip_divided_by_hand,),
            story="divides p.grad by scaler.get_scale() by hand, then scaler.step divides again"),
    Mistake("06-amp-clip", "clipped-below-threshold", "always rescaled", (amp_clip_using(clip_always),),
            story="rescales to max_norm even when the norm is below it"),
    Mistake("06-amp-clip", "not-clipped", "clipping is missing", (amp_clip_using(clip_none),),
            story="unscales and measures, but never clips"),
    Mistake("06-amp-clip", "value-not-norm", "clip_grad_value_", (amp_clip_using(clip_by_value),),
            story="clips by value under AMP"),
    Mistake("06-amp-clip", "wrong-direction", "each parameter clipped on its own",
            (amp_clip_using(clip_each_parameter),), story="clips each parameter separately"),
    Mistake("06-amp-clip", "wrong-threshold", "another threshold", (amp_clip_using(clip_half),),
            story="passes another threshold than max_norm"),
    Mistake("06-amp-clip", "not-a-tensor", ".item() or float()", (amp_clip_using(clip_as_float),),
            story="returns the norm as a float"),
    Mistake("06-amp-clip", "wrong-return", "still-scaled", (amp_clip_scaled_norm,),
            story="returns the norm measured before unscale_"),
    Mistake("06-amp-clip", "inf-step-not-skipped", "parameters changed", (amp_clip_using(hand_update=True),),
            story="updates the parameters by hand after unscaling: an inf gradient reaches them"),
    Mistake("06-amp-clip", "clip-before-unscale", "unscale_(optimizer) before clip_grad_norm_", solution_cell(
        "def amp_clip_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):\n"
        "    inputs, targets = batch\n"
        "    model.train()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    with torch.autocast(device_type, dtype=dtype):\n"
        "        loss = loss_fn(model(inputs), targets)\n"
        "    scaler.scale(loss).backward()\n"
        "    norm = clip_grad_norm_(model.parameters(), max_norm)\n"
        "    scaler.unscale_(optimizer)\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
        "    return norm\n",
        "amp_clip_step", given=NOTEBOOK),
        story="clipping before scaler.unscale_: the threshold applies to the scaled gradients", planted=True),
    # 06-accum-clip
    Mistake("06-accum-clip", "no-step", "never ran", (accum_using(step=False),),
            story="forgets optimizer.step() after the loop"),
    Mistake("06-accum-clip", "steps-per-micro-batch", "inside a loop", (accum_using(step_inside=True),),
            story="steps after every micro-batch (no accumulation at all)"),
    Mistake("06-accum-clip", "missing-zero-grad", "zero_grad", (accum_using(zero="never"),),
            story="never clears the gradients: each call adds to the previous one's"),
    Mistake("06-accum-clip", "only-last-micro-batch", "cleared inside the micro-batch loop",
            (accum_using(zero="inside"),), story="zero_grad inside the accumulation loop (issue 19)"),
    Mistake("06-accum-clip", "only-last-micro-batch", "on the last micro-batch's loss only", (accum_backward_after,),
            story="backward dedented out of the loop: only the last loss is backpropagated"),
    Mistake("06-accum-clip", "loss-not-averaged", "len(micro_batches)", (accum_using(average=False),),
            story="backpropagates each micro-batch loss undivided"),
    Mistake("06-accum-clip", "loss-not-averaged", "the number of samples in a micro-batch",
            (accum_by_micro_batch_size,),
            story="divides each loss by the micro-batch size (issue 43: passed when size and count were equal)"),
    Mistake("06-accum-clip", "clipped-per-micro-batch", "inside the micro-batch loop",
            (accum_using(clip_inside=True),), story="clips after every micro-batch's backward"),
    Mistake("06-accum-clip", "clipped-below-threshold", "always rescaled", (accum_using(clip_always),),
            story="rescales to max_norm even when the norm is below it"),
    Mistake("06-accum-clip", "not-clipped", "clipping is missing", (accum_using(clip_none),),
            story="measures the norm but never clips"),
    Mistake("06-accum-clip", "value-not-norm", "clip_grad_value_", (accum_using(clip_by_value),),
            story="clips by value after accumulating"),
    Mistake("06-accum-clip", "wrong-direction", "each parameter clipped on its own",
            (accum_using(clip_each_parameter),), story="clips each parameter separately"),
    Mistake("06-accum-clip", "wrong-threshold", "another threshold", (accum_using(clip_half),),
            story="passes another threshold than max_norm"),
    Mistake("06-accum-clip", "not-a-tensor", ".item() or float()", (accum_using(clip_as_float),),
            story="returns the norm as a float"),
    Mistake("06-accum-clip", "wrong-return", "measured after clipping", (accum_using(clip_then_measure),),
            story="returns the norm measured after clipping"),
    Mistake("06-accum-clip", "clipped-per-micro-batch", "inside the micro-batch loop", solution_cell(
        "def accumulate_clip_step(model, micro_batches, loss_fn, optimizer, max_norm):\n"
        "    model.train()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        norm = clip_grad_norm_(model.parameters(), max_norm)\n"
        "    optimizer.step()\n"
        "    return norm\n",
        "accumulate_clip_step", given=NOTEBOOK),
        story="clipping inside the micro-batch loop instead of once after it", planted=True),
]

CORRECT = [
    Correct("06-grad-norm", (norm_stack,), story="the solution: stack of per-parameter norms"),
    Correct("06-grad-norm", (norm_squares,), story="a running sum of squares in float64"),
    Correct("06-grad-norm", (lambda ps: get_total_norm([p.grad for p in ps if p.grad is not None]),),
            story="torch.nn.utils.get_total_norm"),
    Correct("06-clip-step", (clip_step_using(clip_by_norm),), story="the solution"),
    Correct("06-clip-step", (clip_step_by_hand,), story="clips by hand with _foreach_mul_, zero_grad at the end"),
    Correct("06-amp-clip", (amp_clip_using(),), story="the solution"),
    Correct("06-amp-clip", (amp_clip_scaled_threshold,), story="clips the scaled gradients at max_norm * scale"),
    Correct("06-accum-clip", (accum_using(),), story="the solution"),
    Correct("06-accum-clip", (accum_weighted_by_samples,), story="weights each micro-batch by its sample share"),
    Correct("06-accum-clip", (accum_sum_then_scale,), story="sums, divides .grad after the loop, zero_grad at the end"),
]


def test_zero_grad_in_the_accumulation_loop_is_not_blamed_on_clip_grad_value():
    message = assert_mistake(Mistake("06-accum-clip", "only-last-micro-batch", "last micro-batch",
                                     (accum_using(zero="inside"),), story="issue 19"))
    assert "clip_grad_value_" not in message


@pytest.mark.parametrize("hidden", [False, True])
def test_accum_case_separates_size_from_count(hidden):
    """Issue 43: in every round the micro-batches hold another number of samples than there are micro-batches, so
    dividing each loss by the wrong one of the two fails."""
    _, plan = accum_plan(Case(hidden=hidden))
    assert all(len(batches) != len(batches[0][0]) for batches, _ in plan)
