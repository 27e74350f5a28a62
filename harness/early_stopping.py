"""Early stopping: stop when a monitored metric has not improved for `patience` epochs.

`fit` also uses it (with patience=None, never stopping) to decide which epoch is the best checkpoint.
Whether higher or lower is better (`mode`) is read from well-known metric names when not given: a tracker
that keeps the least accurate epoch as the best is a silent wrong result, so an unknown name needs `mode`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EarlyStopping", "infer_mode"]

# Words of a metric's name (split at "_") that say which way it improves.
_HIGHER_IS_BETTER = frozenset({"accuracy", "acc", "top1", "top5", "f1", "auc", "auroc", "roc", "ap", "map",
                               "precision", "recall", "iou", "miou", "dice", "r2", "bleu", "rouge"})
_LOWER_IS_BETTER = frozenset({"loss", "error", "err", "perplexity", "ppl", "mse", "mae", "rmse", "nll", "wer", "cer"})


def infer_mode(metric: str) -> str | None:
    """"max" or "min" for a well-known metric name (`val_accuracy` -> max, `val_loss` -> min), else None.

    A name that mixes both kinds of words (`val_loss_accuracy`) or negates one (`val_neg_loss`) is ambiguous.
    """
    words = set(metric.lower().split("_"))
    if words & {"neg", "negative", "minus", "inverse", "inv"}:
        return None
    higher, lower = bool(words & _HIGHER_IS_BETTER), bool(words & _LOWER_IS_BETTER)
    if higher == lower:
        return None
    return "max" if higher else "min"


@dataclass
class EarlyStopping:
    """Tracks the best value of `metric` and how many epochs have passed without improving it.

    Args:
        metric: a history column, e.g. "val_loss" or "val_accuracy".
        mode: "min" when lower is better, "max" when higher is better. None (the default) reads it from the
            metric's name: accuracy, acc, f1, auc, precision, recall, iou, dice... -> "max"; loss, error,
            perplexity, mse, mae... -> "min"; any other name must say.
        patience: epochs without improvement before stopping; None never stops.
        min_delta: how much better than the best a value must be to count as an improvement.

    Raises:
        ValueError: `mode` is missing for a name that does not say which way it improves, or contradicts a
            well-known name (`EarlyStopping("val_accuracy", mode="min")` would keep the least accurate epoch).
    """

    metric: str = "val_loss"
    mode: str | None = None
    patience: int | None = 5
    min_delta: float = 0.0
    best: float | None = field(default=None, init=False)
    best_epoch: int | None = field(default=None, init=False)
    bad_epochs: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.mode = _checked_mode(self.metric, self.mode)
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


def _checked_mode(metric: str, mode: str | None) -> str:
    """The mode given, checked against the metric's name, or the one its name implies."""
    if mode not in (None, "min", "max"):
        raise ValueError(f"EarlyStopping mode={mode!r}: use 'min' (lower is better) or 'max'.")
    implied = infer_mode(metric)
    if mode is None and implied is None:
        raise ValueError(f"EarlyStopping cannot tell whether a higher or a lower {metric!r} is better: pass "
                         "mode='max' (higher is better, like accuracy) or mode='min' (lower is better, like a loss).")
    if mode is not None and implied is not None and mode != implied:
        better = "higher" if implied == "max" else "lower"
        raise ValueError(f"EarlyStopping({metric!r}, mode={mode!r}) would keep the worst epoch as the best: a {better} "
                         f"{metric} is better, so use mode={implied!r} (or leave mode out and it is inferred).")
    return mode or implied
