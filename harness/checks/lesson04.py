"""Checks of lesson 04, the training loop: a device-side running mean, `train_step`, `train_epoch`,
`evaluate`, and a `fit` with early stopping.

Each probe runs the student's code on a tiny seeded model and data built from the case, watches it through
optimizer and forward hooks and a host-sync counter, and records what it saw: the gradients and parameters
at every optimizer step, the mode of every forward pass, the number of host syncs, the values returned and
the states the model held. Each judge rebuilds the model and data from the case and decides: it recomputes
the reference gradients and losses at the recorded parameters, and evaluates the recorded states itself.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NoReturn

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.checks.core import Case, fail, judges, register
from harness.checks.probes import ForwardRecorder, HostSyncCounter, StepRecord, StepRecorder
from harness.checks.wire import WireError, type_name


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
    """The seeded classifier every check trains or evaluates."""
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the student's global RNG state
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(features, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, classes))


def _data(n: int, features: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` seeded samples and labels."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    y = torch.randint(0, classes, (n,), generator=generator)
    return x, y


def _loader(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> DataLoader:
    """A loader in a fixed order over (x, y)."""
    # shuffle=False: a shuffling sampler calls .tolist() once per epoch, which the sync count would see.
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


# ----------------------------------------------------------------------------------------------------
# Reading an observation: the judge validates every value before it computes with it.


def _malformed(what: str) -> NoReturn:
    """Reject an observation that no probe of this module writes (forged or corrupted)."""
    raise WireError(f"malformed observation: {what}")




def _count(value: Any, what: str) -> int:
    """A non-negative int of the observation."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        _malformed(f"{what} is not a count")
    return value


def _flags(value: Any, what: str) -> list[bool]:
    """A list of bools of the observation."""
    if not isinstance(value, list) or not all(isinstance(flag, bool) for flag in value):
        _malformed(f"{what} is not a list of flags")
    return value


def _sync_calls(seen: dict) -> tuple[int, list[str]]:
    """The recorded host-sync count and the names of the calls that synced."""
    calls = seen["sync_calls"]
    if not isinstance(calls, list) or not all(isinstance(name, str) for name in calls):
        _malformed("sync_calls is not a list of names")
    return _count(seen["syncs"], "syncs"), calls


def _tensors(values: Any, like: list[torch.Tensor], what: str, *, none_ok: bool = False) -> list[torch.Tensor | None]:
    """A list of tensors shaped and typed as `like` (None allowed where `none_ok`)."""
    if not isinstance(values, list) or len(values) != len(like):
        _malformed(f"{what} is not a list of {len(like)} tensors")
    for value, reference in zip(values, like):
        if value is None and none_ok:
            continue
        if not isinstance(value, torch.Tensor) or value.shape != reference.shape or value.dtype != reference.dtype:
            _malformed(f"{what} holds a value that is not a {reference.dtype} tensor of shape {tuple(reference.shape)}")
    return values


def _state(value: Any, like: dict[str, torch.Tensor], what: str) -> dict[str, torch.Tensor]:
    """A state dict with the keys, shapes and dtypes of `like`."""
    if not isinstance(value, dict) or set(value) != set(like):
        _malformed(f"{what} is not a state dict of the check's model")
    _tensors([value[k] for k in like], list(like.values()), what)
    return value


def _as_float(value: Any, what: str, where: str) -> float:
    """A returned number as a float; fails "not-a-scalar" for anything else."""
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
        observed=f"{what} is a {type_name(value)}",
        expected=f"{what} is a 0-dim tensor (or a float)",
        cause="the function returns something other than the number asked for",
        where=where,
    )


def _close(a: float, b: float, rtol: float = 1e-4) -> bool:
    if math.isnan(a) or math.isnan(b):  # a diverged run reports NaN: equal only to NaN
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= rtol * max(1.0, abs(b))


# ----------------------------------------------------------------------------------------------------
# References the judges compute.


def _grads_close(grads: list[torch.Tensor | None], reference: list[torch.Tensor], scale: float = 1.0) -> bool:
    pairs = zip(grads, reference, strict=True)
    return all(g is not None and torch.allclose(g, r * scale, rtol=1e-4, atol=1e-6) for g, r in pairs)


def _no_gradients(grads: list[torch.Tensor | None]) -> bool:
    """Whether a step saw no gradient: one is missing, or all of them are zero."""
    return any(g is None for g in grads) or all(not bool(g.any()) for g in grads)


@torch.no_grad()
def _load(model: nn.Module, params: list[torch.Tensor]) -> None:
    for p, value in zip(model.parameters(), params, strict=True):
        p.copy_(value)


def _reference_grads(
    model: nn.Module, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module
) -> tuple[list[torch.Tensor], float]:
    """Gradients and loss of one train-mode batch with `model` (the judge's own) set to `params`."""
    _load(model, params)
    model.train()
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    return [p.grad.detach().clone() for p in model.parameters()], float(loss.detach())


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


def _require_train_mode(training: list[bool], where: str) -> None:
    if not all(training):
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


def _running_mean_inputs(case: Case) -> tuple[list[torch.Tensor], list[int]]:
    """The values and sample counts fed to update(); the hidden ones include a batch of one."""
    generator = torch.Generator().manual_seed(case.seeded(7 if case.hidden else 3))
    counts = [5, 32, 32, 1, 17] if case.hidden else [32, 32, 8]
    return [torch.rand((), generator=generator) * 4 for _ in counts], counts


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
def probe_running_mean(cls: type, *, case: Case) -> dict:
    """Feed one instance the case's values (parts of a graph, as fresh losses are), a second one a single 1.0."""
    values, counts = _running_mean_inputs(case)
    first, second = cls(), cls()
    leaf = torch.ones((), requires_grad=True)
    with HostSyncCounter() as syncs:
        for value, n in zip(values, counts):
            first.update(value * leaf, n)  # a value that is part of a graph, as a fresh loss is
        result = first.compute()
    second.update(torch.tensor(1.0), 1)
    return {"syncs": syncs.count, "sync_calls": sorted(set(syncs.calls)), "result": result, "fresh": second.compute()}


@judges("04-running-mean")
@_one_thread()
def judge_running_mean(seen: dict, *, case: Case) -> str:
    """`cls()` has update(value, n) and compute(): a sample-weighted mean that never syncs or keeps graphs."""
    values, counts = _running_mean_inputs(case)
    weights = torch.tensor(counts, dtype=torch.float32)
    expected = float((torch.stack(values) * weights).sum() / weights.sum())
    unweighted = float(torch.stack(values).mean())
    where = "your RunningMean class: update() and compute()"
    count, calls = _sync_calls(seen)
    result = seen["result"]
    if count:
        fail(
            "host-sync-per-update",
            observed=f"{count} device-to-host copies ({', '.join(calls)}) during "
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
    fresh = _as_float(seen["fresh"], "compute()", where)
    if not _close(fresh, 1.0):
        fail(
            "shared-state",
            observed=f"a new RunningMean that saw one update of 1.0 reports {fresh:.4f}",
            expected="1.0: every instance starts from zero",
            cause="the total and count live on the class (class attributes) or in a shared default "
            "argument, so every instance adds into the same state",
            where="RunningMean.__init__",
        )
    return f"sample-weighted mean over {len(counts)} updates, no host sync, no graph kept"


# ----------------------------------------------------------------------------------------------------
# 04-train-step


def _train_step_inputs(case: Case) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model (fresh, before any step) and the batches train_step is called on, one call each."""
    features, classes, batch_sizes = (7, 5, [12, 20, 9]) if case.hidden else (4, 3, [16, 16])
    model = _model(features, classes, seed=case.seeded(11 if case.hidden else 1))
    batches = [_data(b, features, classes, seed=case.seeded(100 + i)) for i, b in enumerate(batch_sizes)]
    return model, batches


def _fail_step_before_backward(call: int, what: str, where: str) -> NoReturn:
    fail(
        "step-before-backward",
        observed=f"at optimizer.step() of call {call} the gradients were {what}",
        expected="the gradients of the current batch, computed by loss.backward() before step()",
        cause="optimizer.step() runs before loss.backward(), so it applies no gradient (or a stale one; and "
        "from the second step on, backward fails because step changed the weights the graph saved)",
        where=where,
    )


def _stepped_without_gradients(record: StepRecord) -> bool:
    # grad_norm was computed by the step hook, so reading it here is no sync of the student's code
    return any(g is None for g in record.grads) or record.grad_norm == 0.0


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
def probe_train_step(train_step: Callable, *, case: Case) -> dict:
    """Call train_step once per batch; record every optimizer step, forward mode, sync and returned loss."""
    model, batches = _train_step_inputs(case)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9 if case.hidden else 0.0)
    model.eval()  # as evaluate() leaves it: train_step must switch the mode itself
    losses, steps_after_call = [], []
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards, HostSyncCounter() as syncs:
        for call, batch in enumerate(batches, start=1):
            losses.append(train_step(model, batch, loss_fn, optimizer))
            steps_after_call.append(len(steps.records))
            # Stop after a step that saw no gradient: with step() between forward and backward, the next call
            # would fail inside backward (step modified weights the graph saved) and hide the cause.
            if len(steps.records) == call and _stepped_without_gradients(steps.records[-1]):
                break
    return {
        "steps": [{"grads": r.grads, "params": r.params} for r in steps.records],
        "steps_after_call": steps_after_call,
        "training": [r.training for r in forwards.records],
        "syncs": syncs.count,
        "sync_calls": sorted(set(syncs.calls)),
        "losses": losses,
    }


def _step_records(seen: dict, like: list[torch.Tensor]) -> list[tuple[list[torch.Tensor | None], list[torch.Tensor]]]:
    """The recorded (grads, params) of every optimizer step, validated against the model's parameters."""
    if not isinstance(seen["steps"], list) or not all(isinstance(step, dict) for step in seen["steps"]):
        _malformed("steps is not a list of records")
    return [
        (_tensors(step["grads"], like, "a step's grads", none_ok=True),
         _tensors(step["params"], like, "a step's params"))
        for step in seen["steps"]
    ]


@judges("04-train-step")
@_one_thread()
def judge_train_step(seen: dict, *, case: Case) -> str:
    """train_step(model, batch, loss_fn, optimizer) -> detached loss: one correct SGD step per call."""
    model, batches = _train_step_inputs(case)
    loss_fn = nn.CrossEntropyLoss()
    records = _step_records(seen, [p.detach() for p in model.parameters()])
    steps_after_call = seen["steps_after_call"]
    where = "your train_step: the order of zero_grad, forward, backward and step, and model.train()"

    if not isinstance(steps_after_call, list) or len(steps_after_call) > len(batches):
        _malformed("steps_after_call is not a list of one count per call")
    for call, count in enumerate(steps_after_call, start=1):
        if _count(count, "a step count") > len(records):
            _malformed("more steps counted than recorded")
        if count == call and _no_gradients(records[call - 1][0]):
            _fail_step_before_backward(call, "missing (None or all zero)", where)
    if len(records) != len(batches) or len(steps_after_call) != len(batches):
        fail(
            "wrong-step-count",
            observed=f"{len(records)} optimizer.step() calls for {len(batches)} calls of train_step",
            expected="exactly one optimizer.step() per call",
            cause="step() is missing, or called more than once per batch",
            where=where,
        )
    _require_train_mode(_flags(seen["training"], "training"), "the start of train_step: call model.train() there")
    references = [_reference_grads(model, params, x, y, loss_fn) for (_, params), (x, y) in zip(records, batches)]
    for i, ((grads, _), (reference, _), (_, y)) in enumerate(zip(records, references, batches)):
        if _grads_close(grads, reference):
            continue
        if i and _grads_close(grads, references[i - 1][0]):
            _fail_step_before_backward(i + 1, "those of the previous batch", where)
        previous = records[i - 1][0] if i else None
        if previous is not None and None not in previous and _grads_close(
            grads, [g + p for g, p in zip(reference, previous, strict=True)]
        ):
            fail(
                "missing-zero-grad",
                observed=f"the gradients at step {i + 1} are the sum of this batch's gradients and those of step {i}",
                expected="only this batch's gradients",
                cause="your loop never calls optimizer.zero_grad(): backward() adds into .grad, so gradients "
                "pile up across steps",
                where=where,
            )
        if _grads_close(grads, reference, scale=float(len(y))):
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
    count, calls = _sync_calls(seen)
    if count:
        fail(
            "host-sync-per-step",
            observed=f"{count} device-to-host copies ({', '.join(calls)}) in {len(batches)} training steps",
            expected="none: return the loss as a tensor and sync once per epoch or per log interval",
            cause="`loss.item()` or `float(loss)` inside train_step makes a GPU wait for every kernel at "
            "every step",
            where="the return statement of train_step",
        )
    if not isinstance(seen["losses"], list):
        _malformed("losses is not a list")
    for call, (loss, (_, ref_loss)) in enumerate(zip(seen["losses"], references, strict=True), start=1):
        if not isinstance(loss, torch.Tensor):
            fail(
                "not-a-scalar",
                observed=f"train_step returned a {type_name(loss)}",
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
        value = _as_float(loss, "train_step's loss", "the return statement of train_step")
        if not _close(value, ref_loss):
            fail(
                "wrong-loss",
                observed=f"train_step returned {value:.5f} at call {call}",
                expected=f"{ref_loss:.5f}, the batch loss computed before the update",
                cause="the returned value is not the loss of this batch's forward pass",
                where="the return statement of train_step",
            )
    return f"{len(batches)} steps: train mode, fresh gradients of each batch, step after backward, no host sync"


# ----------------------------------------------------------------------------------------------------
# 04-train-epoch


def _train_epoch_inputs(case: Case) -> tuple[nn.Module, DataLoader]:
    """The model (fresh) and the loader of the epoch; the last batch is smaller than the others."""
    features, classes, n, batch = (6, 4, 83, 16) if case.hidden else (4, 3, 70, 16)
    model = _model(features, classes, seed=case.seeded(21 if case.hidden else 2))
    x, y = _data(n, features, classes, seed=case.seeded(5 if case.hidden else 4))
    return model, _loader(x, y, batch)


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
def probe_train_epoch(train_epoch: Callable, *, case: Case) -> dict:
    """Run one epoch; record the parameters at every step, the forward modes, the syncs and the result."""
    model, loader = _train_epoch_inputs(case)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model.eval()
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards, HostSyncCounter() as syncs:
        result = train_epoch(model, loader, nn.CrossEntropyLoss(), optimizer)
    return {
        "params": [r.params for r in steps.records],
        "training": [r.training for r in forwards.records],
        "syncs": syncs.count,
        "sync_calls": sorted(set(syncs.calls)),
        "result": result,
    }


@judges("04-train-epoch")
@_one_thread()
def judge_train_epoch(seen: dict, *, case: Case) -> str:
    """train_epoch(model, loader, loss_fn, optimizer) -> sample-weighted mean loss of one epoch, no per-step sync."""
    model, loader = _train_epoch_inputs(case)
    loss_fn = nn.CrossEntropyLoss()
    batches, n, batch = list(loader), len(loader.dataset), loader.batch_size
    like = [p.detach() for p in model.parameters()]
    if not isinstance(seen["params"], list):
        _malformed("params is not a list")
    params = [_tensors(step, like, "a step's params") for step in seen["params"]]
    where = "your train_epoch"

    if len(params) != len(batches):
        fail(
            "wrong-step-count",
            observed=f"{len(params)} optimizer steps for a loader of {len(batches)} batches",
            expected="one step per batch",
            cause="the loop skips batches, stops early, or steps more than once per batch",
            where=where,
        )
    _require_train_mode(_flags(seen["training"], "training"), "train_step (it calls model.train()) and train_epoch")
    count, calls = _sync_calls(seen)
    if count >= len(batches):
        fail(
            "host-sync-per-step",
            observed=f"{count} device-to-host copies ({', '.join(calls)}) in an epoch of {len(batches)} steps",
            expected="at most a few per epoch: accumulate the loss as a tensor and sync at the end",
            cause="`loss.item()` or `float(loss)` in the loop: on a GPU each one waits for the step to finish",
            where=where,
        )
    batch_losses = [_reference_grads(model, p, bx, by, loss_fn)[1] for p, (bx, by) in zip(params, batches)]
    sizes = [len(by) for _, by in batches]
    expected = sum(loss * size for loss, size in zip(batch_losses, sizes)) / n
    observed = _as_float(seen["result"], "train_epoch's result", where)
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
    return f"{len(batches)} steps, sample-weighted epoch loss, {count} host syncs"


# ----------------------------------------------------------------------------------------------------
# 04-evaluate


def _evaluate_inputs(case: Case) -> tuple[nn.Module, DataLoader]:
    """The model, in train mode with non-trivial BatchNorm statistics, and the loader to evaluate it on."""
    features, classes, n, batch = (5, 6, 77, 10) if case.hidden else (4, 3, 70, 16)
    model = _model(features, classes, seed=case.seeded(31 if case.hidden else 3))
    x, y = _data(n, features, classes, seed=case.seeded(9 if case.hidden else 8))
    # Give BatchNorm non-trivial running statistics, so train and eval mode give different outputs.
    with torch.no_grad():
        model.train()
        model(x * 3 + 1)
    model.train()  # as training leaves it
    return model, _loader(x, y, batch)


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
def probe_evaluate(evaluate: Callable, *, case: Case) -> dict:
    """Evaluate the case's model; record the forward modes, the syncs, the result and the state afterwards."""
    model, loader = _evaluate_inputs(case)
    with ForwardRecorder(model) as forwards, HostSyncCounter() as syncs:
        result = evaluate(model, loader, nn.CrossEntropyLoss())
    return {
        "training": [r.training for r in forwards.records],
        "grad_enabled": [r.grad_enabled for r in forwards.records],
        "syncs": syncs.count,
        "sync_calls": sorted(set(syncs.calls)),
        "state_after": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "result": result,
    }


@judges("04-evaluate")
@_one_thread()
def judge_evaluate(seen: dict, *, case: Case) -> str:
    """evaluate(model, loader, loss_fn) -> {"loss", "accuracy"}: eval mode, no graph, per-sample means."""
    model, loader = _evaluate_inputs(case)
    reference = _reference_eval(model, loader, nn.CrossEntropyLoss())
    n, batch = len(loader.dataset), loader.batch_size
    before = model.state_dict()
    after = _state(seen["state_after"], before, "state_after")
    where = "your evaluate"

    if any(_flags(seen["training"], "training")):
        fail(
            "train-mode-in-eval",
            observed="the model ran in training mode during evaluation",
            expected="model.eval() before the evaluation forward passes",
            cause="without eval(), BatchNorm uses the batch's statistics (and updates its running ones) and "
            "Dropout drops units, so the score is noisy and the model changes while you measure it",
            where=where,
        )
    if any(_flags(seen["grad_enabled"], "grad_enabled")):
        fail(
            "builds-graph",
            observed="the evaluation forward passes ran with autograd recording (torch.is_grad_enabled() was True)",
            expected="no graph: wrap evaluation in `with torch.no_grad():` or `torch.inference_mode()`",
            cause="without no_grad every forward keeps its activations for a backward that never comes: "
            "more memory and time for nothing",
            where=where,
        )
    if any(not torch.equal(before[k], v) for k, v in after.items()):
        fail(
            "changes-weights",
            observed="the model's parameters or buffers changed during evaluate",
            expected="evaluation leaves the model exactly as it was",
            cause="an optimizer step or a training-mode forward inside evaluate",
            where=where,
        )
    count, calls = _sync_calls(seen)
    if count >= len(loader):
        fail(
            "host-sync-per-batch",
            observed=f"{count} device-to-host copies ({', '.join(calls)}) for {len(loader)} batches",
            expected="a constant few (one per returned number), not one per batch",
            cause="`.item()` or `float()` inside the loop; accumulate tensors and convert once at the end",
            where=where,
        )
    result = seen["result"]
    if not isinstance(result, dict) or not {"loss", "accuracy"} <= set(result):
        fail(
            "wrong-return",
            observed=f"evaluate returned {type_name(result)}"
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
            observed=f"loss = {loss:.3f}, the sum of the per-sample losses",
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
    return f"eval mode, no graph, mean loss and accuracy over {n} samples, {count} host syncs"


# ----------------------------------------------------------------------------------------------------
# 04-fit

_VAL_SIZE = 96  # the whole validation set is one batch: a forward of this size is an evaluation


@dataclass
class _ValSnapshots:
    """Copies the model's state each time it sees the validation batch (the whole val set, one batch)."""

    model: nn.Module
    states: list[dict[str, torch.Tensor]] = field(default_factory=list)

    def __enter__(self) -> "_ValSnapshots":
        self._handle = self.model.register_forward_pre_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _record(self, module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() and inputs[0].shape[0] == _VAL_SIZE:
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
    x_val = torch.randn(_VAL_SIZE, features, generator=generator)
    y_val = (x_val @ direction > 0).long()
    flipped = torch.rand(_VAL_SIZE, generator=generator) < 0.2
    y_val[flipped] = 1 - y_val[flipped]
    return _model(features, 2, seed), _loader(x_train, y_train, 16), _loader(x_val, y_val, _VAL_SIZE)


def _fit_runs(case: Case) -> list[dict[str, Any]]:
    """The fits a check runs: problem seed and size, and the early-stopping settings."""
    if case.hidden:
        runs = [dict(seed=13, features=5, patience=3, min_delta=0.0, max_epochs=14),
                dict(seed=14, features=3, patience=2, min_delta=1e-3, max_epochs=12),
                dict(seed=15, features=4, patience=1, min_delta=10.0, max_epochs=8)]
    else:
        runs = [dict(seed=3, features=4, patience=2, min_delta=0.0, max_epochs=12),
                dict(seed=4, features=4, patience=2, min_delta=0.01, max_epochs=12)]
    return [run | {"seed": case.seeded(run["seed"])} for run in runs]


def _history_data(history: Any) -> Any:
    """The returned history as data: a DataFrame as its rows, NumPy numbers as tensors (the wire has no NumPy)."""
    rows = history.to_dict("records") if isinstance(history, pd.DataFrame) else history
    if not isinstance(rows, (list, tuple)):
        return rows

    def plain(value: Any) -> Any:
        numeric = isinstance(value, (np.generic, np.ndarray)) and value.dtype.kind in "biuf"
        return torch.as_tensor(value) if numeric else value

    return [{k: plain(v) for k, v in row.items()} if isinstance(row, dict) else row for row in rows]


def _observe_fit(fit: Callable, *, seed: int, features: int, patience: int, min_delta: float, max_epochs: int) -> dict:
    """Run one fit; record the state at every validation, every forward, the syncs, the history, the end state."""
    model, train_loader, val_loader = _fit_problem(seed, features)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
    with _ValSnapshots(model) as snapshots, ForwardRecorder(model) as forwards, HostSyncCounter() as syncs:
        history = fit(
            model, train_loader, val_loader, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer,
            max_epochs=max_epochs, patience=patience, min_delta=min_delta,
        )
    return {
        "snapshots": snapshots.states,
        "forwards": [{"training": r.training, "grad_enabled": r.grad_enabled, "batch_size": r.batch_size}
                     for r in forwards.records],
        "syncs": syncs.count,
        "history": _history_data(history),
        "final": {k: v.detach().clone() for k, v in model.state_dict().items()},
    }


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
def probe_fit(fit: Callable, *, case: Case) -> dict:
    """Run fit on each of the case's problems and record what each run did."""
    return {"runs": [_observe_fit(fit, **run) for run in _fit_runs(case)]}


def _history_frame(history: Any) -> pd.DataFrame:
    """The history as a frame of one row per epoch; fails "wrong-history" without train_loss and val_loss."""
    if not isinstance(history, (list, tuple)) or not all(isinstance(row, dict) for row in history):
        fail(
            "wrong-history",
            observed=f"fit returned a {type_name(history)}"
            + (" whose rows are not all dicts" if isinstance(history, (list, tuple)) else ""),
            expected="one row (a dict) per epoch with at least train_loss and val_loss",
            cause="the history is not collected as a list of per-epoch dicts",
            where="the history your fit returns",
        )
    frame = pd.DataFrame(list(history))
    missing = {"train_loss", "val_loss"} - set(frame.columns)
    if missing:
        fail(
            "wrong-history",
            observed=f"the history has columns {sorted(map(str, frame.columns))}",
            expected="one row (a dict) per epoch with at least train_loss and val_loss",
            cause=f"missing {sorted(missing)}",
            where="the history your fit returns",
        )
    return frame


def _history_column(frame: pd.DataFrame, name: str) -> list[float]:
    """A history column as floats; fails "wrong-history" on a value that is not a number."""
    values = []
    for value in frame[name]:
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            values.append(float(value))
        elif isinstance(value, (int, float)):
            values.append(float(value))
        else:
            fail(
                "wrong-history",
                observed=f"{name} in the history holds a {type_name(value)}",
                expected=f"{name} as a number in every row",
                cause="the value logged is not converted to a number (float(...))",
                where="the history your fit returns",
            )
    return values


def _forwards(value: Any) -> list[dict[str, Any]]:
    """The recorded forward passes of a fit, validated."""
    if not isinstance(value, list) or not all(
        isinstance(r, dict) and isinstance(r.get("training"), bool) and isinstance(r.get("grad_enabled"), bool)
        and (r.get("batch_size") is None or isinstance(r.get("batch_size"), int))
        for r in value
    ):
        _malformed("forwards is not a list of forward records")
    return value


def _judge_fit(run: dict, *, seed: int, features: int, patience: int, min_delta: float, max_epochs: int) -> str:
    """Decide one fit run from its observation: the stop epoch, the history and the weights left in the model."""
    model, _, val_loader = _fit_problem(seed, features)
    loss_fn = nn.CrossEntropyLoss()
    like = model.state_dict()
    where = "your fit: the early-stopping bookkeeping at the end of each epoch"
    if not isinstance(run, dict) or not isinstance(run.get("snapshots"), list):
        _malformed("a run is not a record of a fit")
    frame = _history_frame(run["history"])
    # Training forwards: the ones autograd records that are not the validation batch (an evaluation of
    # the training data under no_grad is allowed and is not counted).
    training = [r["training"] for r in _forwards(run["forwards"]) if r["batch_size"] != _VAL_SIZE and r["grad_enabled"]]
    _require_train_mode(training, "the start of each epoch's training (train_step calls model.train())")
    snapshots = [_state(state, like, "a validation snapshot") for state in run["snapshots"]]
    epochs, steps = len(snapshots), len(training)
    if epochs == 0:
        fail(
            "no-validation",
            observed="the model never saw the validation batch",
            expected="evaluate(model, val_loader, loss_fn) after each training epoch",
            cause="fit does not evaluate on val_loader",
            where=where,
        )
    syncs = _count(run["syncs"], "syncs")
    if syncs >= steps:
        fail(
            "host-sync-per-step",
            observed=f"{syncs} device-to-host copies in {steps} training steps",
            expected="a few per epoch (the numbers you log and the early-stopping comparison)",
            cause="a metric converted with .item()/float() at every step",
            where="the training loop inside fit",
        )
    val_losses = []
    for state in snapshots:
        model.load_state_dict(state)
        val_losses.append(_reference_eval(model, val_loader, loss_fn)["loss"])
    if len(frame) != epochs:
        fail(
            "wrong-history",
            observed=f"{len(frame)} rows in the history for {epochs} epochs run",
            expected="one row per epoch",
            cause="rows appended conditionally or more than once per epoch",
            where="the history your fit returns",
        )
    reported = _history_column(frame, "val_loss")
    if not all(_close(a, b, rtol=1e-3) for a, b in zip(reported, val_losses, strict=True)):
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
        train_losses = _history_column(frame, "train_loss")
        train_stop, _, train_stopped = _early_stop_epochs(train_losses, patience, min_delta)
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
    final = _state(run["final"], like, "the final state")
    if any(not torch.equal(final[k], v) for k, v in snapshots[best_epoch].items()):
        fail(
            "best-weights-not-restored",
            observed=f"after fit the model does not hold the weights of its best epoch ({best_epoch + 1})",
            expected="the state of the epoch with the lowest val loss, restored at the end",
            cause="keep a copy of the best state (copy.deepcopy(model.state_dict())) when val loss improves and "
            "load_state_dict() it before returning; a state_dict() without a copy changes as training goes on",
            where=where,
        )
    return f"stopped after {epochs} epochs, best epoch {best_epoch + 1}"


@judges("04-fit")
@_one_thread()
def judge_fit(seen: dict, *, case: Case) -> str:
    """fit(...) early-stops on the val loss with patience/min_delta and leaves the best weights in the model."""
    runs = _fit_runs(case)
    if not isinstance(seen["runs"], list):
        _malformed("runs is not a list")
    return "; ".join(_judge_fit(run, **settings) for run, settings in zip(seen["runs"], runs, strict=True))
