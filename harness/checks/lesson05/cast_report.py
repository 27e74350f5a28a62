"""05-cast-report, the probe.

Call `report` on each input and dtype; record what it returned and the input as the call left it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.checks.lesson05.common import REDUCED
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register(
    "05-cast-report",
    hints=Hints(
        nudge="Cast to the 16-bit dtype, then back to float32 before comparing: differences computed in 16 bits "
        "are rounded too. torch.isinf, torch.isfinite and boolean masks do the counting.",
        concept="Overflow: finite before, inf after. Underflow: nonzero before, exactly 0 after (zeros do not "
        "count). The relative error is taken only where both values are finite and nonzero.",
        solution="y = x.to(dtype).float(); overflow = (isfinite(x) & isinf(y)).sum(); underflow = ((x != 0) & "
        "(y == 0)).sum(); kept = isfinite(y) & (y != 0) & (x != 0); max of |y - x| / |x| over kept, or 0.0",
        section="1. Three formats, one trade-off",
    ),
    requires={
        "input-modified": Requirement("leaves x unchanged",
                                      hint="Which operation of yours writes into x (a method ending in _, an "
                                      "assignment x[...] = ...)?"),
        "missing-key": Requirement("returns a dict with 'overflow', 'underflow' and 'max_rel_error'",
                                   hint="Print the keys of the dict you return and compare their spelling with the "
                                   "exercise's."),
        "wrong-overflow": Requirement("counts the finite values that became +-inf",
                                      hint="Which values count: those that are inf after the cast, or those that "
                                      "became inf because of it?"),
        "wrong-underflow": Requirement("counts the nonzero values that became exactly 0",
                                       hint="Does a value that was already 0 before the cast count as underflow?"),
        "wrong-rel-error": Requirement("reports the largest relative error, in float32, over the values finite "
                                       "and nonzero before and after, or 0.0 when there are none",
                                       hint="In which dtype do you subtract? And which entries do you leave out?"),
    },
)
def probe_cast_report(report: Callable[[torch.Tensor, torch.dtype], dict], *, case: Case) -> dict:
    """Call `report` on each input and dtype; record what it returned and the input as the call left it."""
    def record(item: tuple[torch.Tensor, torch.dtype]) -> dict:
        x, dtype = item
        got = report(x, dtype)
        return {"returned": got, "input_after": x.detach().clone()}

    return {"results": collect(cast_cases(case), record)}
