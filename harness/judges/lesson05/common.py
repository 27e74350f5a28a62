"""Lesson 05: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import NoReturn

import torch

from harness.contract.failure import fail

_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _name(dtype: object) -> str:
    return _NAMES.get(dtype, repr(dtype))  # type: ignore[arg-type]


def other_dtype(dtype: torch.dtype) -> torch.dtype:
    """The other 16-bit autocast dtype: what a step that hard-codes one runs when asked for the other."""
    return torch.float16 if dtype == torch.bfloat16 else torch.bfloat16


def fail_autocast_dtype(dtype: torch.dtype, what: str) -> NoReturn:
    """Fail with [wrong-autocast-dtype]: the step's numbers are those of an autocast in the other 16-bit dtype."""
    fail(
        "wrong-autocast-dtype",
        observed=f"asked for {_name(dtype)}, the step computed exactly what autocast in {_name(other_dtype(dtype))} "
        "computes",
        expected=f"the forward and loss under torch.autocast(device_type, dtype=dtype), here {_name(dtype)}",
        cause=f"the autocast dtype is written in the code ({_name(other_dtype(dtype))}) instead of the dtype argument",
        where=f"the `with torch.autocast(...)` line of {what}",
    )
