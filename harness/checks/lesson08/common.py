"""Lesson 08: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def _as_data(value: Any) -> Any:
    """A loaded checkpoint as wire data: dict keys as strings (optimizer states use ints), tuples as lists."""
    if isinstance(value, dict):
        return {str(k): _as_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_data(v) for v in value]
    return value


def _read_back(path: Path) -> Any:
    """What a file holds, loaded with weights_only=True: the data, None if absent, a string if unreadable."""
    if not path.exists():
        return None
    try:
        return _as_data(torch.load(path, weights_only=True))
    except Exception as error:  # noqa: BLE001 -- the refusal is the observation
        return f"unreadable ({type(error).__name__}: {str(error)[:80]})"
