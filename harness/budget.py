"""Grading-time budgets: one switch that shrinks training while nbgrader executes a notebook.

nbgrader sets NBGRADER_EXECUTION while it runs a notebook (autograde, validate). Lessons size their
training through `budget(full, grading)`, so a student's JupyterLab run trains fully while grading stays
behavioural and fast. HARNESS_BUDGET=full or =grading overrides the detection (tests, `make course`).
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")


def is_grading() -> bool:
    """True when the grading budget applies (nbgrader executing, or HARNESS_BUDGET=grading)."""
    forced = os.environ.get("HARNESS_BUDGET", "").strip().lower()
    if forced in ("full", "grading"):
        return forced == "grading"
    if forced:
        raise ValueError(f"HARNESS_BUDGET={forced!r} is not understood: use 'full' or 'grading', or unset it.")
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def budget(full: T, grading: T) -> T:
    """Return `grading` under the grading budget and `full` otherwise.

    Example: `epochs = budget(full=20, grading=2)`.
    """
    return grading if is_grading() else full
