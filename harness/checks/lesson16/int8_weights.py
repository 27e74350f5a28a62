"""16-int8-weights, the probe.

Call `quantize_per_channel(weight)` on each case's weights; record what it returned and the weight after the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register


def case_weights(case: Case) -> list[torch.Tensor]:
    """The weights of each call: a float32 matrix whose rows differ in size by orders of magnitude, with one
    all-zero row (a pruned or dead unit), square so that a scale without keepdim broadcasts instead of raising
    (its shape then tells the mistake); then the same matrix in bfloat16 (the scale must keep the weight's dtype).
    Hidden: a larger matrix and, last, one with more columns than rows."""
    generator = torch.Generator().manual_seed(case.seeded(1800 + (5 if case.hidden else 0)))
    weights = []
    for rows, cols, zero in [(16, 16, 11), (16, 33, 5)] if case.hidden else [(6, 6, 3)]:
        magnitude = 10.0 ** torch.linspace(-3, 1, rows).unsqueeze(1)
        weight = torch.randn(rows, cols, generator=generator) * magnitude
        weight[zero] = 0.0
        weights.append(weight)
    weights.insert(1, weights[0].to(torch.bfloat16))
    return weights


@register("16-int8-weights")
def probe_int8_weights(quantize_per_channel: Callable[[torch.Tensor], Any], *, case: Case) -> dict:
    """Call `quantize_per_channel(weight)` on each case's weights; record what it returned and the weight after
    the call."""
    def record(weight: torch.Tensor) -> dict:
        returned = quantize_per_channel(weight)
        return {"returned": tuple(returned) if isinstance(returned, (tuple, list)) else returned,
                "weight_after": weight.detach().clone()}

    return {"results": collect(case_weights(case), record)}
