"""Lesson 10: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from harness.repro import capture_rng_state, restore_rng_state

PRECISIONS = ("fp32", "bf16", "fp16")


@contextlib.contextmanager
def _rng_kept() -> Iterator[None]:
    """Restore every global RNG state afterwards: the checks seed and scramble, the notebook's streams stay."""
    state = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)


def reference_precision(device_type: str, precisions: dict[str, bool]) -> str:
    """bf16 where autocast supports it; fp16 (with a GradScaler) on CUDA GPUs without bf16; else fp32."""
    if precisions.get("bf16_autocast"):
        return "bf16"
    if device_type == "cuda" and precisions.get("fp16_autocast") and precisions.get("grad_scaler"):
        return "fp16"
    return "fp32"


def _state_as_data(state: Any) -> dict[str, torch.Tensor] | None:
    """A state_dict as data (its tensors, on the CPU), or None if it is not a dict of tensors."""
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        return None
    return {k: v.detach().cpu().clone() for k, v in state.items()}
