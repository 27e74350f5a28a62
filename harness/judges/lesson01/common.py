"""Lesson 01: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch

from harness.contract.compare import malformed
from harness.contract.failure import fail
from harness.contract.wire import type_name


def _require_tensor(result: Any, what: str, where: str) -> torch.Tensor:
    """`result` if it is a tensor; otherwise fail with [not-a-tensor]."""
    if not isinstance(result, torch.Tensor):
        fail("not-a-tensor", observed=f"{what} returned {type_name(result)}", expected="a torch.Tensor",
             cause="a missing return statement, or a conversion to NumPy or a Python list", where=where)
    return result


def _recorded_tensor(entry: dict, key: str) -> torch.Tensor:
    """A tensor the probe itself recorded (not a student's return value); anything else is malformed."""
    value = entry[key]
    if not isinstance(value, torch.Tensor):
        malformed(f"{key} is not a tensor")
    return value
