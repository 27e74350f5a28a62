"""01-silu-function, the judge.

`SiLUFunction.apply(x)` is x * sigmoid(x) with backward grad_output * s(x)(1 + x(1 - s(x))), float64-exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.checks.lesson01.silu_function import silu_float64_input, silu_inputs
from harness.contract.case import Case
from harness.contract.compare import max_difference, same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.forbidden import forbid
from harness.contract.registry import judges
from harness.judges.lesson01.common import _recorded_tensor, _require_tensor


def _silu_grad(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


@judges("01-silu-function", hints=Hints(
    nudge="forward computes x * sigmoid(x) and saves what backward needs with ctx.save_for_backward; backward "
          "returns grad_output times the derivative.",
    concept="By the product rule, d/dx [x s(x)] = s(x) + x s(x) (1 - s(x)) = s(x) (1 + x (1 - s(x))); backward "
            "multiplies the incoming grad_output by it (the chain rule), in the input's dtype.",
    solution="(x,) = ctx.saved_tensors; s = torch.sigmoid(x); return grad_output * s * (1 + x * (1 - s))",
    section="8. A custom `autograd.Function`, proven with `gradcheck`"),
    requires={
        "not-a-function": Requirement("is a subclass of torch.autograd.Function",
                                      hint="What did you pass to check(): the class, an instance, or a function?"),
        "not-a-tensor": Requirement("forward returns a tensor", hint="What does your forward return?"),
        "input-modified": Requirement("forward leaves its input untouched",
                                      hint="Which of your operations in forward end in an underscore?"),
        "wrong-forward": Requirement("forward computes x * sigmoid(x)",
                                     hint="Evaluate your forward at x = 1: x * sigmoid(x) is 0.731."),
        "wrong-backward": Requirement("backward computes the derivative of x * sigmoid(x)",
                                      hint="x * sigmoid(x) is a product of two functions of x: which rule "
                                           "differentiates a product?"),
        "ignores-grad-output": Requirement("backward multiplies by grad_output (the chain rule)",
                                           hint="What does backward receive, and what must it do with it?"),
        "gradcheck-failed": Requirement("passes gradcheck in float64",
                                        hint="Run your Function on a float64 input: what dtype comes out of forward "
                                             "and backward?"),
        "forbidden-call": Requirement("does not call torch.nn.functional.silu",
                                      hint="The exercise asks you to write SiLU and its derivative yourself: which "
                                           "of your calls computes it for you?"),
    })
def judge_silu_function(seen: dict, *, case: Case) -> str:
    """`SiLUFunction.apply(x)` is x * sigmoid(x) with backward grad_output * s(x)(1 + x(1 - s(x))), float64-exact."""
    if seen["is_function"] is not True:
        fail("not-a-function", observed=f"got {seen.get('what')}", expected="a subclass of torch.autograd.Function",
             cause="passing an instance or a plain function",
             where="class SiLUFunction(torch.autograd.Function) and pass the class")
    for (x, grad_output), run in zip(silu_inputs(case), seen["runs"], strict=True):
        y = _require_tensor(run["y"], "SiLUFunction.apply", "the return statement of forward")
        if not same_values(_recorded_tensor(run, "x_after"), x, dtype=False):
            fail("input-modified", observed="the input changed", expected="forward leaves x untouched",
                 cause="an in-place operation such as x.sigmoid_() or x.mul_() in forward",
                 where="use out-of-place operations in forward")
        if max_difference(y, F.silu(x)) > 1e-5:
            fail("wrong-forward", observed=f"forward differs from x * sigmoid(x) by {max_difference(y, F.silu(x)):.3g}",
                 expected="SiLU(x) = x * sigmoid(x)", cause="another formula in forward", where="forward")
        grad = _recorded_tensor(run, "grad")
        expected = grad_output * _silu_grad(x)
        if max_difference(grad, expected) > 1e-4:
            ignores = max_difference(grad, _silu_grad(x)) <= 1e-4
            fail("ignores-grad-output" if ignores else "wrong-backward",
                 observed=f"the gradient differs from the true one by {max_difference(grad, expected):.3g}"
                 + (" and equals the local derivative alone" if ignores else ""),
                 expected="grad_output * s(x) * (1 + x * (1 - s(x)))",
                 cause="backward must multiply the incoming gradient (chain rule)" if ignores else
                 "the derivative of x * sigmoid(x) is not s(x) alone: the product rule adds x * s(x) * (1 - s(x))",
                 where="the return statement of backward")
    x64, grad_output64 = silu_float64_input(case)
    forbid(seen["calls"], {"silu": "the exercise asks you to write SiLU's forward and backward yourself"},
           where="the text of exercise 6")
    error64 = max(max_difference(_recorded_tensor(seen, "y64"), F.silu(x64)),
                  max_difference(_recorded_tensor(seen, "grad64"), grad_output64 * _silu_grad(x64)))
    gradcheck_passed = seen["gradcheck"] is True
    if not gradcheck_passed or error64 > 1e-10:
        fail("gradcheck-failed",
             observed="torch.autograd.gradcheck(SiLUFunction.apply, float64 input) fails" if not gradcheck_passed
             else f"on a float64 input, forward and backward differ from the exact values by {error64:.3g}",
             expected="the analytic backward agrees with finite differences in float64",
             cause="a float32 conversion (.float(), torch.float32 constants) inside forward or backward loses "
                   "precision",
             where="keep the input's dtype throughout forward and backward")
    return "forward equals x*sigmoid(x), backward equals the analytic gradient, gradcheck passes in float64"
