"""Lesson 16: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.contract.compare import same_values
from harness.contract.failure import fail
from harness.contract.wire import WireError


def _reference(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """The eager output of `model` in eval mode (judge side)."""
    model.eval()
    with torch.inference_mode():
        return model(inputs)


def fail_if_raised(result: dict[str, Any], what: str) -> None:
    """Fail with [raised] when the student's code raised during this call (the probe's `attempt` recorded it)."""
    raised = result.get("raised")
    if raised is None:
        return
    if not isinstance(raised, str):
        raise WireError("malformed observation: the exception is not text")
    fail("raised", observed=f"in {what}, your code raised {raised}",
         expected="it runs on the check's inputs without an exception",
         cause="the exception named here, raised inside your code", where="the line named above")


def _states_equal(got: Any, want: dict[str, torch.Tensor]) -> bool:
    """Whether `got` (data from the observation) is exactly the state_dict `want`: keys, dtypes and values."""
    return isinstance(got, dict) and set(got) == set(want) and all(
        isinstance(got[k], torch.Tensor) and got[k].dtype == v.dtype and got[k].shape == v.shape
        and same_values(got[k], v, dtype=False) for k, v in want.items())
