"""Lesson 09: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any, NoReturn

import torch

from harness.checks.lesson09.common import WORLD
from harness.contract.wire import WireError

TOLERANCE = 1e-4


def _malformed(what: str) -> NoReturn:
    """Refuse an observation that no probe of this module writes (forged or corrupted)."""
    raise WireError(f"malformed observation: {what}")


def _ranks(value: Any, count: int = WORLD) -> list[Any]:
    """The per-rank list of an observation, validated to hold `count` entries."""
    if not isinstance(value, list) or len(value) != count:
        _malformed(f"expected a list of {count} per-rank entries")
    return value


def _int_list(value: Any) -> list[int]:
    """A recorded list of indices, validated."""
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        _malformed("expected a list of ints")
    return value


def _tensor_dict(value: Any) -> dict[str, torch.Tensor]:
    """A recorded state_dict (str -> tensor), validated."""
    if not isinstance(value, dict) or not all(isinstance(v, torch.Tensor) for v in value.values()):
        _malformed("expected a dict of tensors")
    return value


def _same_layout(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> bool:
    """Whether `state` has exactly the reference's keys, each a tensor of the reference's shape."""
    return set(state) == set(reference) and all(
        isinstance(state[k], torch.Tensor) and state[k].shape == reference[k].shape for k in reference
    )


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two state_dicts of the same layout."""
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Whether two state_dicts of the same layout agree within TOLERANCE."""
    return all(torch.allclose(a[k].float(), b[k].float(), atol=TOLERANCE, rtol=TOLERANCE) for k in b)
