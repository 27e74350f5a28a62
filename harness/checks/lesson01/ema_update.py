"""01-ema-update, the probe.

Two updates per problem; record after each the EMA list, the parameters, the return value and whether
the list still holds the same tensors (stopping at the first update that replaced them or built a graph).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.checks.lesson01.common import _randn
from harness.contract.case import Case
from harness.contract.registry import register


def ema_problems(case: Case) -> list[tuple[list[torch.Tensor], list[torch.Tensor], float]]:
    """(params, ema, decay) triples; params require grad, the EMA tensors do not (single values among them)."""
    settings = [([(4, 3), (3,), (1,)], 0.9, 0)] if not case.hidden else [([(2, 5), (5,), (1,)], 0.99, 10),
                                                                          ([(6,)], 0.75, 20)]
    problems = []
    for shapes, decay, seed in settings:
        params = [_randn(*s, seed=case.seeded(seed + i)).requires_grad_() for i, s in enumerate(shapes)]
        ema = [_randn(*s, seed=case.seeded(seed + 50 + i)) for i, s in enumerate(shapes)]
        problems.append((params, ema, decay))
    return problems


@register("01-ema-update")
def probe_ema_update(ema_update_: Callable[..., Any], *, case: Case) -> dict:
    """Two updates per problem; record after each the EMA list, the parameters, the return value and whether
    the list still holds the same tensors (stopping at the first update that replaced them or built a graph)."""
    runs: list[list[dict]] = []
    for params, ema, decay in ema_problems(case):
        identities = [(id(e), e.data_ptr()) for e in ema]
        steps: list[dict] = []
        runs.append(steps)
        for _ in range(2):
            result = ema_update_(ema, params, decay)
            in_place = [(id(e), e.data_ptr()) for e in ema] == identities
            steps.append({"result": result, "in_place": in_place,
                          "ema": [e.clone() if isinstance(e, torch.Tensor) else e for e in ema],
                          "params": [p.detach().clone() for p in params]})
            if not in_place or any(e.requires_grad for e in ema):
                return {"runs": runs}
    return {"runs": runs}
