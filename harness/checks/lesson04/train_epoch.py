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


@register("04-train-epoch")
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
