"""Mixed precision setup: which autocast dtype a precision name means, and the GradScaler that goes with it.

fp16 has a narrow exponent range, so small gradients underflow to zero unless the loss is scaled up
before backward (the GradScaler's job). bf16 has fp32's exponent range and needs no scaler. fp32 runs
without autocast; its scaler is disabled, so the same loop code serves all three precisions.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch

from harness.env import bf16_supported, no_bf16_reason

PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def validate_precision(precision: str, device: torch.device) -> None:
    """Raise a clear error when `precision` is unknown or cannot run on `device`.

    Raises:
        ValueError: unknown name, or a precision this device does not support.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {sorted(PRECISIONS)}: pick fp32, bf16 or fp16.")
    if precision == "fp32":
        return
    if not torch.amp.is_autocast_available(device.type):
        raise ValueError(f"precision={precision!r} needs autocast, which torch lacks on {device.type}: use fp32.")
    if precision == "bf16" and not bf16_supported(device):
        raise ValueError(f"{no_bf16_reason(device)}: use precision='fp16' (with its GradScaler). "
                         "`harness doctor` lists what this machine runs natively.")


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """The autocast context for the forward pass and the loss (never the backward pass); fp32: none."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()  # cheaper than entering a disabled torch.autocast on every step
    return torch.autocast(device.type, dtype=dtype)


def make_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """A GradScaler, enabled only for fp16: bf16 and fp32 keep fp32's exponent range and need no scaling.

    A disabled scaler makes `scale`, `unscale_`, `step` and `update` pass-throughs, so one loop fits all.
    """
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")
