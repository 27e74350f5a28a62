"""01-ema-update, the probe.

Two updates per problem; record after each the EMA list, the parameters, the return value and whether
the list still holds the same tensors (stopping at the first update that replaced them or built a graph).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.checks.lesson01.common import _randn
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register("01-ema-update", hints=Hints(
    nudge="The EMA tensors must change in place, without autograd recording the update.",
    concept="In-place methods (mul_, add_, lerp_, copy_) change a tensor that others hold references to; inside "
            "torch.no_grad() autograd records nothing, so the EMA tensors stay plain tensors.",
    solution="with torch.no_grad(): for e, p in zip(ema, params): e.mul_(decay).add_(p, alpha=1 - decay)",
    section="7. `detach`, `no_grad` and `inference_mode`"),
    requires={
        "not-in-place": Requirement("updates each EMA tensor in place: the list keeps the same tensor objects",
                                    hint="After your function, is ema[0] still the tensor it was before "
                                         "(compare id(ema[0]))?"),
        "builds-graph": Requirement("updates outside autograd",
                                    hint="Print ema[0].requires_grad after one update: what recorded the update?"),
        "params-changed": Requirement("leaves the parameters unchanged",
                                      hint="Which tensor is each in-place method of yours called on?"),
        "returns-value": Requirement("returns None", hint="What does your function return?"),
        "wrong-values": Requirement("ema = decay * ema + (1 - decay) * param",
                                    hint="Work one update by hand for decay 0.9, ema 0 and param 1: 0.1 expected."),
    })
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
