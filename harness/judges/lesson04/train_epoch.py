"""04-train-epoch, the judge.

train_epoch(model, loader, loss_fn, optimizer) -> sample-weighted mean loss of one epoch, no per-step sync.
"""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.lesson04.common import one_thread
from harness.checks.lesson04.train_epoch import train_epoch_inputs
from harness.contract.case import Case
from harness.contract.compare import isclose_number, malformed, tensor_list
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson04.common import (
    SAME,
    _copies,
    _flags,
    _reference_grads_and_loss,
    _require_train_mode,
    _scalar_or_fail,
    _sync_calls,
    _syncs,
)


@judges(
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
@one_thread()
def judge_train_epoch(seen: dict, *, case: Case) -> str:
    """train_epoch(model, loader, loss_fn, optimizer) -> sample-weighted mean loss of one epoch, no per-step sync."""
    model, loader = train_epoch_inputs(case)
    loss_fn = nn.CrossEntropyLoss()
    batches, n, batch = list(loader), len(loader.dataset), loader.batch_size
    like = [p.detach() for p in model.parameters()]
    if not isinstance(seen["params"], list):
        malformed("params is not a list")
    params = [tensor_list(step, like, "a step's params") for step in seen["params"]]
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
    batch_losses = [_reference_grads_and_loss(model, p, bx, by, loss_fn)[1]
                    for p, (bx, by) in zip(params, batches, strict=True)]
    sizes = [len(by) for _, by in batches]
    expected = sum(loss * size for loss, size in zip(batch_losses, sizes, strict=True)) / n
    observed = _scalar_or_fail(seen["result"], "train_epoch's result", where)
    if not isinstance(seen["result"], torch.Tensor):
        fail(
            "not-a-tensor",
            observed=f"train_epoch returned a {type_name(seen['result'])} ({observed:.5f})",
            expected="a 0-dim tensor, still on the device: the caller decides when to sync (fit does, once per epoch)",
            cause="the result is converted at the end (float(...), .item() or .tolist()), or accumulated as a "
            "Python number",
            where="the return statement of train_epoch",
        )
    unweighted = sum(batch_losses) / len(batch_losses)
    if isclose_number(observed, unweighted, **SAME) and not isclose_number(observed, expected, **SAME):
        fail(
            "unweighted-mean",
            observed=f"{observed:.5f}, the plain mean of the batch losses",
            expected=f"{expected:.5f}, weighted by batch size (the last batch has {sizes[-1]} samples, not {batch})",
            cause="averaging batch means over-weights the smaller last batch",
            where=where,
        )
    if isclose_number(observed, expected * n, **SAME):
        fail(
            "sum-not-mean",
            observed=f"{observed:.3f}, the sum of the per-sample losses",
            expected=f"{expected:.5f}, their mean over the {n} samples",
            cause="the total is never divided by the number of samples",
            where=where,
        )
    if not isclose_number(observed, expected, **SAME):
        slips = {
            f"the last batch's loss ({batch_losses[-1]:.5f}): the loss of the final step returned instead of the "
            "epoch's mean": batch_losses[-1],
            f"the first batch's loss ({batch_losses[0]:.5f}): the loop returns (or stops) after its first step":
                batch_losses[0],
            f"the sum of the batch means ({sum(batch_losses):.5f}): never divided by anything": sum(batch_losses),
        }
        found = [slip for slip, value in slips.items() if isclose_number(observed, value, **SAME)]
        fail(
            "wrong-loss",
            observed=f"train_epoch returned {observed:.5f}" + (f", which equals {found[0]}" if found else ""),
            expected=f"{expected:.5f}, the mean training loss over the epoch's samples",
            cause=("the value returned is not the sample-weighted mean of the step losses: " + found[0]) if found
            else "the epoch loss is not the sample-weighted mean of the step losses",
            where=where,
            hint="Accumulate loss * batch size at every step and divide by the number of samples after the loop."
            if found else None,
        )
    return f"{len(batches)} steps, sample-weighted epoch loss, {_syncs(count)}"
