"""04-evaluate, the probe.

Evaluate the case's model; record the forward modes, the syncs, the result and the state afterwards.
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
)
from harness.contract.registry import register


def evaluate_inputs(case: Case) -> tuple[nn.Module, DataLoader]:
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


@register("04-evaluate")
@one_thread()
def probe_evaluate(evaluate: Callable, *, case: Case) -> dict:
    """Evaluate the case's model; record the forward modes, the syncs, the result and the state afterwards."""
    model, loader = evaluate_inputs(case)
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
