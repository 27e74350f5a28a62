"""05-cast-report, the probe.

Call `report` on each input and dtype; record what it returned and the input as the call left it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.checks.lesson05.common import REDUCED
from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register


def _cast_inputs(seed: int, hidden: bool) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    low, high = (-12.0, 12.0) if hidden else (-10.0, 10.0)
    shape = (3, 4, 25) if hidden else (300,)
    exponents = torch.empty(shape).uniform_(low, high, generator=generator)
    signs = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
    x = signs * 10.0**exponents
    inputs = [x, torch.randn(shape, generator=generator)]
    if hidden:
        with_zeros = x.clone()
        with_zeros.view(-1)[::7] = 0.0
        inputs.append(with_zeros)
    return inputs


def cast_cases(case: Case) -> list[tuple[torch.Tensor, torch.dtype]]:
    """Every (float32 input, 16-bit dtype) pair of the case. Both families hold zeros, a 3-D input and an input
    where no value stays finite and nonzero (max_rel_error 0.0), visible and hidden alike."""
    seeds = (11, 12) if case.hidden else (0,)
    lost = torch.tensor([0.0, 1e-42, -1e-42, 0.0])  # zero, or underflowing in both formats
    inputs = [x for seed in seeds for x in _cast_inputs(case.seeded(seed), True)] + [lost]
    return [(x, dtype) for x in inputs for dtype in REDUCED]


@register("05-cast-report")
def probe_cast_report(report: Callable[[torch.Tensor, torch.dtype], dict], *, case: Case) -> dict:
    """Call `report` on each input and dtype; record what it returned and the input as the call left it."""
    def record(item: tuple[torch.Tensor, torch.dtype]) -> dict:
        x, dtype = item
        got = report(x, dtype)
        return {"returned": got, "input_after": x.detach().clone()}

    return {"results": collect(cast_cases(case), record)}
