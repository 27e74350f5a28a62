"""01-logsumexp, the probe.

Record the results on the case's inputs, the gradient through the result, the masked rows, and the
torch calls the student's code made.
"""

from __future__ import annotations

from typing import Callable

import torch

from harness.checks.lesson01.common import _randn
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register("01-logsumexp", nonfinite=('masked', 'results/*'), hints=Hints(
    nudge="log(sum(exp(x))) = m + log(sum(exp(x - m))) for any m; choose m = max so that the largest exp is "
          "exp(0) = 1.",
    concept="Subtract the max along dim before exp and add it back after the log; a slice that is entirely -inf "
            "has max -inf, and -inf - (-inf) = nan, so replace a non-finite max by 0.",
    solution="m = x.amax(dim=dim, keepdim=True); m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)); "
             "return m.squeeze(dim) + (x - m).exp().sum(dim=dim).log()",
    section="4. Numerical stability: logsumexp and softmax"),
    requires={
        "not-a-tensor": Requirement("returns a torch.Tensor", hint="Keep every step a tensor operation."),
        "wrong-shape": Requirement("the shape of torch.logsumexp(x, dim): dim removed",
                                   hint="Print the shape you return for a (4, 6) input and dim=1: is it (4,)?"),
        "overflow": Requirement("finite for inputs as large as 1e4 in magnitude",
                                hint="What is torch.exp(torch.tensor(1000.0))? Which value could you subtract "
                                     "first so that no exp exceeds 1?"),
        "wrong-values": Requirement("matches torch.logsumexp(x, dim)",
                                    hint="Compare your result with torch.logsumexp on a small input (in a test cell "
                                         "of your own): what did the subtraction take away?"),
        "no-gradient": Requirement("is differentiable by autograd",
                                   hint="Does your result have a grad_fn when x requires grad? Which step leaves "
                                        "torch?"),
        "wrong-gradient": Requirement("its gradient is softmax(x)",
                                      hint="Which part of your computation does autograd not see (a detach, an "
                                           "in-place edit)?"),
        "masked-row": Requirement("returns -inf for an all -inf slice",
                                  hint="Run it on torch.full((1, 3), float('-inf')): what is the max, and what is "
                                       "x - max?"),
        "forbidden-call": Requirement("does not call torch.logsumexp or torch.softmax (nor their tensor methods)",
                                      hint="The exercise asks you to build logsumexp from max, exp, sum and log: "
                                           "which of your calls does the whole job?"),
    })
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
