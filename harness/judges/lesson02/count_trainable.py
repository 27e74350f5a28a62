"""02-count-trainable, the judge.

`count_trainable(model)` is the number of trainable scalars: buffers, frozen and shared parameters handled.
"""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.lesson02.count_trainable import count_models
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import Opaque, type_name


def _count_slips(model: nn.Module) -> list[tuple[int, str, str, str]]:
    """What the usual slips give on `model`: (count, failure code, cause, where to look)."""
    return [
        (sum(1 for p in model.parameters() if p.requires_grad), "counts-tensors",
         "the number of parameter tensors, not of numbers", "sum p.numel()"),
        (sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad),
         "counts-shared-twice", "a layer reachable twice is counted twice",
         "iterate model.parameters(), which lists each parameter once"),
        (sum(t.numel() for t in model.state_dict().values()), "counts-buffers",
         "state_dict() also holds buffers (BatchNorm's running statistics), which are not trained",
         "iterate model.parameters(), not state_dict()"),
        (sum(p.numel() for p in model.parameters()), "counts-frozen",
         "frozen parameters (requires_grad=False) are counted", "keep only parameters with p.requires_grad"),
    ]


@judges(
    "02-count-trainable",
    hints=Hints(
        nudge="Count numbers (numel), not tensors, and only the parameters that require grad.",
        concept="model.parameters() lists each parameter once (a shared layer too) and leaves buffers such as "
                "BatchNorm's running statistics out, unlike state_dict(); p.numel() is the number of scalars in "
                "a tensor, and p.requires_grad says whether it trains.",
        solution="return sum(p.numel() for p in model.parameters() if p.requires_grad)",
        section="3. Counting parameters"),
    requires={
        "not-an-int": Requirement(
            "returns a Python int",
            hint="What type does your function return? type(count_trainable(nn.Linear(2, 2))) should be int."),
        "counts-tensors": Requirement(
            "counts scalars, not tensors",
            hint="nn.Linear(10, 12) has 2 parameter tensors but 132 numbers. What gives a tensor's number of "
                 "elements?"),
        "counts-shared-twice": Requirement(
            "a shared parameter counted once",
            hint="A layer assigned to two attributes is one layer. Which iteration over parameters lists it once?"),
        "counts-buffers": Requirement(
            "buffers (BatchNorm's running statistics) excluded",
            hint="Compare list(nn.BatchNorm1d(3).state_dict()) with the names in its named_parameters()."),
        "counts-frozen": Requirement(
            "frozen parameters (requires_grad False) excluded",
            hint="Only parameters that train count. Which attribute of a parameter tells?"),
        "wrong-count": Requirement(
            "the number of trainable scalars, nested modules included",
            hint="Try your function on nn.Sequential(nn.Sequential(nn.Linear(2, 3)), nn.Linear(3, 1)): it should "
                 "give 13. Does it reach nested layers and every kind of parameter?"),
    },
)
def judge_count_trainable(seen: dict, *, case: Case) -> str:
    """`count_trainable(model)` is the number of trainable scalars: buffers, frozen and shared parameters handled."""
    for (description, model), result in zip(count_models(case), seen["counts"], strict=True):
        if isinstance(result, (torch.Tensor, Opaque)) or not isinstance(result, int) or isinstance(result, bool):
            kind = type_name(result)
            causes = {"Tensor": "a torch reduction (torch.tensor(...).sum(), torch.stack(...).sum()) returns a tensor",
                      "float": "a float: a division (/) or a float term in the sum",
                      "int64": "numpy's sum or prod returns a numpy integer, not a Python int"}
            fail("not-an-int", observed=f"returned {kind} for {description}", expected="a Python int",
                 cause=causes.get(kind, f"the result is {kind}, not int"),
                 where="sum the Python ints p.numel(), or convert the result with int(...)")
        expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if result == expected:
            continue
        slips = [slip for slip in _count_slips(model) if slip[0] == result]
        if slips:
            fail(slips[0][1], observed=f"{result} for {description}", expected=f"{expected} trainable numbers",
                 cause=" or ".join(cause for _, _, cause, _ in slips), where="; ".join(w for *_, w in slips))
        fail("wrong-count", observed=f"{result} for {description}", expected=f"{expected} trainable numbers",
             cause="none of the usual slips (tensors counted, a shared layer twice, buffers, frozen parameters) "
                   "gives this number: some parameters are missed (in nested modules, or of some layer types) or "
                   "counted in another way",
             where="sum(p.numel() for p in model.parameters() if p.requires_grad) walks every nested module")
    return "counts trainable scalars: nested modules, buffers, frozen and shared parameters handled"
