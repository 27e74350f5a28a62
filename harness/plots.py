"""Curves: the training history, a live view of it during `fit`, and a learning-rate schedule preview.

Figures are built with matplotlib's object API (`Figure`), not pyplot, so nothing accumulates in
pyplot's global figure list and no GUI backend is needed; Jupyter displays a returned Figure inline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from matplotlib.figure import Figure

from harness.describe import best_epoch, describe_history, describe_lr_schedule
from harness.figures import png_bytes

SchedulerFactory = Callable[[torch.optim.Optimizer], Any]


class InlineFigure(Figure):
    """A Figure that Jupyter shows as a PNG even when pyplot (and its inline backend) was never imported.

    Its `alt_text` says in words what it draws (`harness.describe`): the notebook shows it as the image's
    alt text (`harness.figures`), and `harness course`'s report as its `<img>`'s.
    """

    def __init__(self, *args: Any, alt_text: str = "", **kwargs: Any) -> None:
        super().__init__(*args, dpi=90, **kwargs)
        self.alt_text = alt_text

    def _repr_png_(self) -> bytes:
        return png_bytes(self)


def plot_history(history: pd.DataFrame, path: str | Path | None = None, *, monitor: str | None = None) -> Figure:
    """Train and validation loss, validation metrics and learning rate per epoch, best epoch marked.

    Args:
        history: `fit`'s DataFrame (columns epoch, train_loss, val_loss, val_<metric>, lr, ...).
        path: where to save a PNG (parent folders are created); None saves nothing.
        monitor: the column that chose the best epoch; default `history.attrs["config"]["monitor"]`,
            else val_loss, else train_loss.

    Returns:
        The figure; its `alt_text` is `describe_history(history, monitor)`.
    """
    if history.empty:
        raise ValueError("plot_history got an empty history: train at least one epoch first.")
    metric_columns = [c for c in history.columns if c.startswith("val_") and c != "val_loss"]
    panels = 2 + bool(metric_columns)
    figure = InlineFigure(figsize=(4.2 * panels, 3.4), layout="constrained",
                          alt_text=describe_history(history, monitor))
    axes = figure.subplots(1, panels)
    epochs = history["epoch"]
    best = best_epoch(history, monitor)

    loss_ax = axes[0]
    loss_ax.plot(epochs, history["train_loss"], marker="o", label="train")
    if "val_loss" in history:
        loss_ax.plot(epochs, history["val_loss"], marker="o", label="validation")
    _decorate(loss_ax, "loss", best)
    if metric_columns:
        for column in metric_columns:
            axes[1].plot(epochs, history[column], marker="o", label=column.removeprefix("val_"))
        _decorate(axes[1], "validation metrics", best)
    lr_ax = axes[-1]
    lr_ax.plot(epochs, history["lr"], marker="o", color="tab:green")
    # From zero, without an offset: a constant rate reads as a flat line at its value, not as noise on a
    # 0.00285-0.00315 axis that matplotlib zooms to.
    lr_ax.set_ylim(0, max(float(history["lr"].max()), 1e-12) * 1.15)
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3), useOffset=False)
    lr_ax.set_title("learning rate")
    lr_ax.set_xlabel("epoch")
    _save(figure, path)
    return figure


def lr_schedule(scheduler_factory: SchedulerFactory, steps: int, *, lr: float = 1.0) -> list[float]:
    """The learning rate at each of `steps` scheduler steps, on a throwaway one-parameter optimizer.

    Args:
        scheduler_factory: builds the scheduler from an optimizer, e.g.
            `lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100)`.
        steps: how many steps to preview.
        lr: the optimizer's base learning rate.
    """
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = scheduler_factory(optimizer)
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise ValueError("ReduceLROnPlateau depends on validation results, so it has no schedule to preview.")
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()  # step before the scheduler, as in training (and PyTorch warns otherwise)
        scheduler.step()
    return rates


def plot_lr_schedule(
    scheduler_factory: SchedulerFactory, steps: int, path: str | Path | None = None, *, lr: float = 1.0
) -> Figure:
    """Plot `lr_schedule(scheduler_factory, steps, lr=lr)`: preview a scheduler without training.

    The figure's `alt_text` is `describe_lr_schedule` of the rates plotted.
    """
    rates = lr_schedule(scheduler_factory, steps, lr=lr)
    figure = InlineFigure(figsize=(5, 3.2), layout="constrained", alt_text=describe_lr_schedule(rates))
    ax = figure.subplots()
    ax.plot(range(steps), rates)
    ax.set_xlabel("scheduler step")
    ax.set_ylabel("learning rate")
    ax.set_title("learning-rate schedule")
    _save(figure, path)
    return figure


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where a display handle can update a figure in place)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class LivePlot:
    """Redraws `plot_history` in place in a notebook, at most once every `min_interval` seconds."""

    def __init__(self, min_interval: float = 1.0) -> None:
        from IPython.display import display

        self.min_interval = min_interval
        self._last_draw = -float("inf")
        self._handle = display(display_id=True)  # an empty output slot that later updates replace

    def update(self, history: pd.DataFrame, *, force: bool = False) -> None:
        """Redraw if the last redraw is old enough (always when `force`)."""
        now = time.monotonic()
        if force or now - self._last_draw >= self.min_interval:
            self._handle.update(plot_history(history))
            self._last_draw = now


def _decorate(ax: Any, title: str, best: int | None) -> None:
    if best is not None:
        ax.axvline(best, color="grey", linestyle="--", linewidth=1, label=f"best (epoch {best})")
    ax.set_title(title)
    ax.set_xlabel("epoch")
    ax.legend()


def _save(figure: Figure, path: str | Path | None) -> None:
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=110)
