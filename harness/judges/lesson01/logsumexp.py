"""01-logsumexp, the judge.

`logsumexp(x, dim)` matches torch.logsumexp without overflow, has gradient softmax(x), -inf on -inf rows,
and calls neither torch.logsumexp nor torch.softmax.
"""

from __future__ import annotations

import torch

from harness.checks.lesson01.logsumexp import lse_gradient_input, lse_inputs, masked_rows
from harness.contract.case import Case
from harness.contract.compare import max_difference
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.forbidden import forbid
from harness.contract.registry import judges
from harness.judges.lesson01.common import _recorded_tensor, _require_tensor


def _check_lse_shape(result: torch.Tensor, x: torch.Tensor, dim: int) -> None:
    expected = tuple(torch.logsumexp(x, dim).shape)
    if tuple(result.shape) != expected:
        fail("wrong-shape", observed=f"shape {tuple(result.shape)} for input {tuple(x.shape)}, dim={dim}",
             expected=f"{expected} (dim removed, as torch.logsumexp does)",
             cause="keepdim=True left in the result, or the reduction runs over another dimension",
             where="squeeze the max you subtracted before adding it back, and reduce over `dim`")


# What exercise 3 forbids: torch's own logsumexp and softmax, as functions or as tensor methods.
_LSE_FORBIDDEN = {
    "logsumexp": "the exercise asks you to build logsumexp yourself (max, exp, sum, log)",
    "special_logsumexp": "torch.special.logsumexp is torch.logsumexp under another name",
    "softmax": "the exercise forbids torch.softmax (its stability is the point of the exercise)",
    "special_softmax": "torch.special.softmax is torch.softmax under another name",
}


@judges("01-logsumexp", nonfinite=('masked', 'results/*'), hints=Hints(
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
def judge_logsumexp(seen: dict, *, case: Case) -> str:
    """`logsumexp(x, dim)` matches torch.logsumexp without overflow, has gradient softmax(x), -inf on -inf rows,
    and calls neither torch.logsumexp nor torch.softmax."""
    forbid(seen["calls"], _LSE_FORBIDDEN, where="the text of exercise 3")
    for (x, dim), result in zip(lse_inputs(case), seen["results"], strict=True):
        result = _require_tensor(result, "logsumexp", "the return statement of logsumexp")
        reference = torch.logsumexp(x, dim)
        _check_lse_shape(result, x, dim)
        if not torch.isfinite(result).all():
            fail("overflow", observed=f"non-finite results for inputs as large as {float(x.abs().max()):.3g}",
                 expected="finite values (torch.logsumexp gives them)",
                 cause="exp of a large number overflows to inf (exp(89) already overflows float32), or exp of a "
                       "very negative one underflows to 0 and log(0) = -inf",
                 where="subtract the max along `dim` before exp, and add it back after the log")
        tolerance = 1e-4 * (1 + reference.abs())
        if not ((result.double() - reference.double()).abs() <= tolerance.double()).all():
            fail("wrong-values",
                 observed=f"largest error {max_difference(result, reference):.3g} against torch.logsumexp",
                 expected="relative errors below 1e-4",
                 cause="the max is not added back, or it is subtracted along another dimension, or another "
                       "formula",
                 where="log(sum(exp(x))) = m + log(sum(exp(x - m))): subtract and add the same m")
    out = _require_tensor(seen["out"], "logsumexp", "the return statement of logsumexp")
    if not out.requires_grad:
        fail("no-gradient", observed="the result does not require grad although the input does",
             expected="a result autograd can differentiate (its gradient is softmax(x))",
             cause="the graph is cut: torch.no_grad() or .detach() around the computation, or .item(), .numpy() "
                   "or torch.tensor(...) on an intermediate",
             where="stay in torch operations on tensors from start to end")
    x = lse_gradient_input(case)
    if max_difference(_recorded_tensor(seen, "grad"), torch.softmax(x, 1)) > 1e-8:
        fail("wrong-gradient", observed="the gradient of sum(logsumexp(x, 1)) is not softmax(x, 1)",
             expected="d logsumexp / dx = softmax(x)", cause="a detach or an in-place edit inside the computation",
             where="the operations between x and the result")
    masked = _require_tensor(seen["masked"], "logsumexp", "the return statement of logsumexp")
    _check_lse_shape(masked, masked_rows(), 1)
    if not (masked[0] == 3.0 and torch.isneginf(masked[1])):
        fail("masked-row", observed=f"a row [-inf, -inf, ...] gave {masked[1].item()} "
             f"(and [-inf, 3, -inf, ...] gave {masked[0].item()})",
             expected="-inf for an all -inf row (a fully masked attention row), 3 for the other",
             cause="the row max is -inf, and x - max = -inf - (-inf) = nan",
             where="replace a non-finite max by 0 before subtracting it (torch.where(torch.isfinite(m), m, 0))")
    return ("matches torch.logsumexp on inputs up to 1e4, in float64 and along other dims, softmax gradient, "
            "-inf rows, built without torch.logsumexp or softmax")
