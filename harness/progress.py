"""Progress for `fit`: a tqdm bar (JupyterLab widget or terminal), and one text line per epoch on stdout.

The bar is off by default while nbgrader grades a notebook: tqdm writes to stderr in a terminal, and
nbgrader scores zero any test cell that writes to stderr.
"""

from __future__ import annotations

import math
from typing import Any

from tqdm.auto import tqdm

from harness.budget import is_grading


def progress_enabled(progress: bool | None) -> bool:
    """`progress=None` means on, except while grading."""
    return not is_grading() if progress is None else bool(progress)


def epoch_bar(total: int, epoch: int, epochs: int, enabled: bool) -> tqdm:
    """A bar over one epoch's batches; a disabled tqdm is a cheap no-op object."""
    return tqdm(total=total, desc=f"epoch {epoch}/{epochs}", unit="batch", leave=False, disable=not enabled,
                dynamic_ncols=True)


def format_epoch_line(row: dict[str, Any], epochs: int) -> str:
    """'epoch 3/10  train_loss 0.4321  val_loss 0.5012  val_accuracy 0.8800  lr 1.00e-03  2.1 s'."""
    parts = [f"epoch {row['epoch']}/{epochs}"]
    for name, value in row.items():
        if name in ("epoch", "epoch_seconds", "samples_per_second", "skipped_steps"):
            continue
        if isinstance(value, float) and not math.isnan(value):
            parts.append(f"{name} {value:.2e}" if name == "lr" else f"{name} {value:.4f}")
    if row.get("skipped_steps"):
        parts.append(f"skipped {row['skipped_steps']}")
    parts.append(f"{row['epoch_seconds']:.1f} s")
    return "  ".join(parts)
