"""00-accuracy, the judge.

`accuracy(logits, targets)` is the fraction (0..1, a float) of rows whose argmax equals the target.
"""

from __future__ import annotations

import re

import torch

from harness.checks.lesson00.accuracy import accuracy_cases
from harness.contract.case import Case
from harness.contract.compare import isclose_number, same_number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import describe


def _slip_values(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """What each usual slip returns on (logits, targets)."""
    hits = logits.argmax(dim=1) == targets
    batch, classes = logits.shape
    slips = {
        "integer division (//) of the correct count by the batch size, which floors the fraction to 0 (1 only "
        "when every row is right)": float(hits.sum().item() // batch),
        "the number of correct rows, not divided by the batch size": hits.sum().item(),
        "a division by the number of classes instead of the batch size": hits.sum().item() / classes,
        "argmin instead of argmax (the least likely class)": (logits.argmin(dim=1) == targets).float().mean().item(),
        "the largest logit's value (max(...).values) compared with the target, not its index":
            (logits.max(dim=1).values == targets).float().mean().item(),
    }
    if batch >= classes:
        slips["the argmax over the batch (dim=0) instead of over the classes (dim=1)"] = (
            (logits.argmax(dim=0) == targets[:classes]).float().mean().item())
    return slips


def _accuracy_slip(results: list, cases: list[tuple[torch.Tensor, torch.Tensor]], index: int) -> str | None:
    """The usual slips that give results[index] on cases[index], kept to those that also give every other
    returned result when some do, as a cause (candidates when several remain)."""
    logits, targets = cases[index]
    expected = (logits.argmax(dim=1) == targets).float().mean().item()
    found = [slip for slip, value in _slip_values(logits, targets).items()
             if isclose_number(results[index], value, rel_tol=1e-9, abs_tol=1e-6)
             and not isclose_number(value, expected, rel_tol=1e-9, abs_tol=1e-6)]
    consistent = [slip for slip in found
                  if all(isinstance(result, float)
                         and isclose_number(result, _slip_values(*pair)[slip], rel_tol=1e-9, abs_tol=1e-6)
                         for pair, result in zip(cases, results, strict=False) if slip in _slip_values(*pair))]
    found = consistent or found
    if len(found) > 1:
        return "one of these slips, which all give this value here: " + "; ".join(found)
    return found[0] if found else None


def _fail_on_raised(raised: str, logits: torch.Tensor) -> None:
    """Fail for the exception the student's accuracy raised on `logits`, naming the argmax over the batch when
    the exception is the size mismatch it makes (one index per class against one target per row)."""
    batch, classes = logits.shape
    sizes = (rf"size of tensor a \({classes}\) must match the size of tensor b \({batch}\)|"
             rf"size of tensor a \({batch}\) must match the size of tensor b \({classes}\)")
    if batch != classes and re.search(sizes, raised):
        fail("wrong-accuracy", observed=f"on logits of shape {tuple(logits.shape)} your code raised {raised}",
             expected=f"one predicted class per row ({batch}), compared with the {batch} targets",
             cause=f"the argmax over the batch (dim=0) instead of over the classes (dim=1): it gives one index per "
                   f"class ({classes}), which cannot be compared with the {batch} targets",
             where="the argmax dimension", hint="Print logits.argmax(dim=0).shape and logits.argmax(dim=1).shape "
                                                "next to targets.shape: which one has one entry per row?")
    fail("raised", observed=f"on logits of shape {tuple(logits.shape)} your code raised {raised}",
         expected="it runs on the check's inputs without an exception",
         cause="the exception named here, raised inside your code", where="the line named above")


@judges(
    "00-accuracy",
    hints=Hints(
        nudge="The predicted class of each row is the index of its largest logit; compare it with the targets.",
        concept="argmax(dim=1) picks the class of each row of a (batch, classes) tensor; comparing with the "
                "targets gives booleans, and their mean is the fraction correct. .item() makes it a float.",
        solution="return (logits.argmax(dim=1) == targets).float().mean().item()",
        section="3. Exercises"),
    requires={
        "not-a-float": Requirement(
            "returns a Python float",
            hint="Print type(accuracy(logits, targets)): a one-element tensor is not a float yet."),
        "percent-not-fraction": Requirement(
            "a fraction between 0 and 1, not a percentage",
            hint="What should accuracy return when every prediction is right: 1 or 100?"),
        "wrong-accuracy": Requirement(
            "the fraction of rows whose largest logit is at the target class",
            hint="Work the 3-row example of the lesson by hand: which class does each row predict, and how many "
                 "match?"),
    },
)
def judge_accuracy(seen: dict, *, case: Case) -> str:
    """`accuracy(logits, targets)` is the fraction (0..1, a float) of rows whose argmax equals the target."""
    cases = accuracy_cases(case)
    results = seen["results"]
    for index, ((logits, targets), result) in enumerate(zip(cases, results, strict=False)):
        expected = (logits.argmax(dim=1) == targets).float().mean().item()
        shape = tuple(logits.shape)
        if not isinstance(result, float):
            fail("not-a-float", observed=f"returned {describe(result)}", expected="a Python float",
                 cause="a tensor returned (a mean of tensors is still a tensor), or an int from integer division",
                 where="call .item() on the final scalar tensor")
        if (isclose_number(result, 100 * expected, rel_tol=1e-9, abs_tol=1e-6)
                and not same_number(expected, 0.0)):
            fail("percent-not-fraction", observed=f"{result} on logits of shape {shape}",
                 expected=f"{expected} (a fraction between 0 and 1)", cause="a multiplication by 100",
                 where="the return statement")
        if not isclose_number(result, expected, rel_tol=1e-9, abs_tol=1e-6):
            slip = _accuracy_slip(results, cases, index)
            fail("wrong-accuracy", observed=f"{result:.4f} on logits of shape {shape}", expected=f"{expected:.4f}",
                 cause=slip or "the predicted classes or the comparison with the targets: the result matches none "
                               "of the usual slips (argmax over dim=0, argmin, a count not divided by the batch size)",
                 where="the argmax dimension, the comparison and the division")
    if seen.get("raised") is not None or len(results) != len(cases):
        _fail_on_raised(str(seen.get("raised")), cases[len(results)][0])
    return "fraction of correct argmax predictions, as a float, for a batch, a single sample and two classes"
