"""01-logsumexp, the probe.

Record the results on the case's inputs, the gradient through the result, the masked rows, and the
torch calls the student's code made.
"""

from __future__ import annotations

from typing import Callable

import torch

from harness.checks.lesson01.common import _randn
from harness.contract.case import Case
from harness.contract.forbidden import CallRecorder
from harness.contract.registry import register


def lse_inputs(case: Case) -> list[tuple[torch.Tensor, int]]:
    """(x, dim) pairs with large and shifted values; the hidden ones add float64, other dims, many scales."""
    seed = case.seeded
    if not case.hidden:
        return [(_randn(4, 6, seed=seed(0)), 1), (_randn(4, 6, seed=seed(1)) * 1000, 1),
                (_randn(3, 5, seed=seed(2)) - 1000, -1), (_randn(5, 3, seed=seed(3), dtype=torch.float64) * 1e4, 0),
                (_randn(1, 1, seed=seed(4)), 1), (_randn(2, 5, 3, seed=seed(5)) * 500, 1)]
    inputs = [(_randn(2, 7, 3, seed=seed(10)) * 500, 1), (_randn(5, 4, seed=seed(11)) * 800, 0),
              (_randn(3, 9, seed=seed(12), dtype=torch.float64) * 1e4, -1), (_randn(1, 1, seed=seed(13)), 1)]
    for scale_seed in range(8):  # random scales from 1e-3 to 1e4: the result must track torch everywhere
        scale = 10.0 ** (-3 + scale_seed)
        inputs.append((_randn(6, 5, seed=seed(20 + scale_seed)) * scale + scale / 2, 1))
    return inputs


def lse_gradient_input(case: Case) -> torch.Tensor:
    """The float64 input on which logsumexp's gradient is checked."""
    return _randn(3, 4, seed=case.seeded(31 if case.hidden else 30), dtype=torch.float64)


def masked_rows() -> torch.Tensor:
    """Two rows of -inf, the first with one finite entry 3: a partly and a fully masked attention row."""
    masked = torch.full((2, 5), float("-inf"), dtype=torch.float64)
    masked[0, 1] = 3.0
    return masked


@register("01-logsumexp")
def probe_logsumexp(logsumexp: Callable[[torch.Tensor, int], torch.Tensor], *, case: Case) -> dict:
    """Record the results on the case's inputs, the gradient through the result, the masked rows, and the
    torch calls the student's code made."""
    tracked_input = lse_gradient_input(case).requires_grad_()
    with CallRecorder() as calls:
        results = [logsumexp(x, dim) for x, dim in lse_inputs(case)]
        out = logsumexp(tracked_input, 1)
        masked = logsumexp(masked_rows(), 1)
    tracked = isinstance(out, torch.Tensor) and out.requires_grad
    grad = torch.autograd.grad(out.sum(), tracked_input)[0] if tracked else None
    return {"results": results, "out": out, "grad": grad, "masked": masked, "calls": calls.seen}
