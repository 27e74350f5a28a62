"""Early stopping: stop when a monitored metric has not improved for `patience` epochs.

`fit` also uses it (with patience=None, never stopping) to decide which epoch is the best checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EarlyStopping:
    """Tracks the best value of `metric` and how many epochs have passed without improving it.

    Args:
        metric: a history column, e.g. "val_loss" or "val_accuracy".
        mode: "min" when lower is better, "max" when higher is better.
        patience: epochs without improvement before stopping; None never stops.
        min_delta: how much better than the best a value must be to count as an improvement.
    """

    metric: str = "val_loss"
    mode: str = "min"
    patience: int | None = 5
    min_delta: float = 0.0
    best: float | None = field(default=None, init=False)
    best_epoch: int | None = field(default=None, init=False)
    bad_epochs: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.mode not in ("min", "max"):
            raise ValueError(f"EarlyStopping mode={self.mode!r}: use 'min' (lower is better) or 'max'.")
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 1):
            raise ValueError(f"EarlyStopping patience={self.patience!r}: use a whole number of epochs >= 1, or None.")
        if not self.min_delta >= 0:
            raise ValueError(f"EarlyStopping min_delta={self.min_delta!r} must be >= 0.")

    def update(self, value: float, epoch: int) -> bool:
        """Record this epoch's value; return True when it is a new best."""
        if not math.isfinite(value):
            raise FloatingPointError(f"{self.metric} is {value} at epoch {epoch}: cannot compare it with the best.")
        sign = 1.0 if self.mode == "min" else -1.0
        improved = self.best is None or sign * (self.best - value) > self.min_delta
        if improved:
            self.best, self.best_epoch, self.bad_epochs = value, epoch, 0
        else:
            self.bad_epochs += 1
        return improved

    @property
    def should_stop(self) -> bool:
        """True once `patience` epochs in a row have not improved."""
        return self.patience is not None and self.bad_epochs >= self.patience

    def state_dict(self) -> dict[str, Any]:
        """Plain values, so a checkpoint holding them loads with weights_only=True."""
        return {"best": self.best, "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state saved by `state_dict`."""
        self.best, self.best_epoch, self.bad_epochs = state["best"], state["best_epoch"], state["bad_epochs"]
