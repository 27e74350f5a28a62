"""13-deterministic, the probe.

Use the student's context manager from each prior state; record the flags inside and after, and whether
the planted exception came out. The check restores the flags it found, whatever the student's code did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register


def read_flags() -> dict[str, bool]:
    """The four global flags the exercise sets and restores."""
    return {"deterministic": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic)}


def write_flags(flags: dict[str, bool]) -> None:
    """Set the four global flags."""
    torch.use_deterministic_algorithms(flags["deterministic"], warn_only=flags["warn_only"])
    torch.backends.cudnn.benchmark = flags["benchmark"]
    torch.backends.cudnn.deterministic = flags["cudnn_deterministic"]


class _Planted(Exception):
    """The exception the check raises inside the block: it must come out of the context manager."""


def prior_flags(case: Case) -> list[tuple[dict[str, bool], bool]]:
    """(flags before entering, raise inside) of each use of the context manager."""
    speed = {"deterministic": False, "warn_only": False, "benchmark": True, "cudnn_deterministic": False}
    warned = {"deterministic": True, "warn_only": True, "benchmark": False, "cudnn_deterministic": True}
    if not case.hidden:
        return [(speed, False), (warned, False), (speed, True)]
    generator = torch.Generator().manual_seed(case.seeded(150))
    drawn = []
    for raises in (False, True, False, True):
        bits = torch.randint(0, 2, (3,), generator=generator).tolist()
        drawn.append(({"deterministic": bool(bits[0]), "warn_only": bool(bits[0] and bits[1]),
                       "benchmark": bool(bits[2]), "cudnn_deterministic": bool(bits[1])}, raises))
    return [(speed, False), (warned, False), (warned, True), *drawn]  # the visible priors, then others


@register("13-deterministic")
def probe_deterministic(deterministic: Callable[[], Any], *, case: Case) -> dict:
    """Use the student's context manager from each prior state; record the flags inside and after, and whether
    the planted exception came out. The check restores the flags it found, whatever the student's code did."""
    found = read_flags()

    def record(item: tuple[dict[str, bool], bool]) -> dict:
        prior, raises = item
        write_flags(prior)
        inside, propagated = None, False
        try:
            with deterministic():
                inside = read_flags()
                if raises:
                    raise _Planted("raised inside the block by the check")
        except _Planted:
            propagated = True
        return {"inside": inside, "after": read_flags(), "propagated": propagated}

    try:
        return {"results": collect(prior_flags(case), record)}
    finally:
        write_flags(found)
