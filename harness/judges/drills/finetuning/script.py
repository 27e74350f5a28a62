"""The fine-tuning script drill with three bugs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, tensor_dict
from harness.contract.failure import fail
from harness.drills.bank.finetuning import (
    SCRIPT_BATCHES,
    SCRIPT_CLASSES,
    SCRIPT_STARTER,
    finetune_lr,
    script_model,
    shifted_batches,
    state_copy,
)
from harness.drills.core import Answers
from harness.drills.support import edited, with_fixes
from harness.judges.drills.finetuning.common import changed_entries, counted_steps
from harness.judges.drills.whys import add_answers


def _head_grads(case: Case, head: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                softmax_first: bool) -> dict[str, torch.Tensor]:
    model = script_model(case)
    model.eval()
    with torch.no_grad():
        model.head.weight.copy_(head["head.weight"])
        model.head.bias.copy_(head["head.bias"])
    logits = model(x)
    F.cross_entropy(logits.softmax(-1) if softmax_first else logits, y).backward()
    return {"head.weight": model.head.weight.grad, "head.bias": model.head.bias.grad}


def _judge_finetuning_script(seen: dict, *, case: Case) -> str:
    where = "finetune"
    start = state_copy(script_model(case))
    state = tensor_dict(seen.get("state"), "the model's state")
    moved = changed_entries(start, state, "backbone.")
    if moved:
        fail("backbone-changed", observed=f"{moved[0]} changed", expected="a frozen backbone",
             cause="the backbone was unfrozen or handed to the optimizer", where=where)
    drifted = changed_entries(start, state, "backbone.1.", ("running_mean", "running_var"))
    if drifted:
        fail("bn-stats-changed", observed="the frozen backbone's BatchNorm running statistics moved",
             expected="the pretrained statistics untouched",
             cause="the backbone's BatchNorm ran in train mode during training: it normalised with batch "
             "statistics and overwrote the pretrained ones",
             where="the calls that set each module's mode before the loop")
    steps = counted_steps(seen, SCRIPT_BATCHES, where)
    previous = None
    batches = shifted_batches(case, 71, SCRIPT_BATCHES, SCRIPT_CLASSES)
    for i, ((x, y), step) in enumerate(zip(batches, steps, strict=True)):
        params = tensor_dict(step.get("params"), "recorded parameters")
        grads = step.get("grads")
        if not isinstance(grads, dict) or set(params) != {"head.weight", "head.bias"}:
            fail("frozen-params-in-optimizer", observed=f"the optimizer holds {sorted(params)}",
                 expected="the head's weight and bias", cause="the optimizer must hold the trainable head only",
                 where=where)
        want = _head_grads(case, params, x, y, softmax_first=False)
        got = grads.get("head.weight"), grads.get("head.bias")
        if (close_values(got[0], want["head.weight"], atol=1e-5, rtol=1e-4)
                and close_values(got[1], want["head.bias"], atol=1e-5, rtol=1e-4)):
            previous = got
            continue
        if all(g is None or (isinstance(g, torch.Tensor) and g.abs().sum() == 0) for g in got):
            fail("gradients-cleared", observed=f"at step {i} the optimizer saw no gradient (None or zeros)",
                 expected="the gradient of this batch's loss", cause="zero_grad() ran between backward() and step()",
                 where="where zero_grad sits in the loop")
        if previous is not None and close_values(got[0], want["head.weight"] + previous[0], atol=1e-5, rtol=1e-4):
            fail("missing-zero-grad", observed=f"at step {i} the gradient is this batch's plus the previous one's",
                 expected="this batch's gradient only", cause="gradients accumulate in .grad until zeroed",
                 where="the loop: what happens to .grad between steps")
        softmaxed = _head_grads(case, params, x, y, softmax_first=True)
        if close_values(got[0], softmaxed["head.weight"], atol=1e-5, rtol=1e-4):
            fail("double-softmax", observed=f"at step {i} the gradient is that of cross_entropy(softmax(logits))",
                 expected="the gradient of cross_entropy(logits)",
                 cause="F.cross_entropy applies log_softmax itself: a softmax before it squashes the logits into "
                 "[0, 1] and shrinks every gradient", where="what F.cross_entropy receives")
        fail("wrong-gradient", observed=f"at step {i} the optimizer saw a gradient unlike cross_entropy's",
             expected="the gradient of F.cross_entropy(model(x), y) for this batch",
             cause="the loss or the forward pass differs from the prompt's", where=where)
    reference = script_model(case)
    reference.backbone.requires_grad_(False)
    reference.train()
    reference.backbone.eval()
    optimizer = torch.optim.SGD(reference.head.parameters(), lr=finetune_lr(case), momentum=0.9)
    for x, y in shifted_batches(case, 71, SCRIPT_BATCHES, SCRIPT_CLASSES):
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(reference(x), y).backward()
        optimizer.step()
    for name in ("head.weight", "head.bias"):
        expect.close(f"the trained {name}", state.get(name), reference.state_dict()[name], atol=1e-5, rtol=1e-5,
                     where=where, cause="the update differs from SGD(lr, momentum=0.9)")
    return "frozen backbone with its pretrained statistics, fresh gradients of the right loss, SGD with momentum"


_SCRIPT_SOLUTION = '''import torch
import torch.nn.functional as F


def finetune(model, batches, lr):
    """Train the new head of a pretrained classifier; the backbone stays frozen."""
    model.backbone.requires_grad_(False)
    optimizer = torch.optim.SGD(model.head.parameters(), lr=lr, momentum=0.9)
    model.train()
    model.backbone.eval()  # keep the pretrained BatchNorm statistics
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
    return model
'''


_FIX_BN = ("    model.backbone.eval()  # keep the pretrained BatchNorm statistics\n    model.train()\n",
           "    model.train()\n    model.backbone.eval()  # keep the pretrained BatchNorm statistics\n")


_FIX_SOFTMAX = ("        probs = logits.softmax(dim=-1)\n        loss = F.cross_entropy(probs, y)\n",
                "        loss = F.cross_entropy(logits, y)\n")


_FIX_ZERO = ("    for x, y in batches:\n", "    for x, y in batches:\n        optimizer.zero_grad(set_to_none=True)\n")


def _finetuning_script_fixed(*fixes: tuple[str, str]) -> str:
    return with_fixes(SCRIPT_STARTER, *fixes)


add_answers(
    Answers(
        drill_id="finetuning-script-three-bugs",
        solution=_SCRIPT_SOLUTION,
        wrong_answers=(
            (_finetuning_script_fixed(_FIX_BN, _FIX_ZERO), "double-softmax"),
            (_finetuning_script_fixed(_FIX_BN, _FIX_SOFTMAX), "missing-zero-grad"),
            (_finetuning_script_fixed(_FIX_SOFTMAX, _FIX_ZERO), "bn-stats-changed"),
            (edited(_finetuning_script_fixed(_FIX_BN, _FIX_SOFTMAX),
                    ("        loss.backward()\n",
                     "        loss.backward()\n        optimizer.zero_grad()\n")),
             "gradients-cleared"),
            (edited(_finetuning_script_fixed(_FIX_BN, _FIX_SOFTMAX, _FIX_ZERO), (", momentum=0.9", "")), "wrong-value"),
        ),
        judge=_judge_finetuning_script,
    )
)
