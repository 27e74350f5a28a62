"""04-train-epoch, the probe.

Run one epoch; record the parameters at every step, the forward modes, the syncs and the result.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader

from harness.checks.lesson04.common import _data, _loader, _model, one_thread
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.instruments import (
    ForwardRecorder,
    HostSyncCounter,
    StepRecorder,
)
from harness.contract.registry import register


def train_epoch_inputs(case: Case) -> tuple[nn.Module, DataLoader]:
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
@one_thread()
def probe_train_epoch(train_epoch: Callable, *, case: Case) -> dict:
    """Run one epoch; record the parameters at every step, the forward modes, the syncs and the result."""
    model, loader = train_epoch_inputs(case)
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
