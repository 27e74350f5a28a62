"""01-ema-update, the judge.

`ema_update_(ema, params, decay)` sets ema = decay * ema + (1 - decay) * param in place, outside autograd.
"""

from __future__ import annotations

import torch

from harness.checks.lesson01.ema_update import ema_problems
from harness.contract.case import Case
from harness.contract.compare import malformed, max_difference, same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name


@judges("01-ema-update", hints=Hints(
    nudge="The EMA tensors must change in place, without autograd recording the update.",
    concept="In-place methods (mul_, add_, lerp_, copy_) change a tensor that others hold references to; inside "
            "torch.no_grad() autograd records nothing, so the EMA tensors stay plain tensors.",
    solution="with torch.no_grad(): for e, p in zip(ema, params): e.mul_(decay).add_(p, alpha=1 - decay)",
    section="7. `detach`, `no_grad` and `inference_mode`"),
    requires={
        "not-in-place": Requirement("updates each EMA tensor in place: the list keeps the same tensor objects",
                                    hint="After your function, is ema[0] still the tensor it was before "
                                         "(compare id(ema[0]))?"),
        "builds-graph": Requirement("updates outside autograd",
                                    hint="Print ema[0].requires_grad after one update: what recorded the update?"),
        "params-changed": Requirement("leaves the parameters unchanged",
                                      hint="Which tensor is each in-place method of yours called on?"),
        "returns-value": Requirement("returns None", hint="What does your function return?"),
        "wrong-values": Requirement("ema = decay * ema + (1 - decay) * param",
                                    hint="Work one update by hand for decay 0.9, ema 0 and param 1: 0.1 expected."),
    })
def judge_ema_update(seen: dict, *, case: Case) -> str:
    """`ema_update_(ema, params, decay)` sets ema = decay * ema + (1 - decay) * param in place, outside autograd."""
    for (params, initial, decay), steps in zip(ema_problems(case), seen["runs"], strict=True):
        before = initial
        for _, step in zip(range(2), steps, strict=True):
            ema = step["ema"]
            if step["in_place"] is not True:
                fail("not-in-place", observed="the list now holds new tensors",
                     expected="the same EMA tensors, updated in place (an optimizer or a checkpoint holds references "
                              "to them)",
                     cause="ema[i] = ... (or ema[:] = [...]) rebinds the list entry instead of changing the tensor",
                     where="use in-place methods (mul_, add_, lerp_, copy_) on each EMA tensor")
            if not (isinstance(ema, list) and all(isinstance(e, torch.Tensor) for e in ema)):
                malformed("the EMA tensors")
            if any(e.requires_grad for e in ema):
                fail("builds-graph", observed="the EMA tensors require grad after the update (they have a grad_fn)",
                     expected="plain tensors, outside autograd",
                     cause="the in-place update mixed in parameters that require grad while autograd was recording",
                     where="wrap the update in torch.no_grad(), or use p.detach()")
            recorded = step["params"]
            if not (isinstance(recorded, list) and all(isinstance(p, torch.Tensor) for p in recorded)):
                malformed("the parameters")
            if any(not same_values(p.detach(), r, dtype=False) for p, r in zip(params, recorded, strict=True)):
                fail("params-changed", observed="the model parameters changed", expected="only the EMA tensors change",
                     cause="an in-place method called on the parameter",
                     where="call in-place methods on the EMA tensors only")
            if step["result"] is not None:
                fail("returns-value", observed=f"ema_update_ returned {type_name(step['result'])}",
                     expected="None (a trailing underscore means in place)", cause="a return statement",
                     where="remove the return")
            expected = [decay * b + (1 - decay) * p.detach() for b, p in zip(before, params, strict=True)]
            errors = [max_difference(e, x) for e, x in zip(ema, expected, strict=True)]
            if max(errors) > 1e-6:
                unchanged = all(same_values(e, b, dtype=False) for e, b in zip(ema, before, strict=True))
                swapped = all(max_difference(e, (1 - decay) * b + decay * p.detach()) < 1e-6
                              for e, b, p in zip(ema, before, params, strict=True))
                fail("wrong-values",
                     observed="the EMA did not change" if unchanged else f"largest error {max(errors):.3g}"
                     + (" (decay and 1 - decay are swapped)" if swapped else ""),
                     expected=f"ema = {decay} * ema + {1 - decay:.2g} * param",
                     cause="a new tensor was bound to a local name (or a copy was updated), leaving the EMA "
                           "untouched" if unchanged
                     else "the weights of old and new values", where="the update formula")
            before = ema
    return "in-place EMA of the parameters, no autograd graph, parameters untouched"
