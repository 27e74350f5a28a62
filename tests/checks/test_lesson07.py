"""Lesson 07 checks: each rejects its planted bugs with the right code and accepts correct variants."""

from __future__ import annotations

import math

import pytest
import torch

from harness.checks import check
from harness.checks.testing import assert_check_fails


def run_check(task_id: str, *objects: object, hidden: bool = False) -> None:
    check(task_id, *objects, hidden=hidden)


# ---------------------------------------------------------------------------------------------- warmup
def warmup_cosine_branches(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine_min_form(step: int, warmup_steps: int, total_steps: int) -> float:
    ramp = step / warmup_steps if warmup_steps else 1.0
    decay_span = max(1, total_steps - warmup_steps)
    progress = max(0.0, min(1.0, (step - warmup_steps) / decay_span))
    return min(ramp, math.cos(math.pi * progress / 2) ** 2)  # cos^2(x/2) == (1 + cos x) / 2


def warmup_off_by_one(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return warmup_cosine_branches(step, warmup_steps, total_steps)


def cosine_from_zero(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return step / warmup_steps
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / total_steps)))


def not_clamped(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return step / warmup_steps
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / max(1, total_steps - warmup_steps)))


def returns_tensor(step: int, warmup_steps: int, total_steps: int) -> torch.Tensor:
    return torch.tensor(warmup_cosine_branches(step, warmup_steps, total_steps))


@pytest.mark.parametrize("impl", [warmup_cosine_branches, warmup_cosine_min_form])
@pytest.mark.parametrize("hidden", [False, True])
def test_warmup_cosine_accepts_correct(impl, hidden):
    run_check("07-warmup-cosine", impl, hidden=hidden)


@pytest.mark.parametrize(
    ("impl", "code", "phrase"),
    [
        (warmup_off_by_one, "warmup-wrong", "step / warmup_steps"),
        (cosine_from_zero, "cosine-wrong", "progress"),
        (not_clamped, "rises-after-total", "clamp"),
        (returns_tensor, "not-a-float", "Tensor"),
    ],
)
def test_warmup_cosine_rejects_bugs(impl, code, phrase):
    assert_check_fails("07-warmup-cosine", impl, code=code, phrase=phrase)


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


def twice_per_step(model, loader, loss_fn, optimizer, scheduler, epochs):
    for _ in range(epochs):
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)
            scheduler.step()
            scheduler.step()


def extra_epoch(model, loader, loss_fn, optimizer, scheduler, epochs):
    per_step_correct(model, loader, loss_fn, optimizer, scheduler, 1)
    per_epoch_correct(model, loader, loss_fn, optimizer, scheduler, epochs)


def per_epoch_at_start(model, loader, loss_fn, optimizer, scheduler, epochs):
    for _ in range(epochs):
        scheduler.step()
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)


@pytest.mark.parametrize("impl", [per_step_correct, per_step_flat])
@pytest.mark.parametrize("hidden", [False, True])
def test_per_step_accepts_correct(impl, hidden):
    run_check("07-per-step", impl, hidden=hidden)


@pytest.mark.parametrize(
    ("impl", "code", "phrase"),
    [
        (per_step_before, "scheduler-before-optimizer", "Detected call"),
        (per_step_never, "scheduler-not-stepped", "never called"),
        (per_epoch_correct, "stepped-per-epoch", "between epochs"),
        (extra_epoch, "wrong-step-count", "optimizer steps"),
    ],
)
def test_per_step_rejects_bugs(impl, code, phrase):
    assert_check_fails("07-per-step", impl, code=code, phrase=phrase)


def test_per_step_rejects_double_stepping_in_hidden():
    assert_check_fails("07-per-step", twice_per_step, code="wrong-lr-trace", phrase="once per optimizer step", hidden=True)


@pytest.mark.parametrize("impl", [per_epoch_correct, per_epoch_with_eval])
@pytest.mark.parametrize("hidden", [False, True])
def test_per_epoch_accepts_correct(impl, hidden):
    run_check("07-per-epoch", impl, hidden=hidden)


def per_epoch_twice(model, loader, loss_fn, optimizer, scheduler, epochs):
    for _ in range(epochs):
        for inputs, targets in loader:
            _batch_update(model, inputs, targets, loss_fn, optimizer)
        scheduler.step()
        scheduler.step()


@pytest.mark.parametrize(
    ("impl", "code", "phrase", "hidden"),
    [
        (per_step_correct, "stepped-per-batch", "inside the batch loop", False),
        (per_step_correct, "stepped-per-batch", "inside the batch loop", True),
        (per_step_never, "scheduler-not-stepped", "never called", False),
        (per_epoch_at_start, "scheduler-before-optimizer", "start of the epoch", False),
        (per_epoch_twice, "wrong-lr-trace", "exactly once per epoch", False),
        (extra_epoch, "wrong-step-count", "optimizer steps", False),
    ],
)
def test_per_epoch_rejects_bugs(impl, code, phrase, hidden):
    assert_check_fails("07-per-epoch", impl, code=code, phrase=phrase, hidden=hidden)


# ---------------------------------------------------------------------------------------------- plateau
def _evaluate(model, loader, loss_fn):
    model.eval()
    with torch.no_grad():
        losses = [loss_fn(model(inputs), targets) for inputs, targets in loader]
    return float(torch.stack(losses).mean())


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


@pytest.mark.parametrize("impl", [plateau_correct, plateau_weighted, plateau_logs_train_loss])
@pytest.mark.parametrize("hidden", [False, True])
def test_plateau_accepts_correct(impl, hidden):
    run_check("07-plateau", impl, hidden=hidden)


@pytest.mark.parametrize(
    ("impl", "code", "phrase"),
    [
        (plateau_train_metric, "plateau-train-metric", "memorises random labels"),
        (plateau_per_batch, "plateau-per-batch", "inside the batch loop"),
        (plateau_no_metric, "plateau-no-metric", "without a metric"),
        (plateau_stale, "plateau-wrong-metric", "stale"),
        (plateau_sum, "plateau-wrong-metric", "sum instead of a mean"),
        (plateau_train_mode, "val-in-train-mode", "model.eval()"),
        (plateau_stays_eval, "train-in-eval-mode", "model.train()"),
        (plateau_with_grad, "val-with-grad", "no_grad"),
        (plateau_returns_nothing, "wrong-return", "validation losses"),
    ],
)
def test_plateau_rejects_bugs(impl, code, phrase):
    assert_check_fails("07-plateau", impl, code=code, phrase=phrase)


def test_plateau_hidden_rejects_training_metric():
    assert_check_fails("07-plateau", plateau_train_metric, code="plateau-train-metric", phrase="training loss", hidden=True)


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


@pytest.mark.parametrize("impl", [amp_step_scale, amp_step_hook])
@pytest.mark.parametrize("hidden", [False, True])
def test_amp_skip_accepts_correct(impl, hidden):
    run_check("07-amp-skip", impl, hidden=hidden)


@pytest.mark.parametrize(
    ("impl", "code", "phrase"),
    [
        (amp_step_always, "scheduler-advanced-on-skip", "runs ahead"),
        (amp_step_equal, "skip-not-reported", ">="),
        (amp_step_no_scheduler, "scheduler-not-stepped", "never called"),
        (amp_step_scaled_twice, "loss-not-scaled", "scaler.scale(loss)"),
        (amp_step_direct, "bypasses-scaler", "scaler.step(optimizer)"),
    ],
)
def test_amp_skip_rejects_bugs(impl, code, phrase):
    assert_check_fails("07-amp-skip", impl, code=code, phrase=phrase)


def test_amp_skip_hidden_rejects_advancing_scheduler():
    assert_check_fails("07-amp-skip", amp_step_always, code="scheduler-advanced-on-skip", phrase="skipped", hidden=True)
