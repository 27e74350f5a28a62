"""Lesson 07 checks: each rejects its planted bugs with the right code and accepts correct variants."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from harness.checks import CheckFailed, check
from harness.checks.lesson07.plateau import plateau_setting
from harness.checks.testing import Correct, Mistake, assert_check_fails, solution_cell
from harness.contract.case import Case
from harness.judges.drills.held.schedulers import warmup_cosine_factor
from harness.judges.lesson07.common import warmup_cosine_reference
from harness.judges.lesson15.warmup import reference_lr_factor
from tests.exercises import notebook_namespace


# ---------------------------------------------------------------------------------------------- warmup
def warmup_cosine_branches(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine_min_form(step: int, warmup_steps: int, total_steps: int) -> float:
    ramp = (step + 1) / warmup_steps if warmup_steps else 1.0
    decay_span = max(1, total_steps - warmup_steps)
    progress = max(0.0, min(1.0, (step - warmup_steps) / decay_span))
    return min(ramp, math.cos(math.pi * progress / 2) ** 2)  # cos^2(x/2) == (1 + cos x) / 2


def warmup_counts_steps_taken(step: int, warmup_steps: int, total_steps: int) -> float:
    taken = step + 1  # the optimizer step this factor is for, counted from 1
    if taken <= warmup_steps:
        return taken / warmup_steps
    return warmup_cosine_branches(step, warmup_steps, total_steps)


def warmup_cosine_product(step: int, warmup_steps: int, total_steps: int) -> float:
    ramp = min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0
    progress = min(1.0, max(0, step - warmup_steps) / max(1, total_steps - warmup_steps))
    return ramp * (1.0 + math.cos(math.pi * progress)) / 2


def warmup_from_zero(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return step / warmup_steps
    return warmup_cosine_branches(step, warmup_steps, total_steps)


def cosine_from_zero(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / total_steps)))


def not_clamped(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / max(1, total_steps - warmup_steps)))


def no_decay_span_guard(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def ramp_unguarded(step: int, warmup_steps: int, total_steps: int) -> float:
    ramp = min(1.0, (step + 1) / warmup_steps)
    progress = min(1.0, max(0, step - warmup_steps) / max(1, total_steps - warmup_steps))
    return ramp * 0.5 * (1.0 + math.cos(math.pi * progress))


def returns_tensor(step: int, warmup_steps: int, total_steps: int) -> torch.Tensor:
    return torch.tensor(warmup_cosine_branches(step, warmup_steps, total_steps))


def warmup_floor_division(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) // warmup_steps
    return warmup_cosine_branches(step, warmup_steps, total_steps)


def warmup_over_total(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) / total_steps
    return warmup_cosine_branches(step, warmup_steps, total_steps)


def warmup_peaks_late(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    return warmup_cosine_branches(step, warmup_steps, total_steps)


def decay_over_total(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup_steps) / total_steps)))


# ---------------------------------------------------------------------------------------------- loops
def _batch_update(model, inputs, targets, loss_fn, optimizer):
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(inputs), targets).backward()
    optimizer.step()


def per_step_correct(model, loader, loss_fn, optimizer, scheduler, epochs):
    model.train()
    for _ in range(epochs):
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)
            scheduler.step()


def per_step_closure(model, loader, loss_fn, optimizer, scheduler, epochs):
    model.train()
    for _ in range(epochs):
        for inputs, targets in loader:
            def closure(inputs=inputs, targets=targets):
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(inputs), targets)
                loss.backward()
                return loss

            optimizer.step(closure)
            scheduler.step()


def per_step_flat(model, loader, loss_fn, optimizer, scheduler, epochs):
    batches = [batch for batch in loader]
    model.train()
    for step in range(epochs * len(batches)):
        inputs, targets = batches[step % len(batches)]
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        scheduler.step()


def per_step_functional(model, loader, loss_fn, optimizer, scheduler, epochs):
    """Gradients through torch.autograd.grad, written into .grad by hand; itertools.chain over the epochs."""
    import itertools

    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    for inputs, targets in itertools.chain.from_iterable(loader for _ in range(epochs)):
        grads = torch.autograd.grad(loss_fn(model(inputs), targets), params)
        for param, grad in zip(params, grads, strict=True):
            param.grad = grad
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)


def per_step_before(model, loader, loss_fn, optimizer, scheduler, epochs):
    model.train()
    for _ in range(epochs):
        for inputs, targets in loader:
            scheduler.step()
            _batch_update(model, inputs, targets, loss_fn, optimizer)


def per_step_never(model, loader, loss_fn, optimizer, scheduler, epochs):
    model.train()
    for _ in range(epochs):
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)


def per_epoch_correct(model, loader, loss_fn, optimizer, scheduler, epochs):
    for _ in range(epochs):
        model.train()
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)
        scheduler.step()


def per_epoch_with_eval(model, loader, loss_fn, optimizer, scheduler, epochs):
    for _ in range(epochs):
        model.train()
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)
        model.eval()
        with torch.no_grad():
            sum(float(loss_fn(model(x), y)) for x, y in loader)
        scheduler.step()


def per_epoch_enumerated(model, loader, loss_fn, optimizer, scheduler, epochs):
    """model.train(True) under set_grad_enabled, enumerate, the scheduler stepped once the last batch is done."""
    for _ in range(epochs):
        model.train(True)
        with torch.set_grad_enabled(True):
            for index, (inputs, targets) in enumerate(loader):
                optimizer.zero_grad()
                loss_fn(model(inputs), targets).backward()
                optimizer.step()
                if index == len(loader) - 1:
                    scheduler.step()


def twice_per_step(model, loader, loss_fn, optimizer, scheduler, epochs):
    model.train()
    for _ in range(epochs):
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)
            scheduler.step()
            scheduler.step()


def extra_epoch(model, loader, loss_fn, optimizer, scheduler, epochs):
    per_step_correct(model, loader, loss_fn, optimizer, scheduler, 1)
    per_epoch_correct(model, loader, loss_fn, optimizer, scheduler, epochs)


def per_epoch_at_start(model, loader, loss_fn, optimizer, scheduler, epochs):
    model.train()
    for _ in range(epochs):
        scheduler.step()
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)


def test_per_step_rejects_double_stepping_in_hidden():
    assert_check_fails("07-per-step", twice_per_step, code="wrong-lr-trace", phrase="once per optimizer step",
                       hidden=True)


def per_epoch_twice(model, loader, loss_fn, optimizer, scheduler, epochs):
    model.train()
    for _ in range(epochs):
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)
        scheduler.step()
        scheduler.step()


# ---------------------------------------------------------------------------------------------- plateau
def _evaluate(model, loader, loss_fn):
    model.eval()
    with torch.no_grad():
        losses = [loss_fn(model(inputs), targets) * len(targets) for inputs, targets in loader]
    return float(torch.stack(losses).sum() / len(loader.dataset))


def _train_epoch(model, loader, loss_fn, optimizer):
    model.train()
    total = torch.zeros(())
    for inputs, targets in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total += loss.detach()
    return float(total / len(loader))


def plateau_correct(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        val_loss = _evaluate(model, val_loader, loss_fn)
        scheduler.step(val_loss)
        history.append(val_loss)
    return history


def plateau_weighted(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        model.eval()
        total, count = torch.zeros(()), 0
        with torch.inference_mode():
            for inputs, targets in val_loader:
                total += loss_fn(model(inputs), targets) * len(targets)
                count += len(targets)
        val_loss = total / count
        scheduler.step(val_loss)  # a tensor works too: ReduceLROnPlateau converts it
        history.append(float(val_loss))
    return history


def plateau_logs_train_loss(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    """Also measures the training-set loss in eval mode, for logging: still correct."""
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        _evaluate(model, train_loader, loss_fn)
        val_loss = _evaluate(model, val_loader, loss_fn)
        scheduler.step(val_loss)
        history.append(val_loss)
    return history


def plateau_train_metric(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        train_loss = _train_epoch(model, train_loader, loss_fn, optimizer)
        val_loss = _evaluate(model, val_loader, loss_fn)
        scheduler.step(train_loss)
        history.append(val_loss)
    return history


def _evaluate_with_accuracy(model, loader, loss_fn):
    """(mean loss, accuracy), as the notebook's evaluate returns them."""
    model.eval()
    with torch.no_grad():
        outputs, targets = zip(*[(model(inputs), targets) for inputs, targets in loader], strict=True)
    outputs, targets = torch.cat(outputs), torch.cat(targets)
    return float(loss_fn(outputs, targets)), float((outputs.argmax(1) == targets).float().mean())


def plateau_val_accuracy(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        val_loss, val_accuracy = _evaluate_with_accuracy(model, val_loader, loss_fn)
        scheduler.step(val_accuracy)  # the metric people report, fed to a mode='min' scheduler
        history.append(val_loss)
    return history


def plateau_evaluate_pair(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        result = _evaluate_with_accuracy(model, val_loader, loss_fn)
        scheduler.step(result)  # evaluate's (loss, accuracy) pair, passed whole
        history.append(result[0])
    return history


def plateau_last_batch_live_loss(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        model.train()
        for inputs, targets in train_loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
        history.append(_evaluate(model, val_loader, loss_fn))
        scheduler.step(loss)  # the last training batch's loss, still attached to its graph
    return history


def plateau_per_batch(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        model.train()
        for inputs, targets in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
            scheduler.step(float(loss.detach()))
        history.append(_evaluate(model, val_loader, loss_fn))
    return history


def plateau_no_metric(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        scheduler.step()


def plateau_stale(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history, previous = [], _evaluate(model, val_loader, loss_fn)
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        scheduler.step(previous)
        previous = _evaluate(model, val_loader, loss_fn)
        history.append(previous)
    return history


def _evaluate_batch_means(model, loader, loss_fn):
    model.eval()
    with torch.no_grad():
        return float(torch.stack([loss_fn(model(x), y) for x, y in loader]).mean())


def plateau_batch_means(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        val_loss = _evaluate_batch_means(model, val_loader, loss_fn)
        scheduler.step(val_loss)
        history.append(val_loss)
    return history


def plateau_step_at_top(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history, val_loss = [], _evaluate(model, val_loader, loss_fn)
    for _ in range(epochs):
        scheduler.step(val_loss)  # the previous epoch's loss, though consistent with the weights at the call
        _train_epoch(model, train_loader, loss_fn, optimizer)
        val_loss = _evaluate(model, val_loader, loss_fn)
        history.append(val_loss)
    return history


def plateau_tensor_losses(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        model.eval()
        total = torch.zeros(())
        with torch.no_grad():
            for x, y in val_loader:
                total += loss_fn(model(x), y) * len(y)
        val_loss = total / len(val_loader.dataset)
        scheduler.step(val_loss)
        history.append(val_loss)  # a 0-dim tensor where the signature says float
    return history


def plateau_numpy_losses(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    """Correct too: numpy floats, stepped and returned."""
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        val_loss = np.float64(_evaluate(model, val_loader, loss_fn))
        scheduler.step(val_loss)
        history.append(val_loss)
    return history


def plateau_sum(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        model.eval()
        with torch.no_grad():
            val_loss = sum(float(loss_fn(model(x), y)) for x, y in val_loader)
        scheduler.step(val_loss)
        history.append(val_loss)
    return history


def plateau_train_mode(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        with torch.no_grad():
            val_loss = float(torch.stack([loss_fn(model(x), y) for x, y in val_loader]).mean())
        scheduler.step(val_loss)
        history.append(val_loss)
    return history


def plateau_stays_eval(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    model.train()
    for _ in range(epochs):
        for inputs, targets in train_loader:
            optimizer.zero_grad()
            loss_fn(model(inputs), targets).backward()
            optimizer.step()
        val_loss = _evaluate(model, val_loader, loss_fn)  # leaves the model in eval mode
        scheduler.step(val_loss)
        history.append(val_loss)
    return history


def plateau_with_grad(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        model.eval()
        val_loss = torch.stack([loss_fn(model(x), y) for x, y in val_loader]).mean().item()
        scheduler.step(val_loss)
        history.append(val_loss)
    return history


def plateau_returns_nothing(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    plateau_correct(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs)


def test_plateau_hidden_rejects_training_metric():
    assert_check_fails("07-plateau", plateau_train_metric, code="plateau-train-metric", phrase="training loss",
                       hidden=True)


# ---------------------------------------------------------------------------------------------- amp skip
def _scaled_backward(model, inputs, targets, loss_fn, optimizer, scaler):
    loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()


def amp_step_scale(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    _scaled_backward(model, inputs, targets, loss_fn, optimizer, scaler)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() >= scale
    if stepped:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return stepped


def amp_step_checks_grads(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    """Looks at the unscaled gradients itself: scaler.step skips exactly when one of them is not finite."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss_fn(model(inputs), targets)).backward()
    scaler.unscale_(optimizer)
    skipped = not all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    scaler.step(optimizer)
    scaler.update()
    if not skipped:
        scheduler.step()
    return not skipped


def amp_step_hook(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    """Detect the real step with an optimizer step hook, and clip after unscaling."""
    taken = []
    handle = optimizer.register_step_post_hook(lambda *_: taken.append(True))
    _scaled_backward(model, inputs, targets, loss_fn, optimizer, scaler)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e6)
    scaler.step(optimizer)
    scaler.update()
    handle.remove()
    if taken:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return bool(taken)


def amp_step_always(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    _scaled_backward(model, inputs, targets, loss_fn, optimizer, scaler)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return scaler.get_scale() >= scale


def amp_step_equal(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    _scaled_backward(model, inputs, targets, loss_fn, optimizer, scaler)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() == scale  # wrong when the scale grows after good steps
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return stepped


def amp_step_no_scheduler(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    _scaled_backward(model, inputs, targets, loss_fn, optimizer, scaler)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return scaler.get_scale() >= scale


def amp_step_scaled_twice(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    scaler.scale(scaler.scale(loss_fn(model(inputs), targets))).backward()
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() >= scale
    if stepped:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return stepped


def amp_step_direct(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    optimizer.zero_grad()
    loss_fn(model(inputs), targets).backward()
    optimizer.step()
    scheduler.step()
    return True


def test_amp_skip_hidden_rejects_advancing_scheduler():
    assert_check_fails("07-amp-skip", amp_step_always, code="scheduler-advanced-on-skip", phrase="skipped", hidden=True)


# ---------------------------------------------------------------------------------------------- more mistakes
def per_step_every_other_batch(model, loader, loss_fn, optimizer, scheduler, epochs):
    """Copied from a gradient-accumulation loop: the scheduler moves every second batch only."""
    model.train()
    for _ in range(epochs):
        for index, (inputs, targets) in enumerate(loader):
            _batch_update(model, inputs, targets, loss_fn, optimizer)
            if index % 2 == 1:
                scheduler.step()


def per_step_no_zero_grad(model, loader, loss_fn, optimizer, scheduler, epochs):
    model.train()
    for _ in range(epochs):
        for inputs, targets in loader:
            loss_fn(model(inputs), targets).backward()
            optimizer.step()
            scheduler.step()


def per_step_no_train(model, loader, loss_fn, optimizer, scheduler, epochs):
    for _ in range(epochs):
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)
            scheduler.step()


def per_epoch_no_zero_grad(model, loader, loss_fn, optimizer, scheduler, epochs):
    model.train()
    for _ in range(epochs):
        for inputs, targets in loader:
            loss_fn(model(inputs), targets).backward()
            optimizer.step()
        scheduler.step()


def per_epoch_train_once(model, loader, loss_fn, optimizer, scheduler, epochs):
    """model.train() once before the loop; the evaluation's model.eval() is never undone."""
    model.train()
    for _ in range(epochs):
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)
        model.eval()
        with torch.no_grad():
            sum(float(loss_fn(model(x), y)) for x, y in loader)
        scheduler.step()


def plateau_skips_first_epoch(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    """Only steps once there is a previous epoch to compare with."""
    history = []
    for epoch in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        val_loss = _evaluate(model, val_loader, loss_fn)
        if epoch > 0:
            scheduler.step(val_loss)
        history.append(val_loss)
    return history


def plateau_validates_on_train(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):
    history = []
    for _ in range(epochs):
        _train_epoch(model, train_loader, loss_fn, optimizer)
        val_loss = _evaluate(model, train_loader, loss_fn)  # copy-paste: the wrong loader
        scheduler.step(val_loss)
        history.append(val_loss)
    return history


def amp_step_no_zero_grad(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    _scaled_backward(model, inputs, targets, loss_fn, optimizer, scaler)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() >= scale
    if stepped:
        scheduler.step()
    return stepped


def amp_step_extra_optimizer_step(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    """Believes scaler.step only unscales, and steps the optimizer itself when the step was good."""
    _scaled_backward(model, inputs, targets, loss_fn, optimizer, scaler)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() >= scale
    if stepped:
        optimizer.step()
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return stepped


def amp_step_clip_scaled(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):
    """Clips the gradients while they are still scaled (no scaler.unscale_ first)."""
    _scaled_backward(model, inputs, targets, loss_fn, optimizer, scaler)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() >= scale
    if stepped:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return stepped


# ---------------------------------------------------------------------------------------------- mutation set
# ---------------------------------------------------------------------------------------------- one cycle
# the planted bug, as a solution cell: total_steps counted in samples (issue 29: a class no check saw)
ONE_CYCLE_IN_SAMPLES = solution_cell(
    "def make_one_cycle(optimizer, loader, epochs, max_lr):\n"
    "    steps = epochs * len(loader.dataset)\n"
    "    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=steps)\n",
    "make_one_cycle")


def one_cycle_total_steps(optimizer, loader, epochs, max_lr):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * len(loader))


def one_cycle_per_epoch_arguments(optimizer, loader, epochs, max_lr):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr, epochs=epochs, steps_per_epoch=len(loader))


def one_cycle_ceil_division(optimizer, loader, epochs, max_lr):
    batches = math.ceil(len(loader.dataset) / loader.batch_size)  # the partial last batch counts
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[max_lr], total_steps=batches * epochs)


def one_cycle_floor_division(optimizer, loader, epochs, max_lr):
    steps = epochs * (len(loader.dataset) // loader.batch_size)
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=steps)


def one_cycle_one_epoch(optimizer, loader, epochs, max_lr):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=len(loader))


def one_cycle_sized_in_epochs(optimizer, loader, epochs, max_lr):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=1)


def one_cycle_one_extra_step(optimizer, loader, epochs, max_lr):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * len(loader) + 1)


def one_cycle_base_lr_as_peak(optimizer, loader, epochs, max_lr):
    peak = optimizer.param_groups[0]["lr"]
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=peak, total_steps=epochs * len(loader))


def one_cycle_linear(optimizer, loader, epochs, max_lr):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * len(loader),
                                               anneal_strategy="linear")


def one_cycle_no_return(optimizer, loader, epochs, max_lr):
    optimizer.scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr,
                                                              total_steps=epochs * len(loader))


def one_cycle_own_optimizer(optimizer, loader, epochs, max_lr):
    params = [p for group in optimizer.param_groups for p in group["params"]]
    fresh = torch.optim.SGD(params, lr=max_lr, momentum=0.9)
    return torch.optim.lr_scheduler.OneCycleLR(fresh, max_lr=max_lr, total_steps=epochs * len(loader))


# What the notebook's other cells define, for the planted cells that use it
NOTEBOOK = notebook_namespace("07_lr_schedulers")

# ---------------------------------------------------------------- 07-inverse-sqrt
INVERSE_SQRT_PLANTED = solution_cell(
    "def inverse_sqrt(step, warmup_steps):\n"
    "    n = step + 1\n"
    "    return min(n / warmup_steps, warmup_steps / n)\n",
    "inverse_sqrt")
RAMP, DECAY = (lambda s, w: (s + 1) / w), (lambda s, w: math.sqrt(w / (s + 1)))


def noam(ramp=RAMP, decay=DECAY):
    """An inverse_sqrt of two branches, each a function of (step, warmup_steps)."""
    return lambda step, warmup_steps: (ramp if step < warmup_steps else decay)(step, warmup_steps)


def noam_paper(step: int, warmup_steps: int) -> float:  # the Transformer paper's form, steps counted from 1
    return math.sqrt(warmup_steps) * min(step ** -0.5, step * warmup_steps ** -1.5)


def noam_torch(step: int, warmup_steps: int) -> float:
    ratio = torch.tensor((step + 1) / warmup_steps, dtype=torch.float64)
    return float(torch.minimum(ratio, ratio.rsqrt()))


MISTAKES = [
    Mistake("07-warmup-cosine", "warmup-starts-at-zero", "the ramp starts at 0: the first step trains with lr 0",
            (warmup_from_zero,), story="step / warmup_steps: the textbook ramp from 0, one step behind"),
    Mistake("07-warmup-cosine", "warmup-wrong", "reaches 1 at step", (warmup_peaks_late,),
            story="(step + 1) / (warmup_steps + 1): nanoGPT's later variant, never reaches the peak in warmup"),
    Mistake("07-warmup-cosine", "warmup-wrong", "integer division", (warmup_floor_division,),
            story="(step + 1) // warmup_steps: integer division keeps the ramp at 0 until its last step"),
    Mistake("07-warmup-cosine", "warmup-wrong", "dividing by total_steps", (warmup_over_total,),
            story="the ramp divided by total_steps: never reaches 1"),
    Mistake("07-warmup-cosine", "cosine-wrong", "progress measured from 0", (cosine_from_zero,),
            story="progress = step / total_steps: the cosine starts before warmup ends"),
    Mistake("07-warmup-cosine", "cosine-wrong", "0.5 * (1 + cos(pi * progress))", (decay_over_total,),
            story="decay span total_steps instead of total - warmup: never reaches 0"),
    Mistake("07-warmup-cosine", "rises-after-total", "clamp", (not_clamped,),
            story="progress not clamped: the lr comes back up after total_steps"),
    Mistake("07-warmup-cosine", "divides-by-zero", "total_steps - warmup_steps (no decay span)",
            (no_decay_span_guard,),
            story="progress divided by total_steps - warmup_steps without max(1, ...): no decay span divides by 0"),
    Mistake("07-warmup-cosine", "divides-by-zero", "warmup_steps (no warm-up at all)", (ramp_unguarded,),
            story="min(1, (step + 1) / warmup_steps) with no branch: no warm-up divides by 0"),
    Mistake("07-warmup-cosine", "not-a-float", "Tensor", (returns_tensor,),
            story="returns a tensor (torch.cos habits)"),
    Mistake("07-warmup-cosine", "warmup-starts-at-zero", "the ramp starts at 0: the first step trains with lr 0",
            solution_cell(
        "def warmup_cosine(step, warmup_steps, total_steps):\n"
        "    if step < warmup_steps:\n"
        "        return step / warmup_steps\n"
        "    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))\n"
        "    return 0.5 * (1.0 + math.cos(math.pi * progress))\n",
        "warmup_cosine", given=NOTEBOOK),
        story="the ramp starts at 0: the first optimizer step trains with lr 0 and the peak comes a step late",
        planted=True),
    Mistake("07-per-step", "scheduler-before-optimizer", "Detected call", (per_step_before,),
            story="scheduler.step() before optimizer.step(): the pre-1.1 order, warned about by PyTorch"),
    Mistake("07-per-step", "scheduler-not-stepped", "never called", (per_step_never,),
            story="forgets the scheduler"),
    Mistake("07-per-step", "stepped-per-epoch", "between epochs", (per_epoch_correct,),
            story="OneCycleLR stepped per epoch, as in older recipes"),
    Mistake("07-per-step", "wrong-step-count", "more epochs or batches than asked", (extra_epoch,),
            story="an extra warm-up epoch before the loop"),
    Mistake("07-per-step", "wrong-lr-trace", "once per optimizer step", (per_step_every_other_batch,),
            story="scheduler stepped every second batch, copied from an accumulation loop"),
    Mistake("07-per-step", "steps-inconsistent", "zero_grad missing", (per_step_no_zero_grad,),
            story="forgets zero_grad: gradients accumulate"),
    Mistake("07-per-step", "not-train-mode", "model.train()", (per_step_no_train,),
            story="never calls model.train() (the model arrives after an evaluation)"),
    Mistake("07-per-step", "scheduler-before-optimizer", "Detected call", solution_cell(
        "def train_per_step(model, loader, loss_fn, optimizer, scheduler, epochs):\n"
        "    device = next(model.parameters()).device\n"
        "    for _ in range(epochs):\n"
        "        model.train()\n"
        "        for inputs, targets in loader:\n"
        "            inputs, targets = inputs.to(device), targets.to(device)\n"
        "            optimizer.zero_grad(set_to_none=True)\n"
        "            loss = loss_fn(model(inputs), targets)\n"
        "            loss.backward()\n"
        "            scheduler.step()\n"
        "            optimizer.step()\n",
        "train_per_step"),
        story="scheduler.step() before optimizer.step(): every update uses the next lr of the schedule", planted=True),
    Mistake("07-per-epoch", "stepped-per-batch", "inside the batch loop", (per_step_correct,),
            story="StepLR stepped every batch: decays len(loader) times too fast"),
    Mistake("07-per-epoch", "scheduler-not-stepped", "never called", (per_step_never,),
            story="forgets the scheduler"),
    Mistake("07-per-epoch", "scheduler-before-optimizer", "start of the epoch", (per_epoch_at_start,),
            story="scheduler.step() at the top of the epoch"),
    Mistake("07-per-epoch", "wrong-lr-trace", "exactly once per epoch", (per_epoch_twice,),
            story="scheduler.step() twice per epoch (once in a helper, once in the loop)"),
    Mistake("07-per-epoch", "wrong-step-count", "more epochs or batches than asked", (extra_epoch,),
            story="an extra warm-up epoch before the loop"),
    Mistake("07-per-epoch", "steps-inconsistent", "zero_grad missing", (per_epoch_no_zero_grad,),
            story="forgets zero_grad: gradients accumulate"),
    Mistake("07-per-epoch", "not-train-mode", "undone by a model.eval()", (per_epoch_train_once,),
            story="model.train() once before the loop, model.eval() for the per-epoch evaluation"),
    Mistake("07-per-epoch", "stepped-per-batch", "inside the batch loop", solution_cell(
        "def train_per_epoch(model, loader, loss_fn, optimizer, scheduler, epochs):\n"
        "    device = next(model.parameters()).device\n"
        "    for _ in range(epochs):\n"
        "        model.train()\n"
        "        for inputs, targets in loader:\n"
        "            inputs, targets = inputs.to(device), targets.to(device)\n"
        "            optimizer.zero_grad(set_to_none=True)\n"
        "            loss_fn(model(inputs), targets).backward()\n"
        "            optimizer.step()\n"
        "            scheduler.step()\n",
        "train_per_epoch"),
        story="an epoch-sized StepLR stepped every batch: it decays len(loader) times too fast", planted=True),
    Mistake("07-plateau", "plateau-train-metric", "memorises random labels", (plateau_train_metric,),
            story="scheduler.step(train_loss): the lesson's own pitfall"),
    Mistake("07-plateau", "plateau-wrong-metric", "validation accuracy", (plateau_val_accuracy,),
            story="the accuracy people report, fed to a mode='min' scheduler (issue 29: was blamed on the train loss)"),
    Mistake("07-plateau", "plateau-wrong-metric", "the pair (loss, accuracy)", (plateau_evaluate_pair,),
            story="scheduler.step(evaluate(...)): the whole (loss, accuracy) pair"),
    Mistake("07-plateau", "plateau-train-metric", "memorises random labels", (plateau_last_batch_live_loss,),
            story="the last training batch's live loss tensor (issue 29: the check printed a UserWarning)"),
    Mistake("07-plateau", "plateau-per-batch", "inside the batch loop", (plateau_per_batch,),
            story="stepped per batch with the batch loss"),
    Mistake("07-plateau", "plateau-no-metric", "without a metric", (plateau_no_metric,),
            story="scheduler.step() like the other schedulers"),
    Mistake("07-plateau", "plateau-not-stepped", "not stepped every epoch", (plateau_skips_first_epoch,),
            story="skips the first epoch: 'nothing to compare with yet'"),
    Mistake("07-plateau", "no-validation", "never ran on a validation batch", (plateau_validates_on_train,),
            story="evaluates on train_loader (copy-paste)"),
    Mistake("07-plateau", "plateau-wrong-metric", "the previous epoch's validation loss", (plateau_stale,),
            story="passes last epoch's validation loss"),
    Mistake("07-plateau", "plateau-wrong-metric", "before the epoch's training", (plateau_step_at_top,),
            story="steps at the top of the epoch with the loss evaluated at the end of the last one (issue 43: "
            "passed, consistent with the weights at the call)"),
    Mistake("07-plateau", "plateau-wrong-metric", "plain mean of the validation batches", (plateau_batch_means,),
            story="averages the batch means (issue 43: passed, no partial validation batch)"),
    Mistake("07-plateau", "plateau-wrong-metric", "sum instead of a mean", (plateau_sum,),
            story="sums the batch losses"),
    Mistake("07-plateau", "val-in-train-mode", "model.eval()", (plateau_train_mode,),
            story="validates with dropout on"),
    Mistake("07-plateau", "train-in-eval-mode", "model.train()", (plateau_stays_eval,),
            story="model.train() once before the loop; evaluate() leaves eval mode on"),
    Mistake("07-plateau", "val-with-grad", "no_grad", (plateau_with_grad,),
            story="validation without torch.no_grad()"),
    Mistake("07-plateau", "wrong-return", "holds tensors", (plateau_tensor_losses,),
            story="appends the 0-dim tensor where the signature says list[float] (issue 43)"),
    Mistake("07-plateau", "wrong-return", "validation losses", (plateau_returns_nothing,),
            story="forgets the return"),
    Mistake("07-plateau", "plateau-train-metric", "memorises random labels", solution_cell(
        "def train_with_plateau(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):\n"
        "    device = next(model.parameters()).device\n"
        "    val_losses = []\n"
        "    for _ in range(epochs):\n"
        "        model.train()\n"
        "        total, batches = 0.0, 0\n"
        "        for inputs, targets in train_loader:\n"
        "            inputs, targets = inputs.to(device), targets.to(device)\n"
        "            optimizer.zero_grad(set_to_none=True)\n"
        "            loss = loss_fn(model(inputs), targets)\n"
        "            loss.backward()\n"
        "            optimizer.step()\n"
        "            total, batches = total + loss.item(), batches + 1\n"
        "        val_loss, _ = evaluate(model, val_loader, loss_fn)\n"
        "        scheduler.step(total / batches)\n"
        "        val_losses.append(val_loss)\n"
        "    return val_losses\n",
        "train_with_plateau", given=NOTEBOOK),
        story="ReduceLROnPlateau fed the training loss, which keeps falling while the validation loss rises",
        planted=True),
    Mistake("07-amp-skip", "scheduler-advanced-on-skip", "runs ahead", (amp_step_always,),
            story="steps the scheduler unconditionally: PyTorch's order warning"),
    Mistake("07-amp-skip", "skip-not-reported", ">=", (amp_step_equal,),
            story="'the scale did not change' taken as 'stepped': wrong when it grows"),
    Mistake("07-amp-skip", "scheduler-not-stepped", "never called", (amp_step_no_scheduler,),
            story="forgets the scheduler"),
    Mistake("07-amp-skip", "loss-not-scaled", "scaled twice", (amp_step_scaled_twice,),
            story="scales the loss twice (a helper already scaled it)"),
    Mistake("07-amp-skip", "bypasses-scaler", "scaler.step(optimizer)", (amp_step_direct,),
            story="optimizer.step() directly: the overflowing steps are applied"),
    Mistake("07-amp-skip", "wrong-step-count", "zero_grad missing", (amp_step_no_zero_grad,),
            story="forgets zero_grad: the inf of a skipped batch stays in .grad"),
    Mistake("07-amp-skip", "wrong-step-count", "in addition to scaler.step", (amp_step_extra_optimizer_step,),
            story="believes scaler.step only unscales and calls optimizer.step() too"),
    Mistake("07-amp-skip", "steps-inconsistent", "clipped", (amp_step_clip_scaled,),
            story="clips before scaler.unscale_ (the AMP docs' pitfall)"),
    Mistake("07-amp-skip", "scheduler-advanced-on-skip", "runs ahead", solution_cell(
        "def amp_step(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):\n"
        "    loss = loss_fn(model(inputs), targets)\n"
        "    scaler.scale(loss).backward()\n"
        "    scale_before = scaler.get_scale()\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
        "    scheduler.step()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    return scaler.get_scale() >= scale_before\n",
        "amp_step"),
        story="the scheduler advances even when the GradScaler skipped the optimizer step", planted=True),
    Mistake("07-one-cycle", "sized-in-samples", "batch_size (8) times", ONE_CYCLE_IN_SAMPLES,
            story="len(loader.dataset): the run counted in samples (issue 29)", planted=True),
    Mistake("07-one-cycle", "too-few-steps", "partial last batch", (one_cycle_floor_division,),
            story="len(dataset) // batch_size: the batches counted by hand, the last partial one forgotten"),
    Mistake("07-one-cycle", "too-few-steps", "one epoch, not 3", (one_cycle_one_epoch,),
            story="total_steps=len(loader): sized for one epoch"),
    Mistake("07-one-cycle", "too-few-steps", "sized in epochs", (one_cycle_sized_in_epochs,),
            story="epochs=epochs, steps_per_epoch=1: a warm-up and cycle sized in epochs, stepped per batch "
            "(issue 43)"),
    Mistake("07-one-cycle", "too-many-steps", "one step more than the run", (one_cycle_one_extra_step,),
            story="+1 'to be safe', after OneCycleLR once raised past its end"),
    Mistake("07-one-cycle", "wrong-max-lr", "the optimizer's lr", (one_cycle_base_lr_as_peak,),
            story="max_lr read from the optimizer, as if the base lr were the peak"),
    Mistake("07-one-cycle", "wrong-schedule", "anneal_strategy", (one_cycle_linear,),
            story="anneal_strategy='linear', from a fast.ai-style recipe"),
    Mistake("07-one-cycle", "not-a-scheduler", "missing return", (one_cycle_no_return,),
            story="builds the scheduler and forgets to return it"),
    Mistake("07-one-cycle", "not-a-scheduler", "another optimizer", (one_cycle_own_optimizer,),
            story="builds its own optimizer for the scheduler"),
    Mistake("07-inverse-sqrt", "wrong-decay", "has no square root", INVERSE_SQRT_PLANTED, planted=True,
            story="warmup_steps / n: the square root forgotten"),
    Mistake("07-inverse-sqrt", "zero-first-step", "raised ZeroDivisionError", (noam_paper,), story="0 ** -0.5"),
    Mistake("07-inverse-sqrt", "zero-first-step", "a factor of 0 wastes it", (lambda s, w: s and noam()(s, w),),
            story="step 0 taken for a call before training"),
    Mistake("07-inverse-sqrt", "wrong-warmup", "another shape or end", (lambda s, w: noam_paper(max(s, 1), w),),
            story="the paper's formula with step 0 guarded as step 1: the peak a step late"),
    Mistake("07-inverse-sqrt", "wrong-warmup", "another shape", (noam(ramp=lambda s, w: math.sqrt((s + 1) / w)),),
            story="the square root over both sides of the min"),
    Mistake("07-inverse-sqrt", "wrong-decay", "not scaled by sqrt", (noam(decay=lambda s, w: (s + 1) ** -0.5),),
            story="the paper's step ** -0.5 without its scale"),
    Mistake("07-inverse-sqrt", "wrong-decay", "one step behind", (noam(decay=lambda s, w: math.sqrt(w / s)),),
            story="the decay counts step, the ramp step + 1"),
    Mistake("07-inverse-sqrt", "not-a-float", "Tensor", (lambda s, w: torch.tensor(noam_torch(s, w)),),
            story="torch arithmetic returned as a tensor"),
]

CORRECT = [
    Correct("07-warmup-cosine", (warmup_cosine_branches,), story="the two branches"),
    Correct("07-warmup-cosine", (warmup_cosine_min_form,), story="min of ramp and cos^2"),
    Correct("07-warmup-cosine", (warmup_counts_steps_taken,), story="counts the step being taken from 1"),
    Correct("07-warmup-cosine", (warmup_cosine_product,), story="a clamped ramp times the cosine, no branch"),
    Correct("07-per-step", (per_step_correct,), story="nested loops"),
    Correct("07-per-step", (per_step_flat,), story="one flat loop over epochs x batches"),
    Correct("07-per-step", (per_step_closure,), story="optimizer.step(closure), as LBFGS needs"),
    Correct("07-per-step", (per_step_functional,), story="autograd.grad into .grad, itertools.chain, zero_grad after"),
    Correct("07-per-epoch", (per_epoch_correct,), story="step after the batch loop"),
    Correct("07-per-epoch", (per_epoch_with_eval,), story="with a per-epoch evaluation"),
    Correct("07-per-epoch", (per_epoch_enumerated,), story="enumerate, stepped after the last batch, train(True)"),
    Correct("07-plateau", (plateau_correct,), story="evaluate then step"),
    Correct("07-plateau", (plateau_weighted,), story="sample-weighted mean, inference_mode, tensor metric"),
    Correct("07-plateau", (plateau_logs_train_loss,), story="also logs the training loss in eval mode"),
    Correct("07-plateau", (plateau_numpy_losses,), story="numpy floats, stepped and returned"),
    Correct("07-amp-skip", (amp_step_scale,), story="compares the scale"),
    Correct("07-amp-skip", (amp_step_hook,), story="an optimizer step hook, clipping after unscale_"),
    Correct("07-amp-skip", (amp_step_checks_grads,), story="isfinite on the unscaled grads, zero_grad first"),
    Correct("07-one-cycle", (one_cycle_total_steps,), story="total_steps=epochs * len(loader)"),
    Correct("07-one-cycle", (one_cycle_per_epoch_arguments,), story="epochs= and steps_per_epoch=len(loader)"),
    Correct("07-one-cycle", (one_cycle_ceil_division,), story="math.ceil over the dataset, max_lr as a list"),
    Correct("07-inverse-sqrt", (noam(),), story="two branches"),
    Correct("07-inverse-sqrt", (lambda s, w: noam_paper(s + 1, w),), story="the paper's form, counted from step + 1"),
    Correct("07-inverse-sqrt", (noam_torch,), story="torch.minimum and rsqrt, converted with float"),
]


# ---------------------------------------------------------------------------------------------- one convention
CONVENTION_TRIPLES = [(0, 5, 50), (1, 5, 50), (4, 5, 50), (5, 5, 50), (27, 5, 50), (50, 5, 50), (80, 5, 50),
                      (0, 1, 10), (0, 0, 10), (3, 0, 10), (9, 10, 10), (10, 10, 10), (12, 10, 10), (99, 100, 1000)]


def _course_factor(step: int, warmup: int, total: int) -> float:
    """The convention the lead fixed (issue 27): (step + 1) / warmup during warmup, then the clamped half cosine."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def test_live_loss_tensor_fails_without_a_warning(capsys):
    """Issue 29: given a loss still attached to its graph, the check itself printed a UserWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_check_fails("07-plateau", plateau_last_batch_live_loss, code="plateau-train-metric",
                           phrase="memorises random labels")
    assert [str(w.message) for w in caught] == []
    assert capsys.readouterr().err == ""


def test_one_warmup_cosine_convention_course_wide():
    """Lesson 07's reference (which lesson 10 grades with) and the drill bank's (lesson 11's) give the same factor;
    lesson 15's linear-decay task shares the warmup ramp. The library trains with torch's own schedulers in this
    convention and ships no factor (tests/test_sequences.py and tests/test_showcase.py check its rates)."""
    assert [_course_factor(*t) for t in [(0, 5, 50), (4, 5, 50), (5, 5, 50), (50, 5, 50)]] == [0.2, 1.0, 1.0, 0.0]
    schedules = {
        "lesson 07 (and 10)": warmup_cosine_reference,
        "drill bank (and lesson 11)": warmup_cosine_factor,
    }
    for name, factor in schedules.items():
        for step, warmup, total in CONVENTION_TRIPLES:
            assert math.isclose(factor(step, warmup, total), _course_factor(step, warmup, total), abs_tol=1e-12), (
                f"{name}: factor({step}, {warmup}, {total})")
    for step, warmup, total in CONVENTION_TRIPLES:
        if step < warmup:
            assert reference_lr_factor(step, warmup, total) == _course_factor(step, warmup, total)


def test_one_cycle_sized_in_epochs_gets_its_own_first_hint():
    """Issue 43: total_steps counted in epochs is told so, and hint 1 asks how often the schedule is stepped."""
    with pytest.raises(CheckFailed) as failure:
        check("07-one-cycle", one_cycle_sized_in_epochs)
    assert failure.value.code == "too-few-steps" and "sized in epochs" in str(failure.value)
    assert "How many times is it stepped in one epoch?" in failure.value.hint


def test_per_epoch_hidden_rejects_stepping_per_batch():
    assert_check_fails("07-per-epoch", per_step_correct, code="stepped-per-batch", phrase="inside the batch loop",
                       hidden=True)


@pytest.mark.parametrize("hidden", [False, True])
def test_plateau_case_separates_a_mean_of_batch_means(hidden):
    """Issue 43: the validation set ends in a partial batch, and the training batches differ in size from the
    validation ones (the judge tells training forwards by their batch size), in the visible and the hidden case."""
    setting = plateau_setting(Case(hidden=hidden))
    last = len(setting.val_set) % setting.val_bs
    assert last and setting.train_bs not in (setting.val_bs, last)
    assert len(setting.train_set) % setting.train_bs == 0
