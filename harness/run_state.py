"""One training run's pieces in one place: what `fit` trains, how, on what data, and where its files go.

`fit` builds a `RunState` once its arguments are checked; its helpers (one epoch, saving, resuming) take the
run instead of a dozen loose arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.early_stopping import EarlyStopping
from harness.evaluation import Metric

__all__ = ["LoopSettings", "RunState"]


@dataclass(frozen=True)
class LoopSettings:
    """The fixed settings of the inner loop (see `fit` for their meaning)."""

    device: torch.device
    precision: str = "fp32"
    max_grad_norm: float | None = None
    accumulation_steps: int = 1
    on_nonfinite: str = "raise"
    sync_every: int = 50


@dataclass
class RunState:
    """A training run: its modules and optimizer state, its data, its settings and its progress so far.

    `model` is what trains (compiled and DDP-wrapped when asked); `raw_model` is the plain module whose
    weights checkpoints hold. `rows` (the history) and `global_step` (optimizer steps so far) grow as it runs.
    """

    model: nn.Module
    raw_model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any | None
    interval: str | None  # when the scheduler steps: "step", "epoch", or None without one
    scaler: torch.amp.GradScaler
    tracker: EarlyStopping  # early stopping, and which epoch is the best so far
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    metrics: dict[str, Metric]
    train_loader: Any
    val_loader: Any | None
    settings: LoopSettings
    epochs: int
    folder: Path | None  # checkpoint_dir: last.pt, best.pt, history.csv, config.json
    config: dict[str, Any] = field(default_factory=dict)  # plain values: saved in checkpoints and config.json
    rows: list[dict[str, Any]] = field(default_factory=list)
    global_step: int = 0
