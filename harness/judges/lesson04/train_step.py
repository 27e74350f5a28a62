"""04-train-step, the judge.

train_step(model, batch, loss_fn, optimizer) -> detached loss: one correct SGD step per call.
"""

from __future__ import annotations

from typing import Any, NoReturn

import torch
from torch import nn

from harness.checks.lesson04.common import META, one_thread
from harness.checks.lesson04.train_step import train_step_inputs
from harness.contract.case import Case
from harness.contract.compare import close_tensors, isclose_number, malformed, tensor_list
from harness.contract.failure import Hints, Requirement, fail, raised_failure
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson04.common import (
    SAME,
    _copies,
    _count,
    _flags,
    _reference_grads_and_loss,
    _require_train_mode,
    _scalar_or_fail,
    _sync_calls,
)

# How close a step's gradients must be to the reference (close_tensors' options; a missing gradient is never close)
GRADS = {"rtol": 1e-4, "atol": 1e-6, "dtype": False}


def _no_gradients(grads: list[torch.Tensor | None]) -> bool:
    """Whether a step saw no gradient: one is missing, or all of them are zero."""
    return any(g is None for g in grads) or all(not bool(g.any()) for g in grads)


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


def _step_records(seen: dict, like: list[torch.Tensor]) -> list[tuple[list[torch.Tensor | None], list[torch.Tensor]]]:
    """The recorded (grads, params) of every optimizer step, validated against the model's parameters."""
    if not isinstance(seen["steps"], list) or not all(isinstance(step, dict) for step in seen["steps"]):
        malformed("steps is not a list of records")
    return [
        (tensor_list(step["grads"], like, "a step's grads", none_ok=True),
         tensor_list(step["params"], like, "a step's params"))
        for step in seen["steps"]
    ]


@judges(
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
@one_thread()
def judge_train_step(seen: dict, *, case: Case) -> str:
    """train_step(model, batch, loss_fn, optimizer) -> detached loss: one correct SGD step per call."""
    model, batches = train_step_inputs(case)
    loss_fn = nn.CrossEntropyLoss()
    records = _step_records(seen, [p.detach() for p in model.parameters()])
    steps_after_call = seen["steps_after_call"]
    where = "your train_step: the order of zero_grad, forward, backward and step, and model.train()"

    if not isinstance(steps_after_call, list) or len(steps_after_call) > len(batches):
        malformed("steps_after_call is not a list of one count per call")
    for call, count in enumerate(steps_after_call, start=1):
        if _count(count, "a step count") > len(records):
            malformed("more steps counted than recorded")
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
    references = [_reference_grads_and_loss(model, params, x, y, loss_fn)
                  for (_, params), (x, y) in zip(records, batches, strict=True)]
    for i, ((grads, _), (reference, _), (_, y)) in enumerate(zip(records, references, batches, strict=True)):
        if close_tensors(grads, reference, **GRADS):
            continue
        if i and close_tensors(grads, references[i - 1][0], **GRADS):
            _fail_step_before_backward(i + 1, "those of the previous batch", where)
        previous = records[i - 1][0] if i else None
        if previous is not None and None not in previous and close_tensors(
            grads, [g + p for g, p in zip(reference, previous, strict=True)], **GRADS
        ):
            fail(
                "missing-zero-grad",
                observed=f"the gradients at step {i + 1} are the sum of this batch's gradients and those of step {i}",
                expected="only this batch's gradients",
                cause="nothing cleared .grad between the two steps: zero_grad is missing, or not reached on every "
                "call, or clears another model's gradients; backward() adds into .grad, so gradients pile up",
                where=where,
            )
        if close_tensors(grads, [r * float(len(y)) for r in reference], **GRADS):
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
        malformed("losses is not a list")
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
        value = _scalar_or_fail(loss, "train_step's loss", "the return statement of train_step")
        if not isclose_number(value, ref_loss, **SAME):
            fail(
                "wrong-loss",
                observed=f"train_step returned {value:.5f} at call {call}",
                expected=f"{ref_loss:.5f}, the batch loss computed before the update",
                cause="the returned value is not the loss of this batch's forward pass",
                where="the return statement of train_step",
            )
    held = seen["grads_at_backward"]
    if not isinstance(held, list) or not set(held) <= {"none", "zeros", "values"}:
        malformed("grads_at_backward is not a list of states")
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
        malformed("other_device is not a record of a run")
    if seen.get("input") not in ("", str(META)):
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
