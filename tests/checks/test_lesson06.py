"""Lesson 06 checks reject planted bugs with the right code and accept different correct solutions."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils import clip_grad_norm_, clip_grad_value_

from harness.checks.testing import assert_check_fails, assert_check_passes


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


def test_grad_norm_accepts_correct_solutions():
    assert_check_passes("06-grad-norm", norm_stack)
    assert_check_passes("06-grad-norm", norm_squares)
    assert_check_passes("06-grad-norm", lambda ps: torch.nn.utils.get_total_norm([p.grad for p in ps if p.grad is not None]))


def _twice(parameters):
    total = torch.zeros(())
    print("parameters:", sum(1 for _ in parameters))  # a first pass empties a generator
    for p in parameters:
        if p.grad is not None:
            total = total + p.grad.pow(2).sum()
    return total.sqrt()


def _in_place(parameters):
    parameters = list(parameters)
    for p in parameters:
        p.grad.pow_(2)
    return sum(p.grad.sum() for p in parameters).sqrt()


@pytest.mark.parametrize(
    "bad, code, phrase, hidden",
    [
        (lambda ps: sum(p.grad.norm() for p in ps), "wrong-norm", "per-parameter norms were added", False),
        (lambda ps: torch.cat([p.grad.flatten() for p in ps]).pow(2).mean().sqrt(), "wrong-norm", "different formula", False),
        (lambda ps: float(norm_stack(list(ps))), "not-a-tensor", "host sync", False),
        (_in_place, "grads-modified", "in-place", False),
        (lambda ps: torch.cat([p.grad.flatten() for p in ps]).norm(), "raised", "NoneType", True),
        (_twice, "generator-consumed", "generator", True),
    ],
)
def test_grad_norm_rejects_bugs(bad, code, phrase, hidden):
    assert_check_fails("06-grad-norm", bad, code=code, phrase=phrase, hidden=hidden)


# ---------------------------------------------------------------- 06-clip-step
def clip_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def clip_step_by_hand(model, batch, loss_fn, optimizer, max_norm):
    loss_fn(model(batch[0]), batch[1]).backward()
    grads = [p.grad for p in model.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    factor = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    torch._foreach_mul_(grads, factor)
    optimizer.step()
    optimizer.zero_grad()
    return norm


def test_clip_step_accepts_correct_solutions():
    assert_check_passes("06-clip-step", clip_step)
    assert_check_passes("06-clip-step", clip_step_by_hand)


def _value_clip(model, batch, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(batch[0]), batch[1]).backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    clip_grad_value_(model.parameters(), max_norm / 10)
    optimizer.step()
    return norm


def _no_clip(model, batch, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(batch[0]), batch[1]).backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    optimizer.step()
    return norm


def _clip_after_step(model, batch, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(batch[0]), batch[1]).backward()
    optimizer.step()
    return clip_grad_norm_(model.parameters(), max_norm)


def _always_rescale(model, batch, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(batch[0]), batch[1]).backward()
    grads = [p.grad for p in model.parameters()]
    norm = torch.nn.utils.get_total_norm(grads)
    torch._foreach_mul_(grads, max_norm / norm)
    optimizer.step()
    return norm


def _returns_after(model, batch, loss_fn, optimizer, max_norm):
    clip_step(model, batch, loss_fn, optimizer, max_norm)
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])


def _no_zero_grad(model, batch, loss_fn, optimizer, max_norm):
    loss_fn(model(batch[0]), batch[1]).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def _half_threshold(model, batch, loss_fn, optimizer, max_norm):
    return clip_step(model, batch, loss_fn, optimizer, max_norm / 2) * 1.0


@pytest.mark.parametrize(
    "bad, code, phrase",
    [
        (_value_clip, "value-not-norm", "clip_grad_value_"),
        (_no_clip, "not-clipped", "clipping is missing"),
        (_clip_after_step, "not-clipped", "after optimizer.step()"),
        (_always_rescale, "clipped-below-threshold", "always rescaled"),
        (_returns_after, "wrong-return", "measured after clipping"),
        (_no_zero_grad, "missing-zero-grad", "zero_grad"),
        (_half_threshold, "wrong-threshold", "another threshold"),
        (lambda *args: float(clip_step(*args)), "not-a-tensor", "host sync"),
    ],
)
def test_clip_step_rejects_bugs(bad, code, phrase):
    assert_check_fails("06-clip-step", bad, code=code, phrase=phrase)


# ---------------------------------------------------------------- 06-amp-clip
def amp_clip(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    inputs, targets = batch
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return norm


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


def test_amp_clip_accepts_correct_solutions():
    assert_check_passes("06-amp-clip", amp_clip)
    assert_check_passes("06-amp-clip", amp_clip_scaled_threshold)


def _clip_before_unscale(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return norm


def _amp_no_clip(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    scaler.step(optimizer)
    scaler.update()
    return norm


def _amp_direct_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def _amp_scaled_norm(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaled_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return scaled_norm


def _amp_hand_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    """Updates the parameters by hand after unscaling: an inf gradient reaches them."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = clip_grad_norm_(model.parameters(), max_norm)
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(0.0 * p.grad)
    scaler.step(optimizer)
    scaler.update()
    return norm


@pytest.mark.parametrize(
    "bad, code, phrase",
    [
        (_clip_before_unscale, "clip-before-unscale", "unscale_(optimizer) before clip_grad_norm_"),
        (_amp_no_clip, "not-clipped", "clipping is missing"),
        (_amp_direct_step, "step-bypasses-scaler", "called directly"),
        (_amp_scaled_norm, "wrong-return", "still-scaled"),
        (_amp_hand_step, "inf-step-not-skipped", "parameters changed"),
    ],
)
def test_amp_clip_rejects_bugs(bad, code, phrase):
    assert_check_fails("06-amp-clip", bad, code=code, phrase=phrase)


# ---------------------------------------------------------------- 06-accum-clip
def accum_clip(model, micro_batches, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets) / len(micro_batches)
        loss.backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def accum_clip_sum_then_scale(model, micro_batches, loss_fn, optimizer, max_norm):
    for x, y in micro_batches:
        loss_fn(model(x), y).backward()
    for p in model.parameters():
        p.grad.div_(len(micro_batches))
    norm = clip_grad_norm_(list(model.parameters()), max_norm=max_norm, norm_type=2.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def test_accum_clip_accepts_correct_solutions():
    assert_check_passes("06-accum-clip", accum_clip)
    assert_check_passes("06-accum-clip", accum_clip_sum_then_scale)


def _clip_each(model, micro_batches, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
        norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def _step_each(model, micro_batches, loss_fn, optimizer, max_norm):
    norm = None
    for inputs, targets in micro_batches:
        optimizer.zero_grad(set_to_none=True)
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
        norm = clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
    return norm


def _not_averaged(model, micro_batches, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        loss_fn(model(inputs), targets).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def _accum_no_clip(model, micro_batches, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    optimizer.step()
    return norm


def _accum_no_zero(model, micro_batches, loss_fn, optimizer, max_norm):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


@pytest.mark.parametrize(
    "bad, code, phrase",
    [
        (_clip_each, "clipped-per-micro-batch", "inside the micro-batch loop"),
        (_step_each, "steps-per-micro-batch", "inside a loop"),
        (_not_averaged, "loss-not-averaged", "len(micro_batches)"),
        (_accum_no_clip, "not-clipped", "clipping is missing"),
        (_accum_no_zero, "missing-zero-grad", "zero_grad"),
    ],
)
def test_accum_clip_rejects_bugs(bad, code, phrase):
    assert_check_fails("06-accum-clip", bad, code=code, phrase=phrase)


@pytest.mark.parametrize("task", ["06-grad-norm", "06-clip-step", "06-amp-clip", "06-accum-clip"])
def test_stubs_report_the_exception(task):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    assert_check_fails(task, stub, code="raised", phrase="NotImplementedError")
