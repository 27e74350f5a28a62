"""02-freeze-backbone, the judge.

Backbone frozen (no gradients, unchanged by a step), head trainable, also when it came in frozen.
"""

from __future__ import annotations

import functools
from typing import Any

from harness.checks.lesson02.freeze_backbone import BackboneModel, backbone_settings
from harness.contract.case import Case
from harness.contract.compare import same_values, tensor
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.inputs import seeded
from harness.contract.registry import judges
from harness.judges.lesson02.common import _no_exception


def _strings(value: Any, what: str) -> list[str]:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"{what} is not a list of names")
    return value


def _attribute_set(record: dict[str, Any]) -> list[str]:
    """The backbone modules (the backbone or one inside it) on which a `requires_grad` attribute was set."""
    return [m for m in _strings(record["attribute_set"], "the modules with an attribute")
            if m == "backbone" or m.startswith("backbone.")]


def _backbone_cause(trainable: list[str], names: list[str], record: dict[str, Any]) -> str:
    """What the recorded state says about why `trainable` backbone parameters still require grad."""
    attribute = _attribute_set(record)
    in_eval = "backbone" in _strings(record["eval_mode"], "the modules in eval mode")
    if attribute:
        return (f"`requires_grad = False` set on the module {attribute[0]} itself: a plain attribute (no underscore, "
                "no call), which changes no parameter")
    if len(trainable) < sum(n.startswith("backbone.") for n in names):
        return "only some of the backbone's parameters were frozen: your loop or test missed the ones listed"
    if in_eval:
        return "the backbone was put in eval mode: eval() switches dropout and batch norm, it does not freeze"
    return "no flag of the backbone's parameters changed: the function set them on copies (detach(), clone()), " \
           "used torch.no_grad() (which changes no parameter), or never reached them"


@judges(
    "02-freeze-backbone", unjudged=('models/*/after/head.*',),
    hints=Hints(
        nudge="Freezing is a flag on each parameter, requires_grad. Set it on every backbone parameter, and set it "
              "the other way on every head parameter.",
        concept="module.requires_grad_(flag) (with the trailing underscore: a method) sets requires_grad on every "
                "parameter of the module, nested ones included; `module.requires_grad = False` only sets an unused "
                "attribute, and eval() changes the mode, not the flags.",
        solution="model.backbone.requires_grad_(False); model.head.requires_grad_(True)",
        section="5. Freezing part of a model"),
    requires={
        "backbone-trainable": Requirement(
            "every parameter of the backbone (nested ones included) is frozen",
            hint="Print [n for n, p in model.named_parameters() if p.requires_grad] after your function: which "
                 "backbone parameters are still there, and did your code change their flag at all?"),
        "head-frozen": Requirement(
            "every parameter of the head is trainable, even if it was frozen before",
            hint="Freeze the head by hand first (model.head.requires_grad_(False)), then run your function: is the "
                 "head trainable afterwards?"),
    },
)
def judge_freeze_backbone(seen: dict, *, case: Case) -> str:
    """Backbone frozen (no gradients, unchanged by a step), head trainable, also when it came in frozen."""
    for (seed, width, head_frozen_before), record in zip(backbone_settings(case), seen["models"], strict=True):
        model = seeded(seed, functools.partial(BackboneModel, width))
        flags, names = record["requires_grad"], [n for n, _ in model.named_parameters()]
        if not (isinstance(flags, dict) and list(flags) == names):
            raise ValueError("the recorded parameters are not the model's")
        trainable_backbone = [n for n in names if n.startswith("backbone.") and flags[n] is not False]
        if trainable_backbone:
            fail("backbone-trainable", observed=f"backbone parameters still require grad: {trainable_backbone}",
                 expected="requires_grad False on every backbone parameter, nested ones included",
                 cause=_backbone_cause(trainable_backbone, names, record),
                 where="model.backbone.requires_grad_(False), or p.requires_grad_(False) for each of "
                       "model.backbone.parameters()",
                 hint="`module.requires_grad = False` only adds an attribute to the module. Which method, with an "
                      "underscore, sets the flag on every parameter it holds?" if _attribute_set(record) else None)
        frozen_head = [n for n in names if n.startswith("head.") and flags[n] is not True]
        if frozen_head:
            fail("head-frozen", observed=f"head parameters do not require grad: {frozen_head}"
                 + (" (the head came in frozen)" if head_frozen_before else ""),
                 expected="every head parameter trainable after your function, whatever its flag before",
                 cause="the head came in frozen and your function did not set its flag back to True"
                 if head_frozen_before else "your function froze them too: the whole model, or a test meant to pick "
                 "the backbone's parameters that also picks these",
                 where="model.head.requires_grad_(True)")
        _no_exception(record, "taking an SGD step on the parameters that require grad")
        after = record["after"]
        if not (isinstance(after, dict) and list(after) == names):
            raise ValueError("the recorded parameters are not the model's")
        if any(grad is not None for grad in record["backbone_grads"]):
            fail("backbone-trainable", observed="backward() still computed backbone gradients although their "
                 "requires_grad is False", expected="no gradients for frozen parameters",
                 cause="gradients put on the backbone's parameters by your function (p.grad set by hand, or a "
                       "backward run before freezing)", where="freeze before any backward; do not set .grad")
        before = dict(model.named_parameters())
        unchanged = [same_values(before[n].detach(), tensor(after[n], n, detach=True), dtype=False) for n in names]
        changed = [n for n, same in zip(names, unchanged, strict=True) if n.startswith("backbone.") and not same]
        if changed:
            fail("backbone-trainable", observed=f"your function changed backbone parameters {changed}",
                 expected="freezing leaves the values as they are", cause="the function wrote to the parameters "
                 "(an initialisation or an in-place operation) instead of only setting their flags",
                 where="only requires_grad_(False)")
        if all(same for n, same in zip(names, unchanged, strict=True) if n.startswith("head.")):
            fail("head-frozen", observed="an optimizer step left the head unchanged", expected="the head trains",
                 cause="the head's parameters require grad but received no gradient: the model's forward no longer "
                       "reaches them after your function", where="only set flags: model.head.requires_grad_(True)")
    return "backbone frozen (nested layers included), head trainable even when it came in frozen"
