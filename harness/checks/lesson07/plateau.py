"""07-plateau, the probe.

Train with a spied ReduceLROnPlateau; record each metric it received with the weights at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.instruments import ForwardRecorder
from harness.contract.registry import register


@dataclass(frozen=True)
class PlateauSetting:
    """The plateau check's inputs: random-label data sets, loaders' batch sizes, epochs and seed."""

    seed: int
    epochs: int
    train_set: TensorDataset
    val_set: TensorDataset
    train_bs: int
    val_bs: int


def plateau_setting(case: Case) -> PlateauSetting:
    """Random labels: the training loss falls as the net memorises, the validation loss rises.

    The two losses move in opposite directions, so the metric a plateau scheduler is fed is observable.
    """
    # a partial last validation batch (2 of 16, 6 of 20), so that a mean of batch means differs from the mean
    seed, epochs, train_n, val_n, train_bs, val_bs = (21, 7, 40, 66, 10, 20) if case.hidden else (8, 6, 32, 50, 8, 16)
    generator = torch.Generator().manual_seed(case.seeded(seed))
    sets = [
        TensorDataset(torch.randn(n, 10, generator=generator), torch.randint(0, 2, (n,), generator=generator))
        for n in (train_n, val_n)
    ]
    return PlateauSetting(case.seeded(seed), epochs, *sets, train_bs, val_bs)


def plateau_model() -> nn.Module:
    """The classifier of the plateau run (with dropout, so train and eval modes differ)."""
    return nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 2))


def plateau_scheduler(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.ReduceLROnPlateau:
    """The ReduceLROnPlateau scheduler of the run: mode min, factor 0.5, patience 0."""
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0)


class _PlateauSpy:
    """Wraps a ReduceLROnPlateau's `step` to record the metric it receives, the model's weights then and how many
    forward passes the model had made (which tells the judge how much of the epoch's training came before)."""

    def __init__(self, scheduler: Any, model: nn.Module, forwards: ForwardRecorder) -> None:
        self.calls: list[dict[str, Any]] = []
        self._step = scheduler.step
        self._model = model
        self._forwards = forwards
        scheduler.step = self  # an instance attribute shadows the method: the student's calls land here

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        metric = args[0] if args else kwargs.get("metrics")
        if metric is None:  # ReduceLROnPlateau would raise a TypeError that hides the cause
            no_metric_failure()
        weights = {k: v.detach().clone() for k, v in self._model.state_dict().items()}
        value = _as_metric(metric)
        self.calls.append({"metric": value, "weights": weights, "forwards_before": len(self._forwards.records)})
        self._step(value)  # the same number, as a float: a live tensor would make PyTorch warn on stderr


def _as_metric(metric: Any) -> float:
    """The metric passed to scheduler.step as a float (a live loss tensor detached first, so that converting
    it prints no warning); a value that is not one number fails here, before ReduceLROnPlateau's TypeError."""
    if isinstance(metric, torch.Tensor) and metric.numel() == 1 and not metric.is_complex():
        return float(metric.detach())
    if isinstance(metric, (int, float)) and not isinstance(metric, bool):
        return float(metric)
    try:
        return float(metric)  # a numpy number
    except (TypeError, ValueError):
        fail(
            "plateau-wrong-metric",
            observed=f"scheduler.step received {type(metric).__name__} {metric!r:.80}",
            expected="one number: the mean validation loss of this epoch",
            cause="passing what evaluate returns, the pair (loss, accuracy), instead of its loss"
            if isinstance(metric, tuple) and len(metric) == 2 else "passing something that is not one number",
            where="the argument of scheduler.step: val_loss, _ = evaluate(...)",
        )


def no_metric_failure() -> None:
    """Fail with plateau-no-metric: scheduler.step() was called without a metric."""
    fail(
        "plateau-no-metric",
        observed="scheduler.step() was called without a metric",
        expected="scheduler.step(val_loss): ReduceLROnPlateau decides from the value you give it",
        cause="calling it like the other schedulers",
        where="the end of the epoch, after evaluating on the validation set",
    )


@register("07-plateau")
def probe_plateau(train_with_plateau: Callable[..., Any], *, case: Case) -> dict:
    """Train with a spied ReduceLROnPlateau; record each metric it received with the weights at that moment."""
    setting = plateau_setting(case)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(setting.seed)
        model = plateau_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        scheduler = plateau_scheduler(optimizer)
        forwards = ForwardRecorder(model)
        spy = _PlateauSpy(scheduler, model, forwards)
        train_loader = DataLoader(
            setting.train_set, batch_size=setting.train_bs, shuffle=True,
            generator=torch.Generator().manual_seed(setting.seed),
        )
        val_loader = DataLoader(setting.val_set, batch_size=setting.val_bs)
        with forwards:
            returned = train_with_plateau(
                model, train_loader, val_loader, nn.CrossEntropyLoss(), optimizer, scheduler, setting.epochs
            )
    return {
        "calls": spy.calls,
        "forwards": [(r.training, r.grad_enabled, r.batch_size) for r in forwards.records],
        "returned": returned,
    }
