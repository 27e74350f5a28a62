"""The judge side of the autograd drills (`harness.drills.bank.autograd`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, malformed, same_values
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.autograd import (
    INPLACE_STARTER,
    custom_silu_inputs,
    detach_inputs,
    inplace_inputs,
    saliency_setup,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _tensor_or_none(value: Any, what: str) -> torch.Tensor | None:
    if value is not None and not isinstance(value, torch.Tensor):
        malformed(f"{what}: expected a tensor or None, got {describe(value)}")
    return value


def _judge_silu(seen: dict, *, case: Case) -> str:
    outputs = seen.get("outputs")
    inputs = custom_silu_inputs(case)
    if not isinstance(outputs, list) or len(outputs) != len(inputs) or not all(isinstance(o, dict) for o in outputs):
        malformed("outputs missing")
    for (x, grad_output), out in zip(inputs, outputs, strict=True):
        x = x.clone().requires_grad_(True)
        want = torch.nn.functional.silu(x)
        expect.close("SiLU.apply(x)", out.get("y"), want.detach(), atol=1e-10, rtol=1e-10, where="forward",
                     cause="the forward is not x * sigmoid(x)")
        if out.get("node") != "SiLUBackward":
            fail("not-custom-backward", observed=f"the output's grad_fn is {describe(out.get('node'))}",
                 expected="SiLUBackward: the backward of your Function", cause="the forward returns the result of "
                 "a built-in op that autograd differentiates itself (or a tensor cut from the graph): your backward "
                 "never runs", where="forward returns x * torch.sigmoid(x) and backward computes the derivative")
        want.backward(grad_output)
        got = _tensor_or_none(out.get("grad"), "x.grad")
        if got is None or got.shape != x.shape or not close_values(got, x.grad, atol=1e-10, rtol=1e-8, dtype=False):
            fail("wrong-backward", observed="x.grad after y.backward(g) with a random g differs from the derivative",
                 expected="g * σ(x) * (1 + x * (1 − σ(x)))",
                 cause="a wrong derivative, or grad_output not multiplied in", where="backward(ctx, grad_output)")
    return "forward matches F.silu; your backward gives g·σ(x)(1 + x(1 − σ(x))) for a random upstream g"


def _judge_inplace(seen: dict, *, case: Case) -> str:
    outputs, inputs = seen.get("outputs"), inplace_inputs(case)
    if not isinstance(outputs, list) or len(outputs) != len(inputs) or not all(isinstance(o, dict) for o in outputs):
        malformed("outputs missing")
    for (x, w), out in zip(inputs, outputs, strict=True):
        w = w.clone().requires_grad_(True)
        loss = (2 * torch.sigmoid(x @ w)).sum()
        loss.backward()
        expect.close("the returned loss", out.get("loss"), loss.detach(), atol=1e-5, rtol=1e-5, where="gated",
                     cause="the function no longer computes 2·sigmoid(x @ w) summed")
        got = _tensor_or_none(out.get("grad"), "w.grad")
        if got is None:
            fail("graph-cut", observed="loss.backward() left w.grad = None", expected="a gradient for w",
                 cause="the ×2 was applied to a detached tensor (or under no_grad): the loss has no graph back to w",
                 where="gated: what happens to h after sigmoid")
        if got.shape != w.shape or not close_values(got, w.grad, atol=1e-5, rtol=1e-4, dtype=False):
            fail("wrong-gradient", observed=f"w.grad differs from the true gradient by up to "
                 f"{(got - w.grad).abs().max().item() if got.shape == w.shape else float('nan'):.3g}",
                 expected="the gradient of sum(2·sigmoid(x @ w))", cause="h.data.mul_(2) (or an in-place change "
                 "under no_grad on .data) hides the change from autograd's version counter: no error, but "
                 "sigmoid's backward then uses the doubled output and computes a wrong gradient",
                 where="gated: what happens to h after sigmoid")
    return "backward works, the value is still 2·sigmoid(x @ w) summed, and w.grad is right"


def _judge_detach(seen: dict, *, case: Case) -> str:
    online, target = detach_inputs(case)
    expect.close("loss", seen.get("loss"), ((online - target) ** 2).mean(), atol=1e-6, rtol=1e-6,
                 where="target_loss", cause="the loss should be the mean squared difference")
    target_grad = _tensor_or_none(seen.get("target_grad"), "target.grad")
    if target_grad is not None and target_grad.abs().sum() > 0:
        fail("target-gets-gradient", observed="the target network's tensor received a gradient",
             expected="no gradient flows into the target", cause="the target is not detached",
             where="use target.detach() in the loss")
    online_grad = _tensor_or_none(seen.get("online_grad"), "online.grad")
    if online_grad is None:
        fail("online-no-gradient", observed="no gradient reached the online tensor", expected="a gradient",
             cause="the online side was detached too (or computed under no_grad)", where="detach only the target")
    expect.close("online.grad", online_grad, 2 * (online - target) / online.numel(), atol=1e-6, rtol=1e-5,
                 where="target_loss", cause="the online side's gradient is not that of the mean squared difference")
    return "gradient flows into online only, with the right value"


def _judge_saliency(seen: dict, *, case: Case) -> str:
    model, x, targets, accumulated = saliency_setup(case)
    grads = seen.get("param_grads")
    if not isinstance(grads, list) or len(grads) != len(accumulated):
        malformed("parameter gradients missing")
    for got, before in zip(grads, accumulated, strict=True):
        if _tensor_or_none(got, "a parameter's .grad") is None or got.shape != before.shape \
                or not same_values(got, before, dtype=False):
            fail("params-grad-changed", observed="the model's parameters' .grad changed during the call",
                 expected="the gradients the training loop had accumulated, untouched",
                 cause="loss.backward() writes into every parameter's .grad (and model.zero_grad() erases them): "
                 "torch.autograd.grad(output, x) returns the input gradient without touching .grad",
                 where="(grad,) = torch.autograd.grad(picked, x)")
    if seen.get("x_requires_grad") is not False or seen.get("x_grad") is not False:
        fail("input-mutated", observed="the caller's x now requires grad (or has a .grad)",
             expected="the caller's tensor as it was", cause="x.requires_grad_() changes the caller's tensor",
             where="x = x.detach().clone().requires_grad_(True) inside the function")
    xr = x.clone().requires_grad_(True)
    picked = model(xr).gather(1, targets[:, None])
    (want,) = torch.autograd.grad(picked.sum(), xr)
    got = seen.get("result")
    if isinstance(got, torch.Tensor) and close_values(got * len(x), want, atol=1e-6, dtype=False):
        fail("mean-not-sum", observed="the gradients are the expected ones divided by the batch size",
             expected="each sample's own gradient", cause="backward from .mean() over the batch scales every "
             "sample's gradient by 1/N; the samples are independent, so .sum() gives each its own gradient",
             where="the reduction before autograd.grad")
    expect.close("input_gradients(model, x, targets)", got, want, atol=1e-6, rtol=1e-5, where="the logit you "
                 "differentiate", cause="logits[:, targets] picks every target for every sample (an (N, N) "
                 "block): pick one logit per row with logits.gather(1, targets[:, None])")
    return "each sample's gradient of its target logit, with the model's .grad and the caller's x untouched"


_SALIENCY_SOLUTION = '''import torch


def input_gradients(model, x, targets):
    x = x.detach().clone().requires_grad_(True)
    picked = model(x).gather(1, targets[:, None]).sum()
    (grad,) = torch.autograd.grad(picked, x)
    return grad
'''


add_answers(
    Answers(
        drill_id="autograd-inplace-trap",
        solution=edited(INPLACE_STARTER,
                        ("    h.mul_(2)\n",
                         "    h = h * 2  # out of place: sigmoid's backward needs its output\n")),
        wrong_answers=(
            (edited(INPLACE_STARTER, ("    h.mul_(2)\n", "    h = h.detach() * 2\n")), "graph-cut"),
            (edited(INPLACE_STARTER, ("    h.mul_(2)\n", "")), "wrong-value"),
            (edited(INPLACE_STARTER, ("    h.mul_(2)\n", "    h.data.mul_(2)\n")), "wrong-gradient"),
        ),
        judge=_judge_inplace,
    )
)


add_answers(
    Answers(
        drill_id="autograd-detach-target",
        solution="import torch\n\n\ndef target_loss(online, target):\n"
        "    return ((online - target.detach()) ** 2).mean()\n",
        wrong_answers=(
            ("import torch\n\ndef target_loss(online, target):\n    return ((online - target) ** 2).mean()\n",
             "target-gets-gradient"),
            ("import torch\n\ndef target_loss(online, target):\n    with torch.no_grad():\n"
             "        return ((online - target) ** 2).mean()\n", "online-no-gradient"),
            ("import torch\n\ndef target_loss(online, target):\n    return ((online.detach() - target) ** 2).mean()\n",
             "target-gets-gradient"),
        ),
        judge=_judge_detach,
    )
)


add_answers(
    choice_answers(
        "autograd-inference-mode",
        options=(
            ("inference_mode is faster, but its tensors cannot enter autograd later",
             "inference_mode also skips version counters and view tracking: cheaper, but a tensor made under it "
             "cannot be saved for a backward pass outside it"),
            ("they are aliases: inference_mode is the newer name for no_grad",
             "they differ: no_grad only stops recording; its tensors are normal tensors usable in autograd later"),
            ("inference_mode also turns dropout and batch norm to eval mode",
             "grad modes never touch modules: dropout and batch norm read module.training, set by model.eval()"),
            ("tensors created under no_grad can never take part in autograd afterwards",
             "no_grad tensors are ordinary tensors (requires_grad=False); it is inference tensors that cannot"),
        ),
        key="a",
    )
)


add_answers(
    Answers(
        drill_id="autograd-input-gradients",
        solution=_SALIENCY_SOLUTION,
        wrong_answers=(
            ("import torch\n\ndef input_gradients(model, x, targets):\n"
             "    x = x.detach().clone().requires_grad_(True)\n"
             "    model(x).gather(1, targets[:, None]).sum().backward()\n    return x.grad\n", "params-grad-changed"),
            (edited(_SALIENCY_SOLUTION,
                    ("    x = x.detach().clone().requires_grad_(True)\n",
                     "    x.requires_grad_(True)\n")), "input-mutated"),
            (edited(_SALIENCY_SOLUTION, (".sum()\n", ".mean()\n")), "mean-not-sum"),
            (edited(_SALIENCY_SOLUTION,
                    ("model(x).gather(1, targets[:, None])", "model(x)[:, targets]")),
             "wrong-value"),
        ),
        judge=_judge_saliency,
    )
)


add_answers(
    choice_answers(
        "autograd-two-losses-one-graph",
        options=(
            ("(loss1 + loss2).backward(): one pass through the shared encoder graph",
             "gradients add, so the sum's gradient equals the two calls' total; the encoder's graph is walked once. "
             "loss1.backward(retain_graph=True) also works, but keeps the buffers alive and walks the encoder twice"),
            ("h = encoder(x).detach(), so that each of the two losses gets a graph of its own",
             "detach cuts the encoder out of both graphs: the error goes away because the encoder gets no gradient"),
            ("call optimizer.zero_grad() between the two backward calls",
             "zero_grad does not bring back the freed saved tensors, and it would erase loss1's gradient"),
            ("wrap the second backward call in torch.no_grad(), as it needs no new graph",
             "no_grad controls what the forward records; the backward through freed buffers still raises"),
        ),
        key="a",
    )
)
