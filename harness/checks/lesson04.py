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

from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.failure import Hints, Requirement, fail, raised_failure
from harness.contract.instruments import (
    ForwardRecorder,
    HostSyncCounter,
    StepRecord,
    StepRecorder,
)
from harness.contract.registry import judges, register
from harness.contract.wire import WireError, type_name


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


def _syncs(count: int) -> str:
    """"1 host sync", "3 host syncs": the count for a pass message."""
    return f"{count} host sync{'' if count == 1 else 's'}"


def _copies(count: int) -> str:
    """"1 device-to-host copy", "3 device-to-host copies": the count for a failure message."""
    return f"{count} device-to-host cop{'y' if count == 1 else 'ies'}"


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
    for value, reference in zip(values, like, strict=True):
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
            cause="the model came in eval mode (as evaluate() leaves it) and nothing called model.train() before "
            "the training forward: BatchNorm then normalises with running statistics and Dropout does nothing "
            "while you train",
            where=where,
        )


# ----------------------------------------------------------------------------------------------------
# 04-running-mean


def _running_mean_inputs(case: Case) -> tuple[list[torch.Tensor], list[int]]:
    """The values and sample counts fed to update(); both end with a smaller batch and hold a batch of one."""
    generator = torch.Generator().manual_seed(case.seeded(7 if case.hidden else 3))
    counts = [5, 32, 32, 1, 17] if case.hidden else [32, 32, 1, 8]
    return [torch.rand((), generator=generator) * 4 for _ in counts], counts


_META = torch.device("meta")  # a device no check expects: code that ignores the device shows it on any machine


@register(
    "04-running-mean",
    hints=Hints(
        nudge="Keep a running *sum* of value * n and a running count, both as tensors; divide only in compute().",
        concept="A device-side metric never leaves the device until you ask for it: accumulate value * n "
        "(detached) and n, and divide once, in compute(). Each instance owns its state.",
        solution="`self.total = self.total + value.detach() * n` and `self.count += n` in update (state set in "
        "__init__: `self.total = torch.zeros(())`, `self.count = 0`); compute() returns `self.total / self.count`.",
        section="3. Metrics without a sync at every step",
    ),
    requires={
        "host-sync-per-update": Requirement(
            "never syncs with the host (no .item(), float() or comparison on a tensor)",
            hint="Which of your lines turns a tensor into a Python number? The total can stay a tensor."),
        "keeps-graph": Requirement(
            "does not keep the graph of the values it is given (stores value.detach())",
            hint="The values you are given are live losses. What does adding one into your total keep alive?"),
        "unweighted-mean": Requirement(
            "weights each update by its number of samples n",
            hint="Your mean treats a batch of 1 sample like a batch of 32. What should each value count for?"),
        "wrong-mean": Requirement(
            "compute() is sum(value * n) / sum(n) over every update",
            hint="Work the mean out by hand for two updates (1.0 over 2 samples, 4.0 over 1) and compare."),
        "shared-state": Requirement(
            "keeps its state per instance (set in __init__)",
            hint="Make two RunningMean objects and update one: does the other change? Where does the state live?"),
        "not-a-scalar": Requirement(
            "compute() returns a single number, a 0-dim tensor",
            hint="What shape does compute() return? The mean over all samples is one number."),
        "not-on-device": Requirement(
            "compute() returns a tensor on the device of the values (the total follows them: out-of-place add)",
            hint="Your total starts on the CPU. Does `+=` move it to the device of the value, or keep it where it is?"),
    },
)
@_one_thread()
def probe_running_mean(cls: type, *, case: Case) -> dict:
    """Feed one instance the case's values (parts of a graph, as fresh losses are), a second one a single 1.0,
    and a third one values on a device it did not expect (meta: it holds no data, so it cannot be read)."""
    values, counts = _running_mean_inputs(case)
    first, second = cls(), cls()
    leaf = torch.ones((), requires_grad=True)
    with HostSyncCounter() as syncs:
        for value, n in zip(values, counts, strict=True):
            first.update(value * leaf, n)  # a value that is part of a graph, as a fresh loss is
        result = first.compute()
    second.update(torch.tensor(1.0), 1)
    return {"syncs": syncs.count, "sync_calls": sorted(set(syncs.calls)), "result": result, "fresh": second.compute(),
            "other_device": _result_device(lambda: _fed(cls(), values, counts, _META).compute())}


def _fed(meter: Any, values: list[torch.Tensor], counts: list[int], device: torch.device) -> Any:
    """`meter` after one update per value, each value moved to `device`."""
    for value, n in zip(values, counts, strict=True):
        meter.update(value.to(device), n)
    return meter


def _result_device(run: Callable[[], Any]) -> dict[str, str]:
    """The device of the tensor `run` returns, or what it raised (explained) or returned instead."""
    try:
        result = run()
    except Exception as error:  # the judge reports it after the failures that explain it better
        return {"raised": explain(error)[:2000]}
    return {"device": f"a tensor on {result.device}" if isinstance(result, torch.Tensor) else f"a {type_name(result)}"}


def _require_device(seen: Any, task: str, what: str, cause: str, where: str) -> None:
    """Fail "not-on-device" unless the run on the meta device left `what` on meta; report what it raised."""
    if not isinstance(seen, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in seen.items()):
        _malformed("other_device is not a record of a run")
    if "raised" in seen:
        raise raised_failure(task, f"{seen['raised']}\n  (on a device your code did not expect: meta, "
                             "which holds no values and cannot be read on the host)")
    if seen.get("device") != f"a tensor on {_META}":
        fail(
            "not-on-device",
            observed=f"with inputs on another device (meta), {what} returned {seen.get('device')}",
            expected=f"{what} returns a tensor on the device of its inputs (meta here; cuda on a GPU)",
            cause=cause,
            where=where,
        )


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
            observed=f"{_copies(count)} ({', '.join(calls)}) during "
            f"{len(counts)} updates and one compute()",
            expected="no host sync at all: the running state stays a tensor on the device",
            cause=f"a conversion to a Python value ({', '.join(calls)}) inside update() or compute()",
            where=where,
        )
    if isinstance(result, torch.Tensor) and result.requires_grad:
        fail(
            "keeps-graph",
            observed="compute() returns a tensor that requires grad: the running total holds the graph of every batch",
            expected="a plain tensor: update() stores `value.detach()`",
            cause="update() adds the value without .detach(): the total then chains every batch's graph (and "
            "its activations), so memory grows with every step",
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
    _require_device(seen["other_device"], "04-running-mean", "compute()",
                    "the total stays on the CPU where __init__ made it: either it is updated in place "
                    "(`self.total += ...` writes into the CPU tensor, and fails on a GPU), or it is created or moved "
                    "to a fixed device; `self.total = self.total + ...` follows the value's device", where)
    return f"sample-weighted mean over {len(counts)} updates, no host sync, no graph kept, stays on the values' device"


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
        cause="optimizer.step() runs before loss.backward(), so it applies no gradient or a stale one (from the "
        "second step on, backward then fails because step changed the weights the graph saved); or the gradients "
        "are cleared (zero_grad) between backward() and step()",
        where=where,
    )


def _stepped_without_gradients(record: StepRecord) -> bool:
    # grad_norm was computed by the step hook, so reading it here is no sync of the student's code
    return any(g is None for g in record.grads) or record.grad_norm == 0.0


@register(
    "04-train-step",
    hints=Hints(
        nudge="Five lines, in this order: train mode, clear gradients, forward and loss, backward, step. Return "
        "the loss without turning it into a Python number.",
        concept="backward() adds into .grad, step() applies what .grad holds, and the mode decides how BatchNorm "
        "and Dropout behave: each line has its place. The batch goes where the model's parameters are.",
        solution="`x, y = (t.to(next(model.parameters()).device) for t in batch); model.train(); "
        "optimizer.zero_grad(set_to_none=True); loss = loss_fn(model(x), y); loss.backward(); optimizer.step(); "
        "return loss.detach()`",
        section="1. The training step",
    ),
    requires={
        "eval-mode-in-training": Requirement(
            "puts the model in training mode itself (the check hands it over in eval mode, as evaluate leaves it)",
            hint="The model you are given may still be in eval mode. Which call switches BatchNorm and Dropout "
            "back to training behaviour?"),
        "missing-zero-grad": Requirement(
            "each step's gradients are its own (cleared before backward)",
            hint="Step 2's gradients came out as steps 1 and 2 added: what clears .grad between steps?"),
        "step-before-backward": Requirement(
            "optimizer.step() applies this batch's gradients: it runs after loss.backward(), nothing clearing "
            "them in between",
            hint="At the moment of step(), what does .grad hold? Follow the order of your lines."),
        "wrong-step-count": Requirement(
            "exactly one optimizer.step() per call",
            hint="Count the optimizer.step() calls one train_step makes (including those of functions it calls)."),
        "sum-not-mean": Requirement(
            "the gradients are those of loss_fn as given (a mean over the batch)",
            hint="Your gradients scale with the batch size. Which reduction does the given loss_fn use?"),
        "wrong-gradients": Requirement(
            "the gradients are those of loss_fn(model(x), y) on the current batch, nothing added",
            hint="Compute loss_fn(model(x), y) exactly as given: no extra terms, no changed batch, one backward."),
        "host-sync-per-step": Requirement(
            "no host sync (.item(), float(), print of a tensor) inside train_step",
            hint="Which line copies a value to the host? Return the tensor; the caller syncs once per epoch."),
        "not-a-scalar": Requirement(
            "returns the loss as a 0-dim tensor",
            hint="What type does your train_step return? The caller wants the loss tensor itself."),
        "returns-graph": Requirement(
            "returns the loss detached from the graph",
            hint="The loss you return still carries its graph. Which method gives the same value without it?"),
        "wrong-loss": Requirement(
            "returns this batch's loss, computed before the update",
            hint="Which forward pass does your returned value come from: the one before step() or another?"),
        "grads-zeroed-not-freed": Requirement(
            "clears the gradients with zero_grad(set_to_none=True): freed, not filled with zeros",
            hint="At backward, .grad held tensors of zeros. Which argument of zero_grad frees them instead?"),
        "batch-not-on-device": Requirement(
            "moves the batch to the device of the model's parameters",
            hint="Your model may live on a GPU while the loader yields CPU tensors. Where do x and y go first?"),
    },
)
@_one_thread()
def probe_train_step(train_step: Callable, *, case: Case) -> dict:
    """Call train_step once per batch; record every optimizer step, what .grad held at every backward, forward
    mode, sync and returned loss; then one call with the model on a device it did not expect (meta)."""
    model, batches = _train_step_inputs(case)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.eval()  # as evaluate() leaves it: train_step must switch the mode itself
    losses, steps_after_call = [], []
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards, _GradsAtBackward(model) as held, \
            HostSyncCounter() as syncs:
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
        "grads_at_backward": held.states,
        "syncs": syncs.count,
        "sync_calls": sorted(set(syncs.calls)),
        "losses": losses,
        "other_device": _step_elsewhere(train_step, case),
    }


@dataclass
class _GradsAtBackward:
    """What each parameter's .grad held when backward reached it, before adding into it: "none", "zeros" or
    "values" (a tensor hook on a leaf runs before the gradient is accumulated)."""

    model: nn.Module
    states: list[str] = field(default_factory=list)

    def __enter__(self) -> "_GradsAtBackward":
        self._handles = [p.register_hook(self._hook(p)) for p in self.model.parameters()]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def _hook(self, parameter: nn.Parameter) -> Callable[[torch.Tensor], None]:
        def record(grad: torch.Tensor) -> None:
            held = parameter.grad
            with torch._C.DisableTorchFunction():  # the check's own read: the sync counter must not see it
                self.states.append("none" if held is None else "values" if bool(held.detach().any()) else "zeros")
        return record


def _step_elsewhere(train_step: Callable, case: Case) -> dict[str, str]:
    """One call with the model on the meta device and the batch on the CPU: the device the forward got."""
    model, batches = _train_step_inputs(case)
    model = model.to(_META)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    devices: list[str] = []
    handle = model.register_forward_pre_hook(
        lambda module, inputs: devices.append(str(inputs[0].device) if inputs and isinstance(inputs[0], torch.Tensor)
                                              else "no tensor"))
    try:
        train_step(model, batches[0], nn.CrossEntropyLoss(), optimizer)
    except Exception as error:  # a batch left on the CPU fails in the forward: the input device says why
        return {"input": devices[0] if devices else "", "raised": explain(error)[:2000]}
    finally:
        handle.remove()
    return {"input": devices[0] if devices else ""}


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
    references = [_reference_grads(model, params, x, y, loss_fn)
                  for (_, params), (x, y) in zip(records, batches, strict=True)]
    for i, ((grads, _), (reference, _), (_, y)) in enumerate(zip(records, references, batches, strict=True)):
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
                cause="nothing cleared .grad between the two steps: zero_grad is missing, or not reached on every "
                "call, or clears another model's gradients; backward() adds into .grad, so gradients pile up",
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
            observed=f"{_copies(count)} ({', '.join(calls)}) in {len(batches)} training steps",
            expected="none: return the loss as a tensor and sync once per epoch or per log interval",
            cause=f"a conversion to a Python value ({', '.join(calls)}) inside train_step: on a GPU it waits "
            "for every queued kernel, at every step",
            where="the line of train_step that makes that call (often the return statement)",
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
    held = seen["grads_at_backward"]
    if not isinstance(held, list) or not set(held) <= {"none", "zeros", "values"}:
        _malformed("grads_at_backward is not a list of states")
    if "zeros" in held:
        fail(
            "grads-zeroed-not-freed",
            observed="when backward() reached the parameters, their .grad held tensors of zeros",
            expected="no tensor at all (None): the gradients are freed between steps",
            cause="zero_grad(set_to_none=False), or a loop of p.grad.zero_(), fills the old tensors with zeros "
            "instead of freeing them",
            where="the line of train_step that clears the gradients",
        )
    _require_batch_on_device(seen["other_device"])
    return f"{len(batches)} steps: train mode, fresh gradients of each batch, step after backward, no host sync, " \
        "batch on the model's device"


def _require_batch_on_device(seen: Any) -> None:
    """Fail "batch-not-on-device" unless the call with the model on meta fed the forward a meta batch."""
    if not isinstance(seen, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in seen.items()):
        _malformed("other_device is not a record of a run")
    if seen.get("input") not in ("", str(_META)):
        fail(
            "batch-not-on-device",
            observed=f"with the model on another device (meta) and the batch on the CPU, the forward pass got "
            f"a batch on {seen['input']}",
            expected="the batch on the device of the model's parameters (meta here; cuda on a GPU)",
            cause="the batch is passed as the loader gives it, or moved to a fixed or global device, not to "
            "the model's (`next(model.parameters()).device`)",
            where="the first lines of train_step, where x and y are taken from the batch",
        )
    if "raised" in seen:
        raise raised_failure("04-train-step", f"{seen['raised']}\n  (with the model on a device your code did "
                             "not expect: meta, which holds no values and cannot be read on the host)")



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
    hints=Hints(
        nudge="Loop over the loader, call your train_step, and feed each returned loss to a RunningMean with the "
        "batch's number of samples.",
        concept="An epoch's loss is a mean over samples, not over batches, and it stays on the device until the "
        "caller asks for it: one sync per epoch at most.",
        solution="`meter = RunningMean()`, then `for x, y in loader: meter.update(train_step(model, (x, y), "
        "loss_fn, optimizer), len(y))`, then `return meter.compute()`",
        section="3. Metrics without a sync at every step",
    ),
    requires={
        "wrong-step-count": Requirement(
            "one train_step (one optimizer step) per batch of the loader, every batch",
            hint="Count the batches your loop trains on: does it skip one (the smaller last one?) or step twice?"),
        "eval-mode-in-training": Requirement(
            "trains in training mode (through train_step, which calls model.train())",
            hint="The model arrives in eval mode. Does your loop go through train_step, which switches it?"),
        "host-sync-per-step": Requirement(
            "no host sync inside the loop",
            hint="Which line of the loop turns the loss into a Python number? Keep it a tensor until the end."),
        "unweighted-mean": Requirement(
            "the mean is weighted by the number of samples of each batch",
            hint="The last batch is smaller than the others. How much should its loss count in the mean?"),
        "sum-not-mean": Requirement(
            "returns a mean over the samples, not their sum",
            hint="Your number grows with the size of the dataset. What is missing to turn a total into a mean?"),
        "wrong-loss": Requirement(
            "returns the sample-weighted mean of the step losses of the epoch",
            hint="Feed every step's loss (with its batch size) into the mean, not only the last one."),
        "not-a-tensor": Requirement(
            "returns the epoch loss as a tensor (a 0-dim tensor, left on the device)",
            hint="Your train_epoch returns a Python number. Where is it converted, and who should do that?"),
    },
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
            observed=f"{_copies(count)} ({', '.join(calls)}) in an epoch of {len(batches)} steps",
            expected="at most a few per epoch: accumulate the loss as a tensor and sync at the end",
            cause=f"a conversion to a Python value ({', '.join(calls)}) inside the loop: on a GPU each one waits "
            "for the step to finish",
            where=where,
        )
    batch_losses = [_reference_grads(model, p, bx, by, loss_fn)[1] for p, (bx, by) in zip(params, batches, strict=True)]
    sizes = [len(by) for _, by in batches]
    expected = sum(loss * size for loss, size in zip(batch_losses, sizes, strict=True)) / n
    observed = _as_float(seen["result"], "train_epoch's result", where)
    if not isinstance(seen["result"], torch.Tensor):
        fail(
            "not-a-tensor",
            observed=f"train_epoch returned a {type_name(seen['result'])} ({observed:.5f})",
            expected="a 0-dim tensor, still on the device: the caller decides when to sync (fit does, once per epoch)",
            cause="the result is converted at the end (float(...), .item() or .tolist()), or accumulated as a "
            "Python number",
            where="the return statement of train_epoch",
        )
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
    return f"{len(batches)} steps, sample-weighted epoch loss, {_syncs(count)}"


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
    hints=Hints(
        nudge="Evaluation needs two switches (one for layers like BatchNorm and Dropout, one for autograd) and a "
        "loss averaged over samples, not batches.",
        concept="model.eval() changes what layers do; torch.no_grad() stops autograd from recording. Both are "
        "needed, and the scores are means over samples, accumulated as tensors and read once at the end.",
        solution="`model.eval()` and `with torch.no_grad():` around the loop; accumulate `loss_fn(out, y) * "
        "len(y)` and `(out.argmax(1) == y).sum()` as tensors; return `{\"loss\": float(total / n), "
        "\"accuracy\": float(correct / n)}`",
        section="4. Evaluation",
    ),
    requires={
        "train-mode-in-eval": Requirement(
            "evaluates in eval mode (model.eval())",
            hint="The model arrives in training mode. What does BatchNorm do with your validation batches then?"),
        "builds-graph": Requirement(
            "builds no graph (torch.no_grad() or torch.inference_mode())",
            hint="Your evaluation outputs carry a grad_fn. Which context stops autograd from recording?"),
        "changes-weights": Requirement(
            "leaves the model's parameters and buffers as they were",
            hint="Compare model.state_dict() before and after your evaluate: what changes it?"),
        "host-sync-per-batch": Requirement(
            "a constant number of host syncs, not one per batch",
            hint="Which line inside the loop reads a value on the host? Accumulate tensors, convert at the end."),
        "wrong-return": Requirement(
            'returns a dict with keys "loss" and "accuracy"',
            hint="Look at what your return statement builds: the check wants a dict, by name."),
        "not-a-scalar": Requirement(
            "each score is a single number",
            hint="Your loss or accuracy has more than one element. Which reduction is missing?"),
        "sum-not-mean": Requirement(
            "the loss is a mean over samples, not their sum",
            hint="Your loss grows with the size of the loader. What is the total divided by?"),
        "unweighted-mean": Requirement(
            "the loss is weighted by the number of samples of each batch",
            hint="The last batch is smaller. Is your loss a mean of batch means?"),
        "wrong-loss": Requirement(
            "the loss is the mean of loss_fn over every sample of the loader",
            hint="Evaluate the loss of every batch, each weighted by its size, and divide by the total count."),
        "count-not-fraction": Requirement(
            "the accuracy is a fraction in [0, 1]",
            hint="Your accuracy is larger than 1. What is the number of correct predictions divided by?"),
        "wrong-accuracy": Requirement(
            "the accuracy is the fraction of argmax predictions equal to the labels, over all samples",
            hint="Which class does the model predict for a row of logits? Count those equal to y, over every batch."),
    },
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
            cause="evaluate changes the model: an optimizer step, an in-place change of a parameter or buffer, or "
            "a load_state_dict inside it",
            where=where,
        )
    count, calls = _sync_calls(seen)
    if count >= len(loader):
        fail(
            "host-sync-per-batch",
            observed=f"{_copies(count)} ({', '.join(calls)}) for {len(loader)} batches",
            expected="a constant few (one per returned number), not one per batch",
            cause=f"a conversion to a Python value ({', '.join(calls)}) inside the loop; accumulate tensors and "
            "convert once at the end",
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
    return f"eval mode, no graph, mean loss and accuracy over {n} samples, {_syncs(count)}"


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
                dict(seed=4, features=4, patience=3, min_delta=0.01, max_epochs=12)]
    return [run | {"seed": case.seeded(run["seed"])} for run in runs]


def _history_data(history: Any) -> Any:
    """The returned history as data: a DataFrame as its rows, NumPy scalars as Python numbers and NumPy arrays as
    tensors (the wire has no NumPy)."""
    rows = history.to_dict("records") if isinstance(history, pd.DataFrame) else history
    if not isinstance(rows, (list, tuple)):
        return rows

    def plain(value: Any) -> Any:
        if isinstance(value, np.generic) and value.dtype.kind in "biuf":
            return value.item()  # a host number already: no device involved
        numeric = isinstance(value, np.ndarray) and value.dtype.kind in "biuf"
        return torch.as_tensor(value) if numeric else value

    return [{k: plain(v) for k, v in row.items()} if isinstance(row, dict) else row for row in rows]


def _observe_fit(fit: Callable, *, seed: int, features: int, patience: int, min_delta: float, max_epochs: int) -> dict:
    """Run one fit; record the state at every validation, every forward, the syncs, the history, the end state."""
    model, train_loader, val_loader = _fit_problem(seed, features)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
    with _ValSnapshots(model) as snapshots, ForwardRecorder(model) as forwards, StepRecorder(optimizer) as steps, \
            HostSyncCounter() as syncs:
        history = fit(
            model, train_loader, val_loader, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer,
            max_epochs=max_epochs, patience=patience, min_delta=min_delta,
        )
    return {
        "snapshots": snapshots.states,
        "forwards": [{"training": r.training, "grad_enabled": r.grad_enabled, "batch_size": r.batch_size}
                     for r in forwards.records],
        "syncs": syncs.count,
        "step_params": [r.params for r in steps.records],
        "history": _history_data(history),
        "final": {k: v.detach().clone() for k, v in model.state_dict().items()},
    }


@register(
    "04-fit",
    hints=Hints(
        nudge="Track the best validation loss so far and a copy of the weights then; count epochs since the last "
        "improvement (by more than min_delta) and stop when the count reaches patience.",
        concept="Early stopping watches the validation loss: an epoch improves when it beats the best by more "
        "than min_delta; patience epochs in a row without improvement stop the run; the best epoch's weights "
        "(a deep copy) are loaded back at the end.",
        solution="After evaluate: `if val < best - min_delta: best, waited, best_state = val, 0, "
        "copy.deepcopy(model.state_dict())` else `waited += 1; if waited >= patience: break`; after the loop "
        "`model.load_state_dict(best_state)`",
        section="5. `fit` with early stopping",
    ),
    requires={
        "eval-mode-in-training": Requirement(
            "trains each epoch in training mode (after evaluate left the model in eval mode)",
            hint="evaluate() leaves the model in eval mode. What switches it back before the next epoch trains?"),
        "no-validation": Requirement(
            "evaluates on val_loader after each epoch",
            hint="Where does your fit look at val_loader? Early stopping needs its loss every epoch."),
        "host-sync-per-step": Requirement(
            "no host sync per training step (a few per epoch)",
            hint="Which line of your epoch converts a loss to a Python number at every step?"),
        "wrong-step-count": Requirement(
            "each epoch trains once over the whole train_loader",
            hint="Count the optimizer steps per epoch: one per batch of train_loader, one pass per epoch."),
        "wrong-history": Requirement(
            "returns one row per epoch with epoch, train_loss, val_loss and val_accuracy as floats, "
            "matching the epoch's training and validation",
            hint="Print your history: one dict per epoch, the four keys, plain floats, values of that epoch?"),
        "early-stop-on-train-loss": Requirement(
            "early stopping watches the validation loss",
            hint="Which loss does your improvement test compare? The training loss keeps falling while you overfit."),
        "wrong-stop-epoch": Requirement(
            "stops after patience epochs in a row without an improvement by more than min_delta (max_epochs "
            "at most)",
            hint="Replay your rule by hand on the val losses of the message: when is the counter reset, when "
            "does it stop?"),
        "best-weights-not-restored": Requirement(
            "leaves the weights of the best epoch in the model (a deep copy, loaded back at the end)",
            hint="After fit, which epoch's weights does your model hold? Is your saved copy still that epoch's?"),
    },
)
@_one_thread()
def probe_fit(fit: Callable, *, case: Case) -> dict:
    """Run fit on each of the case's problems and record what each run did."""
    return {"runs": [_observe_fit(fit, **run) for run in _fit_runs(case)]}


_HISTORY_KEYS = ("epoch", "train_loss", "val_loss", "val_accuracy")


def _history_frame(history: Any) -> pd.DataFrame:
    """The history as a frame of one row per epoch; fails "wrong-history" without the four columns of the text."""
    if not isinstance(history, (list, tuple)) or not all(isinstance(row, dict) for row in history):
        fail(
            "wrong-history",
            observed=f"fit returned a {type_name(history)}"
            + (" whose rows are not all dicts" if isinstance(history, (list, tuple)) else ""),
            expected=f"one row (a dict) per epoch with the keys {', '.join(_HISTORY_KEYS)}",
            cause="the history is not collected as a list of per-epoch dicts",
            where="the history your fit returns",
        )
    frame = pd.DataFrame(list(history))
    missing = [key for key in _HISTORY_KEYS if key not in frame.columns]
    if missing:
        fail(
            "wrong-history",
            observed=f"the history has columns {sorted(map(str, frame.columns))}",
            expected=f"one row (a dict) per epoch with the keys {', '.join(_HISTORY_KEYS)}",
            cause=f"the rows miss {missing}",
            where="the history your fit returns",
        )
    return frame


def _history_column(frame: pd.DataFrame, name: str) -> list[float]:
    """A history column as floats; fails "wrong-history" on a value that is not a Python number."""
    values = []
    for value in frame[name]:
        if isinstance(value, torch.Tensor):
            fail(
                "wrong-history",
                observed=f"{name} in the history holds a tensor of shape {tuple(value.shape)}",
                expected=f"{name} as a float in every row (the text asks for floats)",
                cause="the value is logged as the tensor train_epoch or evaluate returned: a tensor in the history "
                "keeps device memory alive and prints as tensor(...); convert it with float(...), once per epoch",
                where="the history your fit returns",
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
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


def _require_history_of_the_epochs(frame: pd.DataFrame, step_params: Any, model: nn.Module, train_loader: DataLoader,
                                   accuracies: list[float]) -> None:
    """Fail unless each epoch trained once over train_loader, and its row holds that epoch's mean training loss
    (recomputed at the recorded parameters of every step) and validation accuracy (`accuracies`, recomputed)."""
    loss_fn, batches, epochs = nn.CrossEntropyLoss(), list(train_loader), len(accuracies)
    like = [p.detach() for p in model.parameters()]
    if not isinstance(step_params, list):
        _malformed("step_params is not a list")
    params = [_tensors(step, like, "a step's params") for step in step_params]
    if len(params) != epochs * len(batches):
        fail(
            "wrong-step-count",
            observed=f"{len(params)} optimizer steps in {epochs} epochs over a train_loader of {len(batches)} batches",
            expected=f"{epochs * len(batches)}: one pass over train_loader per epoch, one step per batch",
            cause="the epoch's loop skips batches or trains more than once per epoch (train_epoch called twice, "
            "or a step of its own besides train_epoch's)",
            where="the training part of each epoch in your fit",
        )
    train_losses = []
    for epoch in range(epochs):
        steps = zip(params[epoch * len(batches):(epoch + 1) * len(batches)], batches, strict=True)
        losses = [(_reference_grads(model, p, x, y, loss_fn)[1], len(y)) for p, (x, y) in steps]
        train_losses.append(sum(loss * n for loss, n in losses) / len(train_loader.dataset))
    reported = _history_column(frame, "train_loss")
    if not all(_close(a, b, rtol=1e-3) for a, b in zip(reported, train_losses, strict=True)):
        fail(
            "wrong-history",
            observed=f"train_loss in the history: {[round(v, 4) for v in reported]}",
            expected=f"the mean training loss of each epoch: {[round(v, 4) for v in train_losses]}",
            cause="train_loss is not the epoch's mean training loss: fit logs another value (the last batch's "
            "loss, another epoch's, a loss computed after training), or your train_epoch does not return that "
            "mean (check 04-train-epoch first)",
            where="the history your fit returns",
        )
    reported = _history_column(frame, "val_accuracy")
    if not all(_close(a, b, rtol=1e-3) for a, b in zip(reported, accuracies, strict=True)):
        fail(
            "wrong-history",
            observed=f"val_accuracy in the history: {[round(v, 4) for v in reported]}",
            expected=f"the accuracy on val_loader after each epoch: {[round(v, 4) for v in accuracies]}",
            cause="val_accuracy is not evaluate(model, val_loader, loss_fn)['accuracy'] of that epoch",
            where="the history your fit returns",
        )
    _history_column(frame, "epoch")


def _judge_fit(run: dict, *, seed: int, features: int, patience: int, min_delta: float, max_epochs: int) -> str:
    """Decide one fit run from its observation: the stop epoch, the history and the weights left in the model."""
    model, train_loader, val_loader = _fit_problem(seed, features)
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
            observed=f"{_copies(syncs)} in {steps} training steps",
            expected="a few per epoch (the numbers you log and the early-stopping comparison)",
            cause="a loss or metric converted to a Python value (.item(), float(), a print or a comparison) at "
            "every step",
            where="the training loop inside fit",
        )
    scores = []
    for state in snapshots:
        model.load_state_dict(state)
        scores.append(_reference_eval(model, val_loader, loss_fn))
    val_losses = [score["loss"] for score in scores]
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
            cause="the patience counter is not reset on improvement, patience or min_delta is not the argument "
            "given (ignored or hard-coded), the comparison is off by one, or the loop never breaks",
            where=where,
        )
    final = _state(run["final"], like, "the final state")
    if any(not torch.equal(final[k], v) for k, v in snapshots[best_epoch].items()):
        fail(
            "best-weights-not-restored",
            observed=f"after fit the model does not hold the weights of its best epoch ({best_epoch + 1})",
            expected="the state of the epoch with the lowest val loss, restored at the end",
            cause="the best state is never loaded back, or it was kept as model.state_dict() without a copy "
            "(copy.deepcopy), whose tensors keep changing as training goes on, or it was saved at another epoch",
            where=where,
        )
    # Last: a wrong train_loss may come from train_epoch (its own exercise), so the rule and the weights first.
    _require_history_of_the_epochs(frame, run["step_params"], model, train_loader,
                                   [score["accuracy"] for score in scores])
    return f"stopped after {epochs} epoch{'' if epochs == 1 else 's'}, best epoch {best_epoch + 1}"


@judges("04-fit")
@_one_thread()
def judge_fit(seen: dict, *, case: Case) -> str:
    """fit(...) early-stops on the val loss with patience/min_delta and leaves the best weights in the model."""
    runs = _fit_runs(case)
    if not isinstance(seen["runs"], list):
        _malformed("runs is not a list")
    return "; ".join(_judge_fit(run, **settings) for run, settings in zip(seen["runs"], runs, strict=True))
