"""Lesson 09: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson09.common import WORLD
from harness.contract.compare import malformed
from harness.contract.failure import Requirement

TOLERANCE = 1e-4


def _ranks(value: Any, count: int = WORLD) -> list[Any]:
    """The per-rank list of an observation, validated to hold `count` entries."""
    if not isinstance(value, list) or len(value) != count:
        malformed(f"expected a list of {count} per-rank entries")
    return value


def _same_layout(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> bool:
    """Whether `state` has exactly the reference's keys, each a tensor of the reference's shape."""
    return set(state) == set(reference) and all(
        isinstance(state[k], torch.Tensor) and state[k].shape == reference[k].shape for k in reference
    )


def _state_max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two state_dicts of the same layout."""
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def _hang_row(collective: str) -> dict[str, Requirement]:
    """The requirement row of every check that launches ranks: no rank is left waiting in a collective."""
    return {"hang": Requirement(
        f"every rank calls the same collectives ({collective}), in the same order",
        hint="A rank was left waiting for the others: is there a collective that only some ranks reach?")}
