"""Lesson 10: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any


def _support_of(value: Any) -> dict[str, bool]:
    """A recorded support dict, validated: the keys supported_precisions returns, with bool values."""
    if not (isinstance(value, dict) and set(value) == {"fp32", "bf16_autocast", "fp16_autocast", "grad_scaler"}
            and all(isinstance(v, bool) for v in value.values())):
        raise ValueError("the recorded precision support is not supported_precisions' dict")
    return value
