"""01-per-loss-gradients, the judge.

`per_loss_gradients(w, losses)` returns each loss's own gradient, separate tensors, w.grad left None.
"""

from __future__ import annotations

import torch

from harness.checks.lesson01.per_loss_gradients import gradient_problems
from harness.contract.case import Case
from harness.contract.compare import malformed, max_difference
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson01.common import _require_tensor


@judges("01-per-loss-gradients", hints=Hints(
    nudge="backward() adds into w.grad; it never overwrites it. What must happen to w.grad between two losses?",
    concept="backward() accumulates into .grad (in place, into the same tensor); setting w.grad = None makes the "
            "next backward() create a new tensor. torch.autograd.grad returns gradients without touching .grad.",
    solution="return [torch.autograd.grad(loss(w), w)[0] for loss in losses]",
    section="5. Autograd: the graph and `.grad`"),
    requires={
        "wrong-count": Requirement("returns a list with one gradient per loss",
                                   hint="How many entries does your list have for three losses?"),
        "not-a-tensor": Requirement("each gradient is a tensor", hint="Append the gradient tensor itself."),
        "aliased": Requirement("each gradient is its own tensor",
                               hint="Print [g.data_ptr() for g in gradients]: are your entries one and the same "
                                    "tensor?"),
        "accumulated": Requirement("each gradient is that of its loss alone",
                                   hint="backward() adds into w.grad. What is in w.grad when the second loss's "
                                        "backward() starts?"),
        "wrong-values": Requirement("the gradient of loss(w) with respect to w",
                                    hint="Compare your first gradient with torch.autograd.grad(losses[0](w), w)[0]."),
        "graph-kept": Requirement("plain tensors, not connected to a graph",
                                  hint="Does a returned gradient have requires_grad=True? Which argument asked for "
                                       "a graph of the gradient?"),
        "grad-left-behind": Requirement("leaves w.grad as it found it (None)",
                                        hint="Print w.grad after your function returns: the caller's next "
                                             "backward() would add into it."),
    })
def judge_per_loss_gradients(seen: dict, *, case: Case) -> str:
    """`per_loss_gradients(w, losses)` returns each loss's own gradient, separate tensors, w.grad left None."""
    calls = seen["calls"]
    if not isinstance(calls, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in calls.items()):
        malformed("the recorded calls")
    zeroed = calls.get("zero_")
    for (w, losses), run in zip(gradient_problems(case), seen["runs"], strict=True):
        count = len(losses)
        expected = [torch.autograd.grad(loss(w), w)[0] for loss in losses]
        result = run["result"]
        if not isinstance(result, (list, tuple)) or len(result) != count:
            fail("wrong-count", observed=f"returned {type_name(result)}"
                 + (f" of length {len(result)}" if isinstance(result, (list, tuple)) else ""),
                 expected=f"a list of {count} gradients, one per loss",
                 cause="one gradient of the summed losses, a return inside the loop, or something else than the "
                       "list returned",
                 where="append one gradient per loss and return the list")
        for i, grad in enumerate(result):
            _require_tensor(grad, f"entry {i}", "what you append to the list")
        if count > 1 and run["storages"] == 1:
            fail("aliased", observed=f"all {count} returned gradients are the same tensor",
                 expected="one separate tensor per loss",
                 cause=f"you appended w.grad itself, then reset it in place ({zeroed}): every entry is that one "
                       "tensor and shows only its final state" if zeroed else
                 "you appended w.grad itself, and the next backward() added into that same tensor (backward() "
                 "accumulates in place while .grad is set): every entry is one tensor, holding the sum of the "
                 "gradients",
                 where="append a tensor of its own: set w.grad = None before each backward() (a new tensor is then "
                       "made), or use torch.autograd.grad")
        for i, (grad, reference) in enumerate(zip(result, expected, strict=True)):
            if max_difference(grad, reference) > 1e-5:
                accumulated = max_difference(grad, sum(expected[: i + 1])) <= 1e-5
                fail("accumulated" if accumulated else "wrong-values",
                     observed=f"gradient {i} differs from d loss_{i} / dw by {max_difference(grad, reference):.3g}"
                     + (f" and equals the sum of the gradients of losses 0..{i}" if accumulated else ""),
                     expected="each entry the gradient of its own loss only",
                     cause="backward() accumulates into w.grad, which was never reset between losses" if accumulated
                     else "the gradient is taken of another quantity than loss(w)",
                     where="reset w.grad (to None) before each backward()")
            if grad.requires_grad:
                fail("graph-kept", observed=f"gradient {i} requires grad", expected="plain gradient tensors",
                     cause="create_graph=True (it builds a graph of the gradient), or a gradient computed by hand "
                      "from w without detaching it",
                where="drop create_graph, or detach what you return")
        if run["grad_left_behind"] is not False:
            fail("grad-left-behind", observed="w.grad is not None after your function",
                 expected="w.grad left as it was (None): the caller's next backward() would add into it",
                 cause="the last loss's gradient stays in w.grad",
                 where="set w.grad = None at the end, or use torch.autograd.grad")
    return "one separate, non-accumulated gradient per loss, w.grad left clean"
