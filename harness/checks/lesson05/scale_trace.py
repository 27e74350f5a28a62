"""05-scale-trace, the probe.

Call `scale_trace` on each overflow sequence and scaler setting of the case; record the traces.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register

T = TypeVar("T")


def scale_cases(case: Case) -> list[tuple[list[bool], dict[str, Any]]]:
    """(overflow per step, GradScaler settings) of each trace the case replays."""
    F, T = False, True
    cases = [
        ([F, F, F, T, F, F, F, F, F],
         dict(init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)),
        ([F, F, T, F, T, T, F], dict(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)),
        ([F, T, F, F, T, F], dict(init_scale=64.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=1)),
        ([], dict(init_scale=8.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)),
    ]
    if case.hidden:
        rng = random.Random(case.seeded(505))
        for _ in range(4):
            flags = [rng.random() < 0.3 for _ in range(rng.randint(10, 40))]
            cases.append(
                (flags, dict(init_scale=float(2 ** rng.randint(4, 20)), growth_factor=rng.choice([2.0, 4.0, 1.5]),
                             backoff_factor=rng.choice([0.5, 0.25]), growth_interval=rng.randint(1, 5)))
            )
    return cases


@register("05-scale-trace")
def probe_scale_trace(scale_trace: Callable[..., list[float]], *, case: Case) -> dict:
    """Call `scale_trace` on each overflow sequence and scaler setting of the case; record the traces."""
    return {"traces": collect(scale_cases(case), lambda c: {"returned": scale_trace(list(c[0]), **c[1])})}
