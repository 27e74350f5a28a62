"""Lesson 06 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import math
import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_, clip_grad_value_, get_total_norm
from harness.checks import check, hint
from harness.env import select_device
device = select_device()
'''

ENTRIES = [
    Entry("06-grad-norm", "mistake", "two passes over the parameters",
          "reads the iterable twice: with a generator the second pass is empty",
          '''
def total_grad_norm(parameters):
    count = sum(1 for p in parameters if p.grad is not None)
    grads = [p.grad.flatten() for p in parameters if p.grad is not None]
    return torch.cat(grads).norm() if grads else torch.zeros(())
''', ("total_grad_norm",)),
    Entry("06-grad-norm", "mistake", "summed the per-parameter norms",
          "adds the per-tensor norms instead of the root of the sum of squares",
          '''
def total_grad_norm(parameters):
    return sum(p.grad.norm() for p in parameters if p.grad is not None)
''', ("total_grad_norm",)),
    Entry("06-grad-norm", "mistake", "returned .item()",
          "returns a Python float instead of a 0-dim tensor",
          '''
def total_grad_norm(parameters):
    grads = [p.grad.flatten() for p in parameters if p.grad is not None]
    return torch.cat(grads).norm().item()
''', ("total_grad_norm",)),
    Entry("06-grad-norm", "mistake", "root of the mean of the squared per-parameter norms",
          "a mean over tensors instead of a sum: the norm is divided by sqrt(number of tensors)",
          '''
def total_grad_norm(parameters):
    norms = torch.stack([p.grad.norm() for p in parameters if p.grad is not None])
    return norms.pow(2).mean().sqrt()
''', ("total_grad_norm",)),
    Entry("06-clip-step", "mistake", "returned the norm after clipping",
          "returns the post-clip norm (recomputed after clip_grad_norm_) instead of the pre-clip norm",
          '''
def clip_train_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(inputs), targets).backward()
    clip_grad_norm_(model.parameters(), max_norm)
    norm = get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    optimizer.step()
    return norm
''', ("clip_train_step",)),
    Entry("06-clip-step", "mistake", "clipped after the optimizer step",
          "clip_grad_norm_ runs after step(): the step used the unclipped gradients",
          '''
def clip_train_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(inputs), targets).backward()
    optimizer.step()
    return clip_grad_norm_(model.parameters(), max_norm)
''', ("clip_train_step",)),
    Entry("06-clip-step", "mistake", "clipped each value instead of the norm",
          "clip_grad_value_ clamps each entry, not the total norm",
          '''
def clip_train_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(inputs), targets).backward()
    norm = get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    return norm
''', ("clip_train_step",)),
    Entry("06-amp-clip", "mistake", "clipped before unscale_",
          "clip_grad_norm_ on the scaled gradients: the threshold shrinks by the scale; returned norm is scaled",
          '''
def amp_clip_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return norm
''', ("amp_clip_step",)),
    Entry("06-amp-clip", "mistake", "never unscaled",
          "no unscale_: clipping and the returned norm are on scaled gradients",
          '''
def amp_clip_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return norm
''', ("amp_clip_step",)),
    Entry("06-amp-clip", "mistake", "divided the gradients by the scale by hand, then scaler.step",
          "manual unscale without unscale_: scaler.step divides again (double unscale) and cannot skip on inf",
          '''
def amp_clip_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):
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
''', ("amp_clip_step",)),
    Entry("06-accum-clip", "mistake", "clipped inside the loop, after each micro-batch",
          "clips each partial accumulated gradient instead of once on the complete gradient",
          '''
def accumulate_clip_step(model, micro_batches, loss_fn, optimizer, max_norm):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
        norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm
''', ("accumulate_clip_step",)),
    Entry("06-accum-clip", "mistake", "did not divide the loss",
          "the accumulated gradient is the sum, k times the gradient of the mean loss",
          '''
def accumulate_clip_step(model, micro_batches, loss_fn, optimizer, max_norm):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        loss_fn(model(inputs), targets).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm
''', ("accumulate_clip_step",)),
    Entry("06-accum-clip", "mistake", "divided by the micro-batch size",
          "divides each loss by the batch size (len(inputs)) instead of the number of micro-batches",
          '''
def accumulate_clip_step(model, micro_batches, loss_fn, optimizer, max_norm):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(inputs)).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm
''', ("accumulate_clip_step",)),
    Entry("06-accum-clip", "mistake", "zeroed the gradients inside the loop",
          "zero_grad per micro-batch: only the last micro-batch's gradient reaches the step",
          '''
def accumulate_clip_step(model, micro_batches, loss_fn, optimizer, max_norm):
    model.train()
    for inputs, targets in micro_batches:
        optimizer.zero_grad(set_to_none=True)
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm
''', ("accumulate_clip_step",)),
    Entry("06-grad-norm", "correct", "foreach norms and hypot-style fold", "",
          '''
def total_grad_norm(parameters):
    grads = [p.grad for p in list(parameters) if p.grad is not None]
    return torch.stack(torch._foreach_norm(grads)).square().sum().sqrt()
''', ("total_grad_norm",)),
    Entry("06-accum-clip", "correct", "scale the summed gradient after accumulation", "",
          '''
def accumulate_clip_step(model, micro_batches, loss_fn, optimizer, max_norm):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for inputs, targets in micro_batches:
        loss_fn(model(inputs), targets).backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.grad /= len(micro_batches)
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm
''', ("accumulate_clip_step",)),
]
