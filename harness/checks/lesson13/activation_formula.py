"""13-activation-formula, the probe: Call the student's formula on each case; record what it returned."""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register


def activation_cases(case: Case) -> list[tuple[int, list[int], torch.dtype]]:
    """(batch size, widths, dtype) of each call."""
    if case.hidden:
        generator = torch.Generator().manual_seed(case.seeded(160))
        # batches of 3 or more: with a batch of 2, a missing batch factor and float64 taken for 4 bytes give the
        # same number, and the check could not tell which slip it saw
        batch, hidden = (int(v) for v in torch.randint(3, 12, (2,), generator=generator))
        return [(batch, [4, hidden, hidden + 3, 2], torch.float64), (3, [3, 5], torch.float32),
                (hidden, [7, 9, 9, 9, 9, 1], torch.bfloat16)]
    return [(5, [8, 16, 4], torch.float32), (7, [8, 16, 32, 4], torch.bfloat16), (3, [6, 10, 10, 10, 2], torch.float16)]


@register("13-activation-formula")
def probe_activation_formula(activation_formula: Callable[[int, list[int], torch.dtype], int], *, case: Case) -> dict:
    """Call the student's formula on each case; record what it returned."""
    return {"results": collect(activation_cases(case), lambda item: {
        "returned": activation_formula(item[0], list(item[1]), item[2])})}
