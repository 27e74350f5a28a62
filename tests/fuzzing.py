"""Breaking an observation one leaf at a time, for the judge fuzz tests of tasks and drills (issue 27)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from fnmatch import fnmatchcase
from typing import Any

import torch

LEAVES = 4
NONFINITE = ("nan", "inf", "-inf")
Path = tuple[Any, ...]


def leaves(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """(path, leaf) for every float and floating tensor of an observation."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))
    elif (isinstance(value, float) and math.isfinite(value)) or (
            isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel()
            and bool(torch.isfinite(value).all())):
        yield path, value


def replaced(value: Any, path: Path, leaf: Any) -> Any:
    """A copy of `value` with the leaf at `path` replaced by `leaf`."""
    if not path:
        return leaf
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, leaf)}
    items = list(value)
    items[head] = replaced(items[head], rest, leaf)
    return type(value)(items)


def mutations(leaf: Any) -> Iterator[tuple[str, Any]]:
    """The broken versions of one leaf, by name."""
    for name, number in (("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)):
        yield name, torch.full_like(leaf, number) if isinstance(leaf, torch.Tensor) else number
    if isinstance(leaf, torch.Tensor):
        yield "empty", torch.empty(0, dtype=leaf.dtype)
        if not torch.equal(leaf, leaf.trunc()):  # an integer tensor where a float one was expected
            yield "dtype", leaf.to(torch.int64)
        yield "meta", leaf.to("meta")
    zeros = torch.zeros_like(leaf) if isinstance(leaf, torch.Tensor) else 0.0
    if not (torch.as_tensor(leaf).abs() <= 1e-6).all():
        yield "zeros", zeros


def sampled(observation: dict[str, Any]) -> list[tuple[Path, Any]]:
    """At most LEAVES leaves, spread over the observation (first and last included)."""
    found = list(leaves({k: v for k, v in observation.items() if k != "__case__"}))
    if len(found) <= LEAVES:
        return found
    step = (len(found) - 1) / (LEAVES - 1)
    return [found[round(i * step)] for i in range(LEAVES)]


def declared(task_patterns: tuple[str, ...], path: Path) -> bool:
    """Whether the leaf at `path` matches one of a task's or drill's declared patterns."""
    text = "/".join(map(str, path))
    return any(fnmatchcase(text, pattern) for pattern in task_patterns)
