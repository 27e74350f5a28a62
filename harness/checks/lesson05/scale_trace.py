"""05-scale-trace, the probe.

Call `scale_trace` on each overflow sequence and scaler setting of the case; record the traces.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register(
    "05-scale-trace",
    hints=Hints(
        nudge="Keep two numbers: the scale and a count of finite steps in a row. An overflow multiplies the scale by "
        "backoff_factor and restarts the count; growth_interval finite steps in a row multiply it by "
        "growth_factor.",
        concept="scaler.update() after each step: on an overflow, scale *= backoff_factor and the count of clean "
        "steps restarts; after growth_interval clean steps in a row, scale *= growth_factor and the count restarts.",
        solution="for overflow in overflows: if overflow: scale *= backoff_factor; tracker = 0  else: tracker += 1; "
        "if tracker == growth_interval: scale *= growth_factor; tracker = 0 -- append scale after every step.",
        section="4. The GradScaler",
    ),
    requires={
        "not-a-list": Requirement("returns a list of scales",
                                  hint="Print what your function returns for three steps: a list of three numbers?"),
        "wrong-length": Requirement("returns one scale per step (the value after that step's update)",
                                    hint="For overflows=[] what should come back? For [False]? Is the initial "
                                    "scale in your list?"),
        "no-backoff": Requirement("an overflow lowers the scale",
                                  hint="What must happen to the scale on a step whose gradients overflowed?"),
        "wrong-backoff": Requirement("an overflow multiplies the scale by backoff_factor",
                                     hint="Which factor does your code use on an overflow: the argument, or a "
                                     "number of your own?"),
        "tracker-not-reset": Requirement("an overflow restarts the count of clean steps",
                                         hint="After an overflow, how many clean steps in a row have there been?"),
        "wrong-growth": Requirement("the scale grows by growth_factor after growth_interval clean steps in a row",
                                    hint="Trace [False] * 4 with growth_interval=2 by hand: at which steps must the "
                                    "scale grow, and by which factor?"),
    },
)
def probe_scale_trace(scale_trace: Callable[..., list[float]], *, case: Case) -> dict:
    """Call `scale_trace` on each overflow sequence and scaler setting of the case; record the traces."""
    return {"traces": collect(scale_cases(case), lambda c: {"returned": scale_trace(list(c[0]), **c[1])})}
