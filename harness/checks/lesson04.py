"""Checks of lesson 04, the training loop: a device-side running mean, `train_step`, `train_epoch`,
`evaluate`, and a `fit` with early stopping.

Every check runs the student's code on a tiny seeded model and data, watches it through optimizer and
forward hooks and a host-sync counter, and compares what happened with a reference computed here.
"""

from __future__ import annotations

import copy
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.checks.core import fail, register
from harness.checks.probes import ForwardRecorder, HostSyncCounter, StepRecord, StepRecorder

@contextmanager
def _one_thread() -> Iterator[None]:
    """Run a check's tiny models on one intra-op thread: extra threads only add contention at this size."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------------------
# Shared fixtures: a tiny classifier with BatchNorm (its output depends on train/eval mode) and data.


def _model(features: int, classes: int, seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the student's global RNG state
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(features, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, classes))


def _data(n: int, features: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    y = torch.randint(0, classes, (n,), generator=generator)
    return x, y


def _loader(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> DataLoader:
    # shuffle=False: a shuffling sampler calls .tolist() once per epoch, which the sync count would see.
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


def _as_float(value: Any, what: str, where: str) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            fail(
                "not-a-scalar",
                observed=f"{what} is a tensor of shape {tuple(value.shape)}",
                expected=f"{what} is a single number (a 0-dim tensor or a float)",
                cause="a per-sample or per-batch tensor was returned instead of its mean",
                where=where,
            )
        return float(value.detach())
    if isinstance(value, (int, float)):
        return float(value)
    fail(
        "not-a-scalar",
        observed=f"{what} is a {type(value).__name__}",
        expected=f"{what} is a 0-dim tensor (or a float)",
        cause="the function returns something other than the number asked for",
        where=where,
    )


def _close(a: float, b: float, rtol: float = 1e-4) -> bool:
    if math.isnan(a) or math.isnan(b):  # a diverged run reports NaN: equal only to NaN
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= rtol * max(1.0, abs(b))


def _grads_close(grads: list[torch.Tensor | None], reference: list[torch.Tensor], scale: float = 1.0) -> bool:
    return all(g is not None and torch.allclose(g, r * scale, rtol=1e-4, atol=1e-6) for g, r in zip(grads, reference))


@torch.no_grad()
def _load(model: nn.Module, params: list[torch.Tensor]) -> None:
    for p, value in zip(model.parameters(), params):
        p.copy_(value)


def _reference_grads(
    model: nn.Module, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module
) -> tuple[list[torch.Tensor], float]:
    """Gradients and loss of one train-mode batch at `params`, on a scratch copy of `model`."""
    scratch = copy.deepcopy(model)
    _load(scratch, params)
    scratch.train()
    scratch.zero_grad(set_to_none=True)
    loss = loss_fn(scratch(x), y)
    loss.backward()
    return [p.grad.detach().clone() for p in scratch.parameters()], float(loss.detach())


@torch.no_grad()
def _reference_eval(model: nn.Module, loader: DataLoader, loss_fn: nn.Module) -> dict[str, float]:
    """Per-sample mean loss, mean of batch means, sum of losses, and accuracy, all in eval mode."""
    was_training = model.training
    model.eval()
    total, batch_means, correct, n = 0.0, [], 0, 0
    for x, y in loader:
        out = model(x)
        loss = float(loss_fn(out, y))
        total += loss * len(y)
        batch_means.append(loss)
        correct += int((out.argmax(1) == y).sum())
        n += len(y)
    model.train(was_training)
    return {
        "loss": total / n,
        "batch_mean": sum(batch_means) / len(batch_means),
        "sum": total,
        "accuracy": correct / n,
        "correct": float(correct),
    }


def _require_train_mode(records: list, where: str) -> None:
    if any(not r.training for r in records):
        fail(
            "eval-mode-in-training",
            observed="the model ran a training forward pass in eval mode (model.training was False)",
            expected="model.train() before the forward pass of every training step",
            cause="evaluate() left the model in eval mode and the training code never switched it back: "
            "BatchNorm then normalises with running statistics and Dropout does nothing while you train",
            where=where,
        )


# ----------------------------------------------------------------------------------------------------
# 04-running-mean


@register(
    "04-running-mean",
    hints=(
        "Keep a running *sum* of value * n and a running count, both as tensors; divide only in compute().",
        "In update: `self.total += value.detach() * n` and `self.count += n` (no .item(), no float()). "
        "compute() returns `self.total / self.count`, still a tensor. Initialise the state in __init__, "
        "not as class attributes.",
    ),
)
@_one_thread()
def check_running_mean(cls: type, *, hidden: bool) -> str:
    """`cls()` has update(value, n) and compute(): a sample-weighted mean that never syncs or keeps graphs."""
    generator = torch.Generator().manual_seed(7 if hidden else 3)
    counts = [5, 32, 32, 1, 17] if hidden else [32, 32, 8]
    values = [torch.rand((), generator=generator) * 4 for _ in counts]
    weights = torch.tensor(counts, dtype=torch.float32)
    expected = float((torch.stack(values) * weights).sum() / weights.sum())
    unweighted = float(torch.stack(values).mean())
    where = "your RunningMean class: update() and compute()"

    first, second = cls(), cls()
    leaf = torch.ones((), requires_grad=True)
    with HostSyncCounter() as syncs:
        for value, n in zip(values, counts):
            first.update(value * leaf, n)  # a value that is part of a graph, as a fresh loss is
        result = first.compute()
    if syncs.count:
        fail(
            "host-sync-per-update",
            observed=f"{syncs.count} device-to-host copies ({', '.join(sorted(set(syncs.calls)))}) during "
            f"{len(counts)} updates and one compute()",
            expected="no host sync at all: the running state stays a tensor on the device",
            cause="`.item()`, `float(value)` or a Python comparison on a tensor inside update() or compute()",
            where=where,
        )
    if isinstance(result, torch.Tensor) and result.requires_grad:
        fail(
            "keeps-graph",
            observed="compute() returns a tensor that requires grad: the running total holds the graph of every batch",
            expected="a plain tensor: update() stores `value.detach()`",
            cause="`self.total += value * n` without detach() chains every batch's graph (and its activations) "
            "into the total, so memory grows with every step",
            where=where,
        )
    observed = _as_float(result, "compute()", where)
    if _close(observed, unweighted) and not _close(unweighted, expected):
        fail(
            "unweighted-mean",
            observed=f"compute() = {observed:.5f}, the plain mean of the batch values",
            expected=f"{expected:.5f}, the mean weighted by the number of samples n of each update "
            f"(counts {counts})",
            cause="averaging batch means ignores that the last batch is often smaller",
            where=where,
        )
    if not _close(observed, expected):
        fail(
            "wrong-mean",
            observed=f"compute() = {observed:.5f} after updates with counts {counts}",
            expected=f"{expected:.5f} = sum(value * n) / sum(n)",
            cause="the running sum or the running count is not accumulated as value * n and n",
            where=where,
        )
    second.update(torch.tensor(1.0), 1)
    if not _close(_as_float(second.compute(), "compute()", where), 1.0):
        fail(
            "shared-state",
            observed="a new RunningMean that saw one update of 1.0 reports "
            f"{_as_float(second.compute(), 'compute()', where):.4f}",
            expected="1.0: every instance starts from zero",
            cause="the total and count live on the class (class attributes) or in a shared default "
            "argument, so every instance adds into the same state",
            where="RunningMean.__init__",
        )
    return f"sample-weighted mean over {len(counts)} updates, no host sync, no graph kept"


# ----------------------------------------------------------------------------------------------------
# 04-train-step


def _no_gradients(record: StepRecord) -> bool:
    # grad_norm was computed by the step hook, so reading it here is no sync of the student's code
    return any(g is None for g in record.grads) or record.grad_norm == 0.0


def _fail_step_before_backward(call: int, what: str, where: str) -> None:
    fail(
        "step-before-backward",
        observed=f"at optimizer.step() of call {call} the gradients were {what}",
        expected="the gradients of the current batch, computed by loss.backward() before step()",
        cause="optimizer.step() runs before loss.backward(), so it applies no gradient (or a stale one; and "
        "from the second step on, backward fails because step changed the weights the graph saved)",
        where=where,
    )


@register(
    "04-train-step",
    hints=(
        "Five lines, in this order: train mode, clear gradients, forward and loss, backward, step. Return "
        "the loss without turning it into a Python number.",
        "`model.train(); optimizer.zero_grad(set_to_none=True); loss = loss_fn(model(x), y); "
        "loss.backward(); optimizer.step(); return loss.detach()`",
    ),
)
@_one_thread()
def check_train_step(train_step: Callable, *, hidden: bool) -> str:
    """train_step(model, batch, loss_fn, optimizer) -> detached loss: one correct SGD step per call."""
    features, classes, batch_sizes = (7, 5, [12, 20, 9]) if hidden else (4, 3, [16, 16])
    model = _model(features, classes, seed=11 if hidden else 1)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9 if hidden else 0.0)
    batches = [_data(b, features, classes, seed=100 + i) for i, b in enumerate(batch_sizes)]
    where = "your train_step: the order of zero_grad, forward, backward and step, and model.train()"

    model.eval()  # as evaluate() leaves it: train_step must switch the mode itself
    losses = []
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards, HostSyncCounter() as syncs:
        for call, batch in enumerate(batches, start=1):
            losses.append(train_step(model, batch, loss_fn, optimizer))
            # Checked before the next call: with step() between forward and backward, the next call would
            # fail inside backward (step modified weights the graph saved) and hide the cause.
            if len(steps.records) == call and _no_gradients(steps.records[-1]):
                _fail_step_before_backward(call, "missing (None or all zero)", where)
    if len(steps.records) != len(batches):
        fail(
            "wrong-step-count",
            observed=f"{len(steps.records)} optimizer.step() calls for {len(batches)} calls of train_step",
            expected="exactly one optimizer.step() per call",
            cause="step() is missing, or called more than once per batch",
            where=where,
        )
    _require_train_mode(forwards.records, "the start of train_step: call model.train() there")
    references = [_reference_grads(model, r.params, x, y, loss_fn) for r, (x, y) in zip(steps.records, batches)]
    for i, (record, (grads, _), (_, y)) in enumerate(zip(steps.records, references, batches)):
        if _grads_close(record.grads, grads):
            continue
        previous = references[i - 1][0] if i else None
        if previous is not None and _grads_close(record.grads, previous):
            _fail_step_before_backward(i + 1, "those of the previous batch", where)
        if i and _grads_close(record.grads, [g + p for g, p in zip(grads, steps.records[i - 1].grads)]):
            fail(
                "missing-zero-grad",
                observed=f"the gradients at step {i + 1} are the sum of this batch's gradients and those of step {i}",
                expected="only this batch's gradients",
                cause="your loop never calls optimizer.zero_grad(): backward() adds into .grad, so gradients "
                "pile up across steps",
                where=where,
            )
        if _grads_close(record.grads, grads, scale=float(len(y))):
            fail(
                "sum-not-mean",
                observed=f"gradients {len(y)} times (the batch size) those of the mean loss",
                expected="the gradients of loss_fn(model(x), y) as given (mean over the batch)",
                cause="the loss is summed over the batch (reduction='sum' or loss * batch size)",
                where=where,
            )
        fail(
            "wrong-gradients",
            observed=f"the gradients at step {i + 1} differ from those of loss_fn(model(x), y) on that batch",
            expected="the gradients of the given loss_fn on the current batch, in train mode",
            cause="a different loss, a modified batch, or extra backward passes",
            where=where,
        )
    if syncs.count:
        fail(
            "host-sync-per-step",
            observed=f"{syncs.count} device-to-host copies ({', '.join(sorted(set(syncs.calls)))}) in "
            f"{len(batches)} training steps",
            expected="none: return the loss as a tensor and sync once per epoch or per log interval",
            cause="`loss.item()` or `float(loss)` inside train_step makes a GPU wait for every kernel at "
            "every step",
            where="the return statement of train_step",
        )
    for call, (loss, (_, ref_loss)) in enumerate(zip(losses, references), start=1):
        if not isinstance(loss, torch.Tensor):
            fail(
                "not-a-scalar",
                observed=f"train_step returned a {type(loss).__name__}",
                expected="the loss as a 0-dim tensor: `return loss.detach()`",
                cause="the return value is wrapped or converted",
                where="the return statement of train_step",
            )
        if loss.requires_grad:
            fail(
                "returns-graph",
                observed="train_step returned a loss that still requires grad",
                expected="the loss detached from the graph: `return loss.detach()`",
                cause="returning the live loss keeps the whole graph (and its activations) alive for as long "
                "as the caller keeps the value",
                where="the return statement of train_step",
            )
        if not _close(float(loss), ref_loss):
            fail(
                "wrong-loss",
                observed=f"train_step returned {float(loss):.5f} at call {call}",
                expected=f"{ref_loss:.5f}, the batch loss computed before the update",
                cause="the returned value is not the loss of this batch's forward pass",
                where="the return statement of train_step",
            )
    return f"{len(batches)} steps: train mode, fresh gradients of each batch, step after backward, no host sync"


# ----------------------------------------------------------------------------------------------------
# 04-train-epoch


@register(
    "04-train-epoch",
    hints=(
        "Loop over the loader, call your train_step, and feed each returned loss to a RunningMean with the "
        "batch's number of samples.",
        "`meter = RunningMean(); for x, y in loader: meter.update(train_step(model, (x, y), loss_fn, "
        "optimizer), len(y))`; `return meter.compute()`. No .item() inside the loop.",
    ),
)
@_one_thread()
def check_train_epoch(train_epoch: Callable, *, hidden: bool) -> str:
    """train_epoch(model, loader, loss_fn, optimizer) -> sample-weighted mean loss of one epoch, no per-step sync."""
    features, classes, n, batch = (6, 4, 83, 16) if hidden else (4, 3, 70, 16)
    model = _model(features, classes, seed=21 if hidden else 2)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _data(n, features, classes, seed=5 if hidden else 4)
    loader = _loader(x, y, batch)
    batches = list(loader)
    where = "your train_epoch"

    model.eval()
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards, HostSyncCounter() as syncs:
        result = train_epoch(model, loader, loss_fn, optimizer)
    if len(steps.records) != len(batches):
        fail(
            "wrong-step-count",
            observed=f"{len(steps.records)} optimizer steps for a loader of {len(batches)} batches",
            expected="one step per batch",
            cause="the loop skips batches, stops early, or steps more than once per batch",
            where=where,
        )
    _require_train_mode(forwards.records, "train_step (it calls model.train()) and train_epoch")
    if syncs.count >= len(batches):
        fail(
            "host-sync-per-step",
            observed=f"{syncs.count} device-to-host copies ({', '.join(sorted(set(syncs.calls)))}) in an "
            f"epoch of {len(batches)} steps",
            expected="at most a few per epoch: accumulate the loss as a tensor and sync at the end",
            cause="`loss.item()` or `float(loss)` in the loop: on a GPU each one waits for the step to finish",
            where=where,
        )
    batch_losses = [_reference_grads(model, r.params, bx, by, loss_fn)[1] for r, (bx, by) in zip(steps.records, batches)]
    sizes = [len(by) for _, by in batches]
    expected = sum(l * s for l, s in zip(batch_losses, sizes)) / n
    observed = _as_float(result, "train_epoch's result", where)
    if _close(observed, sum(batch_losses) / len(batch_losses)) and not _close(observed, expected):
        fail(
            "unweighted-mean",
            observed=f"{observed:.5f}, the plain mean of the batch losses",
            expected=f"{expected:.5f}, weighted by batch size (the last batch has {sizes[-1]} samples, not {batch})",
            cause="averaging batch means over-weights the smaller last batch",
            where=where,
        )
    if _close(observed, expected * n):
        fail(
            "sum-not-mean",
            observed=f"{observed:.3f}, the sum of the per-sample losses",
            expected=f"{expected:.5f}, their mean over the {n} samples",
            cause="the total is never divided by the number of samples",
            where=where,
        )
    if not _close(observed, expected):
        fail(
            "wrong-loss",
            observed=f"train_epoch returned {observed:.5f}",
            expected=f"{expected:.5f}, the mean training loss over the epoch's samples",
            cause="the epoch loss is not the sample-weighted mean of the step losses",
            where=where,
        )
    return f"{len(batches)} steps, sample-weighted epoch loss, {syncs.count} host syncs"


# ----------------------------------------------------------------------------------------------------
# 04-evaluate


@register(
    "04-evaluate",
    hints=(
        "Evaluation needs two switches (one for layers like BatchNorm and Dropout, one for autograd) and a "
        "loss averaged over samples, not batches.",
        "`model.eval()` and `with torch.no_grad():` (or torch.inference_mode()); accumulate "
        "`loss_fn(out, y) * len(y)` and `(out.argmax(1) == y).sum()` as tensors, divide by the number of "
        "samples at the end.",
    ),
)
@_one_thread()
def check_evaluate(evaluate: Callable, *, hidden: bool) -> str:
    """evaluate(model, loader, loss_fn) -> {"loss", "accuracy"}: eval mode, no graph, per-sample means."""
    features, classes, n, batch = (5, 6, 77, 10) if hidden else (4, 3, 70, 16)
    model = _model(features, classes, seed=31 if hidden else 3)
    loss_fn = nn.CrossEntropyLoss()
    x, y = _data(n, features, classes, seed=9 if hidden else 8)
    loader = _loader(x, y, batch)
    # Give BatchNorm non-trivial running statistics, so train and eval mode give different outputs.
    with torch.no_grad():
        model.train()
        model(x * 3 + 1)
    model.train()  # as training leaves it
    reference = _reference_eval(model, loader, loss_fn)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    where = "your evaluate"

    with ForwardRecorder(model) as forwards, HostSyncCounter() as syncs:
        result = evaluate(model, loader, loss_fn)
    if any(r.training for r in forwards.records):
        fail(
            "train-mode-in-eval",
            observed="the model ran in training mode during evaluation",
            expected="model.eval() before the evaluation forward passes",
            cause="without eval(), BatchNorm uses the batch's statistics (and updates its running ones) and "
            "Dropout drops units, so the score is noisy and the model changes while you measure it",
            where=where,
        )
    if any(r.grad_enabled for r in forwards.records):
        fail(
            "builds-graph",
            observed="the evaluation forward passes ran with autograd recording (torch.is_grad_enabled() was True)",
            expected="no graph: wrap evaluation in `with torch.no_grad():` or `torch.inference_mode()`",
            cause="without no_grad every forward keeps its activations for a backward that never comes: "
            "more memory and time for nothing",
            where=where,
        )
    if any(not torch.equal(before[k], v) for k, v in model.state_dict().items()):
        fail(
            "changes-weights",
            observed="the model's parameters or buffers changed during evaluate",
            expected="evaluation leaves the model exactly as it was",
            cause="an optimizer step or a training-mode forward inside evaluate",
            where=where,
        )
    if syncs.count >= len(loader):
        fail(
            "host-sync-per-batch",
            observed=f"{syncs.count} device-to-host copies ({', '.join(sorted(set(syncs.calls)))}) for "
            f"{len(loader)} batches",
            expected="a constant few (one per returned number), not one per batch",
            cause="`.item()` or `float()` inside the loop; accumulate tensors and convert once at the end",
            where=where,
        )
    if not isinstance(result, dict) or not {"loss", "accuracy"} <= set(result):
        fail(
            "wrong-return",
            observed=f"evaluate returned {type(result).__name__}"
            + (f" with keys {sorted(result)}" if isinstance(result, dict) else ""),
            expected='a dict with keys "loss" and "accuracy"',
            cause="the return value has another shape",
            where="the return statement of evaluate",
        )
    loss = _as_float(result["loss"], 'result["loss"]', where)
    accuracy = _as_float(result["accuracy"], 'result["accuracy"]', where)
    if _close(loss, reference["sum"]):
        fail(
            "sum-not-mean",
            observed=f'loss = {loss:.3f}, the sum of the per-sample losses',
            expected=f"{reference['loss']:.5f}, their mean over the {n} samples",
            cause="the accumulated `loss * len(y)` is never divided by the number of samples",
            where=where,
        )
    if _close(loss, reference["batch_mean"]) and not _close(loss, reference["loss"]):
        fail(
            "unweighted-mean",
            observed=f"loss = {loss:.5f}, the plain mean of the batch losses",
            expected=f"{reference['loss']:.5f}, the mean over samples (the last batch holds {n % batch} samples)",
            cause="averaging batch means over-weights the smaller last batch",
            where=where,
        )
    if not _close(loss, reference["loss"]):
        fail(
            "wrong-loss",
            observed=f"loss = {loss:.5f}",
            expected=f"{reference['loss']:.5f}, the mean loss over the loader's samples in eval mode",
            cause="the loss is accumulated or averaged differently",
            where=where,
        )
    if _close(accuracy, reference["correct"]) and reference["correct"] != reference["accuracy"]:
        fail(
            "count-not-fraction",
            observed=f"accuracy = {accuracy:.0f}, the number of correct predictions",
            expected=f"{reference['accuracy']:.4f}, the fraction correct",
            cause="the count of correct predictions is never divided by the number of samples",
            where=where,
        )
    if not _close(accuracy, reference["accuracy"]):
        fail(
            "wrong-accuracy",
            observed=f"accuracy = {accuracy:.4f}",
            expected=f"{reference['accuracy']:.4f}",
            cause="predictions are not out.argmax(1), or the count is not over all samples",
            where=where,
        )
    return f"eval mode, no graph, mean loss and accuracy over {n} samples, {syncs.count} host syncs"


# ----------------------------------------------------------------------------------------------------
# 04-fit


@dataclass
class _ValSnapshots:
    """Copies the model's state each time it sees the validation batch (the whole val set, one batch)."""

    model: nn.Module
    val_size: int
    states: list[dict[str, torch.Tensor]] = field(default_factory=list)

    def __enter__(self) -> "_ValSnapshots":
        self._handle = self.model.register_forward_pre_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _record(self, module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        if inputs and inputs[0].shape[0] == self.val_size:
            self.states.append({k: v.detach().clone() for k, v in module.state_dict().items()})


def _early_stop_epochs(losses: list[float], patience: int, min_delta: float) -> tuple[int, int, bool]:
    """Epochs the rule runs on `losses`, the index of the best epoch, and whether the rule stopped."""
    best, best_epoch, waited = float("inf"), 0, 0
    for epoch, loss in enumerate(losses):
        if loss < best - min_delta:
            best, best_epoch, waited = loss, epoch, 0
        else:
            waited += 1
            if waited >= patience:
                return epoch + 1, best_epoch, True
    return len(losses), best_epoch, False


def _fit_problem(seed: int, features: int) -> tuple[nn.Module, DataLoader, DataLoader]:
    """A task whose validation loss falls then rises: 20% of the val labels disagree with the training rule."""
    generator = torch.Generator().manual_seed(seed)
    direction = torch.randn(features, generator=generator)
    x_train = torch.randn(256, features, generator=generator)
    y_train = (x_train @ direction > 0).long()
    x_val = torch.randn(96, features, generator=generator)
    y_val = (x_val @ direction > 0).long()
    flipped = torch.rand(96, generator=generator) < 0.2
    y_val[flipped] = 1 - y_val[flipped]
    return _model(features, 2, seed), _loader(x_train, y_train, 16), _loader(x_val, y_val, 96)


def _history_frame(history: Any) -> pd.DataFrame:
    frame = history if isinstance(history, pd.DataFrame) else pd.DataFrame(list(history))
    missing = {"train_loss", "val_loss"} - set(frame.columns)
    if missing:
        fail(
            "wrong-history",
            observed=f"the history has columns {sorted(frame.columns)}",
            expected="one row (a dict) per epoch with at least train_loss and val_loss",
            cause=f"missing {sorted(missing)}",
            where="the history your fit returns",
        )
    return frame


def _run_fit(fit: Callable, *, seed: int, features: int, patience: int, min_delta: float, max_epochs: int) -> str:
    model, train_loader, val_loader = _fit_problem(seed, features)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
    where = "your fit: the early-stopping bookkeeping at the end of each epoch"
    with _ValSnapshots(model, 96) as snapshots, ForwardRecorder(model) as forwards, HostSyncCounter() as syncs:
        history = fit(
            model, train_loader, val_loader, loss_fn=loss_fn, optimizer=optimizer,
            max_epochs=max_epochs, patience=patience, min_delta=min_delta,
        )
    frame = _history_frame(history)
    # Training forwards: the ones autograd records that are not the validation batch (an evaluation of
    # the training data under no_grad is allowed and is not counted).
    training = [r for r in forwards.records if r.batch_size != 96 and r.grad_enabled]
    _require_train_mode(training, "the start of each epoch's training (train_step calls model.train())")
    epochs = len(snapshots.states)
    steps = len(training)
    if epochs == 0:
        fail(
            "no-validation",
            observed="the model never saw the validation batch",
            expected="evaluate(model, val_loader, loss_fn) after each training epoch",
            cause="fit does not evaluate on val_loader",
            where=where,
        )
    if syncs.count >= steps:
        fail(
            "host-sync-per-step",
            observed=f"{syncs.count} device-to-host copies in {steps} training steps",
            expected="a few per epoch (the numbers you log and the early-stopping comparison)",
            cause="a metric converted with .item()/float() at every step",
            where="the training loop inside fit",
        )
    scratch = _model(features, 2, seed)
    val_losses = []
    for state in snapshots.states:
        scratch.load_state_dict(state)
        val_losses.append(_reference_eval(scratch, val_loader, loss_fn)["loss"])
    if len(frame) != epochs:
        fail(
            "wrong-history",
            observed=f"{len(frame)} rows in the history for {epochs} epochs run",
            expected="one row per epoch",
            cause="rows appended conditionally or more than once per epoch",
            where="the history your fit returns",
        )
    reported = [float(v) for v in frame["val_loss"]]
    if not all(_close(a, b, rtol=1e-3) for a, b in zip(reported, val_losses)):
        fail(
            "wrong-history",
            observed=f"val_loss in the history: {[round(v, 4) for v in reported]}",
            expected=f"the loss of the model on val_loader after each epoch: {[round(v, 4) for v in val_losses]}",
            cause="val_loss is not evaluate(model, val_loader, loss_fn)['loss'] after the epoch's training",
            where="the history your fit returns",
        )
    expected_epochs, best_epoch, stopped = _early_stop_epochs(val_losses, patience, min_delta)
    if not stopped:
        expected_epochs = max_epochs
    if epochs != expected_epochs:
        curve = ", ".join(f"{v:.4f}" for v in val_losses)
        train_stop, _, train_stopped = _early_stop_epochs([float(v) for v in frame["train_loss"]], patience, min_delta)
        if (train_stopped and train_stop == epochs) or (not train_stopped and epochs == max_epochs):
            fail(
                "early-stop-on-train-loss",
                observed=f"ran {epochs} epochs (max_epochs={max_epochs}), which is what the rule gives on the "
                "*training* loss",
                expected=f"stop after {expected_epochs} epochs: the validation loss ({curve}) had not improved by "
                f"more than min_delta={min_delta} for patience={patience} epochs",
                cause="early stopping watches train_loss, which keeps falling while the model overfits",
                where=where,
            )
        fail(
            "wrong-stop-epoch",
            observed=f"ran {epochs} epochs (max_epochs={max_epochs}) with validation losses {curve}",
            expected=f"{expected_epochs} epochs: stop once the val loss has not improved on the best by more "
            f"than min_delta={min_delta} for patience={patience} epochs in a row",
            cause="the patience counter is not reset on improvement, min_delta is ignored, the comparison is "
            "off by one, or the loop never breaks",
            where=where,
        )
    final = model.state_dict()
    if any(not torch.equal(final[k], v) for k, v in snapshots.states[best_epoch].items()):
        fail(
            "best-weights-not-restored",
            observed=f"after fit the model does not hold the weights of its best epoch ({best_epoch + 1})",
            expected="the state of the epoch with the lowest val loss, restored at the end",
            cause="keep a copy of the best state (copy.deepcopy(model.state_dict())) when val loss improves and "
            "load_state_dict() it before returning; a state_dict() without a copy changes as training goes on",
            where=where,
        )
    return f"stopped after {epochs} epochs, best epoch {best_epoch + 1}"


@register(
    "04-fit",
    hints=(
        "Track the best validation loss so far, the epoch it happened and a copy of the weights then; count "
        "epochs since the last improvement (by more than min_delta) and stop when the count reaches patience.",
        "After evaluate: `if val < best - min_delta: best, waited, best_state = val, 0, "
        "copy.deepcopy(model.state_dict())` else `waited += 1; if waited >= patience: break`. After the loop "
        "`model.load_state_dict(best_state)`. Sync val loss with float() once per epoch, not per step.",
    ),
)
@_one_thread()
def check_fit(fit: Callable, *, hidden: bool) -> str:
    """fit(...) early-stops on the val loss with patience/min_delta and leaves the best weights in the model."""
    if hidden:
        runs = [dict(seed=13, features=5, patience=3, min_delta=0.0, max_epochs=14),
                dict(seed=14, features=3, patience=2, min_delta=1e-3, max_epochs=12),
                dict(seed=15, features=4, patience=1, min_delta=10.0, max_epochs=8)]
    else:
        runs = [dict(seed=3, features=4, patience=2, min_delta=0.0, max_epochs=12),
                dict(seed=4, features=4, patience=2, min_delta=0.01, max_epochs=12)]
    return "; ".join(_run_fit(fit, **run) for run in runs)
