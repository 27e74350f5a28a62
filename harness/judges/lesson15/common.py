"""Lesson 15: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch

from harness.contract.wire import WireError


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> bool:
    """Same shape and values within `tol` (relative to the reference's scale); NaN matches NaN only (the
    references of correct answers hold none, those of some wrong answers do)."""
    if a.shape != b.shape:
        return False
    a, b = a.double(), b.double()
    scale = float(b.nan_to_num(0.0).abs().max()) if b.numel() else 1.0
    return bool(torch.allclose(a, b, rtol=tol, atol=tol * max(1.0, scale), equal_nan=True))


def _tensor(value: Any, what: str) -> torch.Tensor:
    """Judge side: a tensor of the observation, or WireError (a probe always sends tensors there)."""
    if not isinstance(value, torch.Tensor):
        raise WireError(f"malformed observation: {what} is not a tensor")
    return value
