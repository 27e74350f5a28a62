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


def mixed_precision_on_cpu(precisions: dict[str, bool]) -> str:
    """The precision the checks' tiny CPU runs train in: bf16 where the CPU's autocast runs it, else fp32.

    Not what a CPU should train in (10-precision's judge says fp32), but what makes a precision observable: a
    run asked for bf16 records bf16 in last.pt, one that ignores the request records fit's default, fp32; and a
    report of a bf16 run shows what autocast did. The runs are a few dozen small images: emulated bf16 costs
    little there.
    """
    return "bf16" if precisions.get("bf16_autocast") else "fp32"


def _state_as_data(state: Any) -> dict[str, torch.Tensor] | None:
    """A state_dict as data (its tensors, on the CPU), or None if it is not a dict of tensors."""
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        return None
    return {k: v.detach().cpu().clone() for k, v in state.items()}
