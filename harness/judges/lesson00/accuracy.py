"""00-accuracy, the judge.

`accuracy(logits, targets)` is the fraction (0..1, a float) of rows whose argmax equals the target.
"""

from __future__ import annotations

import math

import torch

from harness.checks.lesson00.accuracy import _accuracy_cases
from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.registry import judges
from harness.contract.wire import describe


def _accuracy_slip(result: float, logits: torch.Tensor, targets: torch.Tensor) -> str | None:
    """The usual slips that give `result` on (logits, targets), as a cause (candidates when several do)."""
    hits = logits.argmax(dim=1) == targets
    slips = {
        "the number of correct rows, not divided by the batch size": hits.sum().item(),
        "a division by the number of classes instead of the batch size": hits.sum().item() / logits.shape[1],
        "argmin instead of argmax (the least likely class)": (logits.argmin(dim=1) == targets).float().mean().item(),
        "the largest logit's value (max(...).values) compared with the target, not its index":
            (logits.max(dim=1).values == targets).float().mean().item(),
    }
    if logits.shape[0] >= logits.shape[1]:
        slips["the argmax over the batch (dim=0) instead of over the classes (dim=1)"] = (
            (logits.argmax(dim=0) == targets[: logits.shape[1]]).float().mean().item())
    expected = hits.float().mean().item()
    found = [slip for slip, value in slips.items()
             if math.isclose(result, value, abs_tol=1e-6) and not math.isclose(value, expected, abs_tol=1e-6)]
    if len(found) > 1:
        return "one of these slips, which all give this value here: " + "; ".join(found)
    return found[0] if found else None


@judges("00-accuracy")
def judge_accuracy(seen: dict, *, case: Case) -> str:
    """`accuracy(logits, targets)` is the fraction (0..1, a float) of rows whose argmax equals the target."""
    for (logits, targets), result in zip(_accuracy_cases(case), seen["results"], strict=True):
        expected = (logits.argmax(dim=1) == targets).float().mean().item()
        shape = tuple(logits.shape)
        if not isinstance(result, float):
            fail("not-a-float", observed=f"returned {describe(result)}", expected="a Python float",
                 cause="a tensor returned (a mean of tensors is still a tensor), or an int from integer division",
                 where="call .item() on the final scalar tensor")
        if math.isclose(result, 100 * expected, abs_tol=1e-6) and not math.isclose(expected, 0.0):
            fail("percent-not-fraction", observed=f"{result} on logits of shape {shape}",
                 expected=f"{expected} (a fraction between 0 and 1)", cause="a multiplication by 100",
                 where="the return statement")
        if not math.isclose(result, expected, abs_tol=1e-6):
            slip = _accuracy_slip(result, logits, targets)
            fail("wrong-accuracy", observed=f"{result:.4f} on logits of shape {shape}", expected=f"{expected:.4f}",
                 cause=slip or "the predicted classes or the comparison with the targets: the result matches none "
                               "of the usual slips (argmax over dim=0, argmin, a count not divided by the batch size)",
                 where="the argmax dimension, the comparison and the division")
    return "fraction of correct argmax predictions, as a float, for a batch, a single sample and two classes"
