"""Lesson 03: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch

from harness.contract.failure import fail
from harness.contract.wire import type_name


def _tensor(value: Any, what: str, where: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        fail(
            "not-a-tensor",
            observed=f"{what} is a {type_name(value)}",
            expected=f"{what} is a torch.Tensor",
            cause=f"{what} is built outside torch (a Python list, a NumPy array or a number) and not converted "
            "to a tensor",
            where=where,
        )
    return value


