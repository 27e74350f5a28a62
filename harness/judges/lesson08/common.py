"""Lesson 08: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson08.common import PREVIOUS
from harness.contract.compare import isclose_number, same_values


# Not the floor's: a walk over nested checkpoint data (dicts, lists, numbers); each leaf is compared by the floor.
def _same(a: Any, b: Any) -> bool:
    """Deep equality of nested dicts, lists, tensors and numbers (NaN equals NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_values(a, b, expected_nan=True)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return isclose_number(a, b, rel_tol=0.0, abs_tol=0.0, expected_nan=True)
    return a == b


def _helper_note(seen: dict[str, Any]) -> str:
    """When the crashed save went through the notebook's atomic_save and that function alone does not keep a file
    through a crash, the cause to name: 08-atomic-save's failure, which this exercise inherits; else ''."""
    calls, kept = seen.get("helper_calls"), seen.get("helper_kept")
    if not isinstance(calls, int) or calls < 1 or _same(kept, PREVIOUS):
        return ""
    return (f"the save went through your atomic_save ({calls} call{'s' if calls > 1 else ''}), which is not "
            "atomic itself: asked alone to overwrite a file with a save that crashes, it left the file "
            + ("unreadable" if isinstance(kept, str) else "missing" if kept is None else "changed")
            + ". Fix atomic_save (08-atomic-save); this exercise passes with it")
