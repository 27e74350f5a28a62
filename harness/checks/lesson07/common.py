"""Lesson 07: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.contract.instruments import ForwardRecorder, StepRecorder

SchedulerFactory = Callable[[torch.optim.Optimizer], Any]


_ORDER_WARNING = "lr_scheduler.step()` before `optimizer.step()"


def _regression_loader(n: int, batch_size: int, seed: int) -> DataLoader:
    """A small, fixed-order regression loader (no shuffling, so every run sees the same batches)."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(n, 4, generator=generator)
    targets = inputs @ torch.randn(4, 1, generator=generator) + 0.1 * torch.randn(n, 1, generator=generator)
    return DataLoader(TensorDataset(inputs, targets), batch_size=batch_size, shuffle=False)


def scheduler_trace(make_scheduler: SchedulerFactory, lr: float, steps: int) -> list[float]:
    """The learning rate a scheduler gives before each of `steps + 1` consecutive scheduler steps."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = make_scheduler(optimizer)
    lrs = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps):
        optimizer.step()  # keeps PyTorch's order bookkeeping happy: no warning in the reference
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    return lrs


def is_number(value: Any) -> bool:
    """A real Python number (bool excluded), as a probe sends a float or an int."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _record_steps(train: Callable[..., Any], optimizer: torch.optim.Optimizer, *args: Any) -> dict[str, Any]:
    """Run the student's code; what each optimizer.step saw and whether PyTorch warned about the call order."""
    with StepRecorder(optimizer) as steps, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        returned = train(*args)
    return {
        "steps": [{"lr": record.lrs[0], "params": record.params, "grads": record.grads} for record in steps.records],
        "final": [p.detach().clone() for group in optimizer.param_groups for p in group["params"]],
        "warned": any(_ORDER_WARNING in str(w.message) for w in caught),
        "returned": returned,
    }


def tiny_regressor(seed: int) -> nn.Module:
    """A 4-8-1 regression MLP with weights from `seed` (the global generator left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


@dataclass(frozen=True)
class LoopSetting:
    """One loop check's inputs: epochs, the fixed-order loader, the model's seed, the base lr, the scheduler."""

    epochs: int
    loader: DataLoader
    model_seed: int
    lr: float
    make: SchedulerFactory

    @property
    def batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The batches of one epoch, in the loader's (fixed) order."""
        return list(self.loader)


def _probe_loop(train: Callable[..., Any], setting: LoopSetting) -> dict[str, Any]:
    """Run the student's loop with SGD and the setting's scheduler; record every optimizer step, and the mode of
    every forward that recorded a graph (the model arrives in eval mode, as after an evaluation)."""
    model = tiny_regressor(setting.model_seed).eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=setting.lr)
    scheduler = setting.make(optimizer)
    with ForwardRecorder(model) as forwards:
        seen = _record_steps(train, optimizer, model, setting.loader, nn.MSELoss(), optimizer, scheduler,
                             setting.epochs)
    seen["train_modes"] = [r.training for r in forwards.records if r.grad_enabled]
    return seen
