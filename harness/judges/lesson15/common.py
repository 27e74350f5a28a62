"""Lesson 15: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

import torch


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> bool:
    """Same shape and values within `tol` (relative to the reference's scale); NaN matches NaN only (the
    references of correct answers hold none, those of some wrong answers do)."""
    if a.shape != b.shape:
        return False
    a, b = a.double(), b.double()
    scale = float(b.nan_to_num(0.0).abs().max()) if b.numel() else 1.0
    return bool(torch.allclose(a, b, rtol=tol, atol=tol * max(1.0, scale), equal_nan=True))

