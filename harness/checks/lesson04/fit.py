"""04-fit, the probe: Run fit on each of the case's problems and record what each run did."""

from __future__ import annotations

import builtins
import dis
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
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

VAL_SIZE = 96  # the whole validation set is one batch: a forward of this size is an evaluation


@dataclass
class _ValSnapshots:
    """Copies the model's state, and notes its mode, each time it sees the validation batch (the whole val set,
    one batch)."""

    model: nn.Module
    states: list[dict[str, torch.Tensor]] = field(default_factory=list)
    modes: list[bool] = field(default_factory=list)

    def __enter__(self) -> "_ValSnapshots":
        self._handle = self.model.register_forward_pre_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _record(self, module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() and inputs[0].shape[0] == VAL_SIZE:
            self.states.append({k: v.detach().clone() for k, v in module.state_dict().items()})
            self.modes.append(module.training)


def _called_evaluate(fit: Callable) -> Callable | None:
    """The `evaluate` fit calls, resolved as Python resolves it (a LOAD_GLOBAL of fit's code, looked up in fit's
    globals, then the builtins); None when fit's own code names no global `evaluate`."""
    code = getattr(fit, "__code__", None)
    if code is None or not any(instruction.opname == "LOAD_GLOBAL" and instruction.argval == "evaluate"
                               for instruction in dis.get_instructions(code)):
        return None
    found = fit.__globals__.get("evaluate", getattr(builtins, "evaluate", None))
    return found if callable(found) else None


def _evaluate_trains(fit: Callable) -> bool | None:
    """Whether the evaluate fit calls runs a model handed over in training mode in training mode (04-evaluate's
    bug, charged there); None when fit calls no global evaluate, or it raised or ran no forward."""
    evaluate = _called_evaluate(fit)
    if evaluate is None:
        return None
    model = _model(4, 2, seed=97).train()
    modes: list[bool] = []
    handle = model.register_forward_pre_hook(lambda module, inputs: modes.append(module.training))
    x, y = _data(32, 4, 2, seed=97)
    try:
        evaluate(model, _loader(x, y, 32), nn.CrossEntropyLoss())
    except Exception:  # noqa: BLE001 - 04-evaluate reports its own errors; here it is no evidence
        return None
    finally:
        handle.remove()
    return any(modes) if modes else None


def fit_problem(seed: int, features: int) -> tuple[nn.Module, DataLoader, DataLoader]:
    """A task whose validation loss falls then rises: 20% of the val labels disagree with the training rule."""
    generator = torch.Generator().manual_seed(seed)
    direction = torch.randn(features, generator=generator)
    x_train = torch.randn(256, features, generator=generator)
    y_train = (x_train @ direction > 0).long()
    x_val = torch.randn(VAL_SIZE, features, generator=generator)
    y_val = (x_val @ direction > 0).long()
    flipped = torch.rand(VAL_SIZE, generator=generator) < 0.2
    y_val[flipped] = 1 - y_val[flipped]
    return _model(features, 2, seed), _loader(x_train, y_train, 16), _loader(x_val, y_val, VAL_SIZE)


def fit_runs(case: Case) -> list[dict[str, Any]]:
    """The fits a check runs: problem seed and size, and the early-stopping settings."""
    if case.hidden:
        runs = [dict(seed=13, features=5, patience=3, min_delta=0.0, max_epochs=14),
                dict(seed=14, features=3, patience=2, min_delta=1e-3, max_epochs=12),
                dict(seed=15, features=4, patience=1, min_delta=10.0, max_epochs=8)]
    else:
        # First a min_delta no epoch can beat: the rule stops after patience + 1 epochs, where min_delta on the
        # wrong side (every epoch an improvement) runs them all, and a rule on the training loss stops too.
        runs = [dict(seed=5, features=4, patience=1, min_delta=10.0, max_epochs=6),
                dict(seed=3, features=4, patience=2, min_delta=0.0, max_epochs=12),
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
    model, train_loader, val_loader = fit_problem(seed, features)
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
        "val_modes": snapshots.modes,
        "step_params": [r.params for r in steps.records],
        "history": _history_data(history),
        "final": {k: v.detach().clone() for k, v in model.state_dict().items()},
    }


@register("04-fit")
@one_thread()
def probe_fit(fit: Callable, *, case: Case) -> dict:
    """Run fit on each of the case's problems and record what each run did."""
    return {"runs": [_observe_fit(fit, **run) for run in fit_runs(case)], "evaluate_trains": _evaluate_trains(fit)}
