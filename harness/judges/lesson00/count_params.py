"""00-count-params, the judge.

`count_trainable_parameters(model)` is the number of trainable scalars (frozen ones, buffers excluded,
shared weights once).
"""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.lesson00.count_params import counted_models
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import Opaque, describe


def _miscounts(model: nn.Module) -> dict[str, tuple[int, str]]:
    """What the usual miscounts give on `model`: failure code -> (count, what was counted)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    buffers = sum(b.numel() for b in model.buffers())
    return {
        "counts-tensors": (len(trainable), "the number of trainable parameter tensors, not their elements"),
        "counts-frozen": (sum(p.numel() for p in model.parameters()), "frozen parameters included"),
        "counts-buffers": (sum(p.numel() for p in trainable) + buffers, "buffers included"),
        "shared-counted-twice": (sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False)
                                     if p.requires_grad), "the shared weight counted twice"),
    }


_MISCOUNT_CAUSES = {
    "counts-tensors": ("counting tensors (len of the parameter list) instead of their elements",
                       "use p.numel() for each parameter p"),
    "counts-frozen": ("not filtering on p.requires_grad", "the condition inside your sum"),
    "counts-buffers": ("iterating model.state_dict() or model.buffers(), which hold BatchNorm's running "
                       "statistics: they are not parameters", "iterate model.parameters()"),
    "shared-counted-twice": ("iterating named_parameters(remove_duplicate=False) or each module's own "
                             "parameters, which yields a shared weight once per layer",
                             "iterate model.parameters(), which yields a shared weight once"),
}


@judges(
    "00-count-params",
    hints=Hints(
        nudge="model.parameters() yields every parameter tensor once; .numel() counts a tensor's elements, and "
              ".requires_grad says whether it will be trained.",
        concept="A model's trainable size is the sum of the element counts of its parameters that require "
                "grad; buffers (BatchNorm statistics) are not parameters, and a shared weight is one parameter.",
        solution="return sum(p.numel() for p in model.parameters() if p.requires_grad)",
        section="3. Exercises"),
    requires={
        "not-an-int": Requirement(
            "returns a Python int",
            hint="Print type(count_trainable_parameters(model)): is it an int, or a tensor?"),
        "counts-tensors": Requirement(
            "counts scalar parameters, not parameter tensors",
            hint="A Linear(5, 8) has 2 parameter tensors but 48 numbers: which one does your function count?"),
        "counts-frozen": Requirement(
            "excludes frozen parameters (requires_grad=False)",
            hint="Freeze a layer with p.requires_grad_(False): does your count go down?"),
        "counts-buffers": Requirement(
            "counts parameters only, not buffers such as BatchNorm's running statistics",
            hint="Compare model.state_dict() with model.parameters() on a model with BatchNorm: what is in one "
                 "and not the other?"),
        "shared-counted-twice": Requirement(
            "counts a weight shared by two layers once",
            hint="Two layers can hold the very same weight tensor: does your loop see it twice?"),
        "wrong-count": Requirement(
            "the count is the number of trainable scalars",
            hint="Count by hand for nn.Linear(5, 8): 5 * 8 weights + 8 biases. Does your function agree?"),
    },
)
def judge_count_params(seen: dict, *, case: Case) -> str:
    """`count_trainable_parameters(model)` is the number of trainable scalars (frozen ones, buffers excluded,
    shared weights once)."""
    for index, (model, counted) in enumerate(zip(counted_models(case), seen["counts"], strict=True)):
        expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
        kind = ("MLP", "partly frozen CNN with BatchNorm", "model with a shared weight")[index]
        name = f"{kind} ({type(model).__name__})"
        if isinstance(counted, (torch.Tensor, Opaque)) or not isinstance(counted, int) or isinstance(counted, bool):
            fail("not-an-int", observed=f"returned {describe(counted)}", expected="a Python int",
                 cause="a sum of tensors (a tensor), a float, or len() of something else",
                 where="the return statement: sum the .numel() of the tensors (ints)")
        if counted == expected:
            continue
        wrong = [code for code, (count, _) in _miscounts(model).items() if count == counted and count != expected]
        if wrong:
            code = wrong[0]
            cause, where = _MISCOUNT_CAUSES[code]
            fail(code, observed=f"{counted} for the {name} ({_miscounts(model)[code][1]})",
                 expected=f"{expected} trainable scalar parameters", cause=cause, where=where)
        state = sum(t.numel() for t in model.state_dict().values())
        if counted == state:
            fail("counts-buffers", observed=f"{counted} for the {name}: the size of its state_dict()",
                 expected=f"{expected} trainable scalar parameters",
                 cause="state_dict() holds buffers (BatchNorm's running statistics) and frozen parameters, and "
                       "lists a shared weight under each name",
                 where="iterate model.parameters(), filtering on p.requires_grad")
        nested = sum(p.numel() for module in model.modules() for p in module.parameters() if p.requires_grad)
        fail("wrong-count", observed=f"{counted} for the {name}", expected=str(expected),
             cause="model.modules() walked with each module's parameters(), which include its children's: nested "
                   "parameters are counted at every level" if counted == nested else
                   "a count of something else than elements (p.shape[0] or len(p) counts rows only), or a "
                   "filter that skips some trainable parameters",
             where="sum p.numel() over model.parameters() where p.requires_grad")
    return "trainable scalars counted (frozen parameters, buffers and shared weights handled)"
