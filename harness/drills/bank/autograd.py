"""Drills on autograd: custom functions, accumulation, detach, in-place traps, grad modes."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.bank.loop import _seeded
from harness.drills.core import Drill, add
from harness.drills.support import assert_close, multiple_choice


def _tensor_or_none(value: Any, what: str) -> torch.Tensor | None:
    if value is not None and not isinstance(value, torch.Tensor):
        raise WireError(f"{what}: expected a tensor or None, got {describe(value)}")
    return value


# --- autograd-custom-function ------------------------------------------------------------------------------


def _custom_silu_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(x, grad_output) pairs in float64: a random grad_output catches a backward that ignores it."""
    inputs = []
    for base, shape in enumerate(((5, 3), (7,), (2, 3, 4))):
        gen = torch.Generator().manual_seed(case.seeded(base))
        inputs.append((torch.randn(shape, generator=gen, dtype=torch.float64) * 4,
                       torch.randn(shape, generator=gen, dtype=torch.float64)))
    return inputs


def _probe_silu(answer: dict, *, case: Case) -> dict:
    silu = answer["SiLU"]
    if not (isinstance(silu, type) and issubclass(silu, torch.autograd.Function)):
        fail("not-a-function", observed=f"SiLU is {silu!r}", expected="a torch.autograd.Function subclass",
             cause="a plain function or nn.Module", where="class SiLU(torch.autograd.Function)")
    outputs = []
    for x, grad_output in _custom_silu_inputs(case):
        x = x.clone().requires_grad_(True)
        y = silu.apply(x)
        node = type(y.grad_fn).__name__ if isinstance(y, torch.Tensor) and y.grad_fn is not None else None
        if node is not None:
            y.backward(grad_output)
        outputs.append({"y": y, "grad": x.grad, "node": node})
    return {"outputs": outputs}


def _judge_silu(seen: dict, *, case: Case) -> str:
    outputs = seen.get("outputs")
    inputs = _custom_silu_inputs(case)
    if not isinstance(outputs, list) or len(outputs) != len(inputs) or not all(isinstance(o, dict) for o in outputs):
        raise WireError("outputs missing")
    for (x, grad_output), out in zip(inputs, outputs, strict=True):
        x = x.clone().requires_grad_(True)
        want = torch.nn.functional.silu(x)
        assert_close("SiLU.apply(x)", out.get("y"), want.detach(), atol=1e-10, rtol=1e-10, where="forward",
                     cause="the forward is not x * sigmoid(x)")
        if out.get("node") != "SiLUBackward":
            fail("not-custom-backward", observed=f"the output's grad_fn is {describe(out.get('node'))}",
                 expected="SiLUBackward: the backward of your Function", cause="the forward returns the result of "
                 "a built-in op that autograd differentiates itself (or a tensor cut from the graph): your backward "
                 "never runs", where="forward returns x * torch.sigmoid(x) and backward computes the derivative")
        want.backward(grad_output)
        got = _tensor_or_none(out.get("grad"), "x.grad")
        if got is None or got.shape != x.shape or not torch.allclose(got, x.grad, atol=1e-10, rtol=1e-8):
            fail("wrong-backward", observed="x.grad after y.backward(g) with a random g differs from the derivative",
                 expected="g * σ(x) * (1 + x * (1 − σ(x)))",
                 cause="a wrong derivative, or grad_output not multiplied in", where="backward(ctx, grad_output)")
    return "forward matches F.silu; your backward gives g·σ(x)(1 + x(1 − σ(x))) for a random upstream g"


_SILU_SOLUTION = '''import torch


class SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * s * (1 + x * (1 - s))
'''

add(
    Drill(
        id="autograd-custom-function",
        title="A custom autograd.Function checked with gradcheck",
        kind="write",
        topics=("autograd",),
        difficulty=2,
        prompt="Implement SiLU (x * sigmoid(x)) as a torch.autograd.Function with a hand-written backward. "
        "It is checked with torch.autograd.gradcheck in float64.",
        entry="SiLU",
        starter="import torch\n\n\nclass SiLU(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        raise NotImplementedError\n\n    @staticmethod\n    def backward(ctx, grad_output):\n"
        "        raise NotImplementedError\n",
        solution=_SILU_SOLUTION,
        hints=("Save x in forward with ctx.save_for_backward; backward returns grad_output times the derivative.",
               "d/dx x·σ(x) = σ(x) + x·σ(x)(1 − σ(x)) = σ(x)(1 + x(1 − σ(x)))."),
        probe=_probe_silu,
        judge=_judge_silu,
        wrong_answers=(
            (_SILU_SOLUTION.replace("grad_output * s * (1 + x * (1 - s))", "s * (1 + x * (1 - s))"), "wrong-backward"),
            (_SILU_SOLUTION.replace("grad_output * s * (1 + x * (1 - s))", "grad_output * s"), "wrong-backward"),
            (_SILU_SOLUTION.replace("grad_output * s * (1 + x * (1 - s))", "grad_output * s * (1 - s)"),
             "wrong-backward"),
            ("import torch\n\nclass SiLU(torch.autograd.Function):\n"
             "    apply = staticmethod(torch.nn.functional.silu)\n", "not-custom-backward"),
        ),
    )
)

# --- autograd-inplace-trap ---------------------------------------------------------------------------------

_INPLACE_STARTER = '''import torch


def gated(x, w):
    """Symptom: loss.backward() raises 'one of the variables needed for gradient computation has been
    modified by an inplace operation'."""
    h = torch.sigmoid(x @ w)
    h.mul_(2)
    return h.sum()
'''


def _inplace_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    inputs = []
    for base in (0, 1):
        gen = torch.Generator().manual_seed(case.seeded(base))
        inputs.append((torch.randn(4 + base, 3, generator=gen), torch.randn(3, 2, generator=gen)))
    return inputs


def _probe_inplace(answer: dict, *, case: Case) -> dict:
    outputs = []
    for x, w in _inplace_inputs(case):
        w = w.clone().requires_grad_(True)
        loss = answer["gated"](x, w)
        if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
            loss.backward()
        outputs.append({"loss": loss, "grad": w.grad})
    return {"outputs": outputs}


def _judge_inplace(seen: dict, *, case: Case) -> str:
    outputs, inputs = seen.get("outputs"), _inplace_inputs(case)
    if not isinstance(outputs, list) or len(outputs) != len(inputs) or not all(isinstance(o, dict) for o in outputs):
        raise WireError("outputs missing")
    for (x, w), out in zip(inputs, outputs, strict=True):
        w = w.clone().requires_grad_(True)
        loss = (2 * torch.sigmoid(x @ w)).sum()
        loss.backward()
        assert_close("the returned loss", out.get("loss"), loss.detach(), atol=1e-5, rtol=1e-5, where="gated",
                     cause="the function no longer computes 2·sigmoid(x @ w) summed")
        got = _tensor_or_none(out.get("grad"), "w.grad")
        if got is None:
            fail("graph-cut", observed="loss.backward() left w.grad = None", expected="a gradient for w",
                 cause="the ×2 was applied to a detached tensor (or under no_grad): the loss has no graph back to w",
                 where="h = h * 2")
        if got.shape != w.shape or not torch.allclose(got, w.grad, atol=1e-5, rtol=1e-4):
            fail("wrong-gradient", observed=f"w.grad differs from the true gradient by up to "
                 f"{(got - w.grad).abs().max().item() if got.shape == w.shape else float('nan'):.3g}",
                 expected="the gradient of sum(2·sigmoid(x @ w))", cause="h.data.mul_(2) (or an in-place change "
                 "under no_grad on .data) hides the change from autograd's version counter: no error, but "
                 "sigmoid's backward then uses the doubled output and computes a wrong gradient",
                 where="use the out-of-place h = h * 2")
    return "backward works, the value is still 2·sigmoid(x @ w) summed, and w.grad is right"


add(
    Drill(
        id="autograd-inplace-trap",
        title="Bug hunt: modified by an inplace operation",
        kind="bughunt",
        topics=("autograd",),
        difficulty=2,
        prompt="gated(x, w) runs, but loss.backward() fails: 'one of the variables needed for gradient computation "
        "has been modified by an inplace operation'. Fix it without changing what it computes.",
        entry="gated",
        starter=_INPLACE_STARTER,
        solution=_INPLACE_STARTER.replace("    h.mul_(2)\n",
                                          "    h = h * 2  # out of place: sigmoid's backward needs its output\n"),
        hints=("Which tensor does sigmoid's backward need, and what happened to it?",
               "sigmoid saves its output h for backward; h.mul_(2) overwrites it. Use h = h * 2."),
        probe=_probe_inplace,
        judge=_judge_inplace,
        wrong_answers=(
            (_INPLACE_STARTER.replace("    h.mul_(2)\n", "    h = h.detach() * 2\n"), "graph-cut"),
            (_INPLACE_STARTER.replace("    h.mul_(2)\n", ""), "wrong-value"),
            (_INPLACE_STARTER.replace("    h.mul_(2)\n", "    h.data.mul_(2)\n"), "wrong-gradient"),
        ),
    )
)

# --- autograd-detach-target ----------------------------------------------------------------------------------


def _detach_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(case.seeded(0))
    return torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen)


def _probe_detach(answer: dict, *, case: Case) -> dict:
    online, target = (t.clone().requires_grad_(True) for t in _detach_inputs(case))
    loss = answer["target_loss"](online, target)
    if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
        loss.backward()
    return {"loss": loss, "online_grad": online.grad, "target_grad": target.grad}


def _judge_detach(seen: dict, *, case: Case) -> str:
    online, target = _detach_inputs(case)
    assert_close("loss", seen.get("loss"), ((online - target) ** 2).mean(), atol=1e-6, rtol=1e-6,
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
    assert_close("online.grad", online_grad, 2 * (online - target) / online.numel(), atol=1e-6, rtol=1e-5,
                 where="target_loss", cause="the online side's gradient is not that of the mean squared difference")
    return "gradient flows into online only, with the right value"


add(
    Drill(
        id="autograd-detach-target",
        title="Stop gradients into a target network",
        kind="write",
        topics=("autograd",),
        difficulty=1,
        prompt="Write target_loss(online, target) = mean((online - target)²) where gradients flow into `online` "
        "but not into `target` (as in DQN or BYOL target networks).",
        entry="target_loss",
        starter="import torch\n\n\ndef target_loss(online, target):\n    raise NotImplementedError\n",
        solution="import torch\n\n\ndef target_loss(online, target):\n"
        "    return ((online - target.detach()) ** 2).mean()\n",
        hints=("One method returns a tensor that shares data but is cut from the graph.",
               "((online - target.detach()) ** 2).mean()"),
        probe=_probe_detach,
        judge=_judge_detach,
        wrong_answers=(
            ("import torch\n\ndef target_loss(online, target):\n    return ((online - target) ** 2).mean()\n",
             "target-gets-gradient"),
            ("import torch\n\ndef target_loss(online, target):\n    with torch.no_grad():\n"
             "        return ((online - target) ** 2).mean()\n", "online-no-gradient"),
            ("import torch\n\ndef target_loss(online, target):\n    return ((online.detach() - target) ** 2).mean()\n",
             "target-gets-gradient"),
        ),
    )
)


# --- autograd-inference-mode (explain) ---------------------------------------------------------------------


def _inference_mode_experiment() -> None:
    with torch.inference_mode():
        t = torch.ones(2)
    print(f"created under inference_mode: t.is_inference() = {t.is_inference()}")
    try:
        w = torch.ones(2, requires_grad=True)
        (w * t).sum().backward()
        print("used in autograd: fine")
    except RuntimeError as error:
        print(f"used in autograd later: RuntimeError: {str(error)[:90]}...")
    with torch.no_grad():
        u = torch.ones(2)
    (torch.ones(2, requires_grad=True) * u).sum().backward()
    print("created under no_grad: a normal tensor, usable in autograd later")
    model = nn.Dropout(0.5)
    with torch.inference_mode():
        print(f"inside inference_mode a module is still in training mode: model.training = {model.training}")


add(
    multiple_choice(
        id="autograd-inference-mode",
        title="no_grad against inference_mode",
        topics=("autograd", "performance"),
        difficulty=2,
        question="Which is true of torch.inference_mode() compared with torch.no_grad()?",
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
        hints=("One of them skips version counters and view tracking.",
               "Modes don't touch modules (dropout is model.eval()); inference tensors can't enter autograd later."),
        experiment=_inference_mode_experiment,
    )
)


# --- autograd-input-gradients (write) ------------------------------------------------------------------------


def _saliency_setup(case: Case) -> tuple[nn.Module, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """A classifier, inputs, targets, and the gradients the training loop has already accumulated."""
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 4)))
    gen = torch.Generator().manual_seed(case.seeded(1))
    x = torch.randn(6, 5, generator=gen)
    targets = torch.randint(0, 4, (6,), generator=gen)
    accumulated = [torch.randn(p.shape, generator=gen) for p in model.parameters()]
    return model, x, targets, accumulated


def _probe_saliency(answer: dict, *, case: Case) -> dict:
    model, x, targets, accumulated = _saliency_setup(case)
    for p, g in zip(model.parameters(), accumulated, strict=True):
        p.grad = g.clone()
    result = answer["input_gradients"](model, x, targets)
    return {"result": result, "param_grads": [p.grad for p in model.parameters()],
            "x_requires_grad": x.requires_grad, "x_grad": x.grad is not None}


def _judge_saliency(seen: dict, *, case: Case) -> str:
    model, x, targets, accumulated = _saliency_setup(case)
    grads = seen.get("param_grads")
    if not isinstance(grads, list) or len(grads) != len(accumulated):
        raise WireError("parameter gradients missing")
    for got, before in zip(grads, accumulated, strict=True):
        if _tensor_or_none(got, "a parameter's .grad") is None or got.shape != before.shape \
                or not torch.equal(got, before):
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
    if isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(got * len(x), want, atol=1e-6):
        fail("mean-not-sum", observed="the gradients are the expected ones divided by the batch size",
             expected="each sample's own gradient", cause="backward from .mean() over the batch scales every "
             "sample's gradient by 1/N; the samples are independent, so .sum() gives each its own gradient",
             where="the reduction before autograd.grad")
    assert_close("input_gradients(model, x, targets)", got, want, atol=1e-6, rtol=1e-5, where="the logit you "
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

add(
    Drill(
        id="autograd-input-gradients",
        title="Input gradients of a non-scalar output, leaving .grad alone",
        kind="write",
        topics=("autograd",),
        difficulty=2,
        prompt="Write input_gradients(model, x, targets): model maps x (N, D) to logits (N, C) and treats samples "
        "independently. Return the (N, D) tensor whose row n is the gradient of logits[n, targets[n]] with respect "
        "to x[n] (a saliency map), in one backward pass. It is called in the middle of training: the model's "
        "parameters' .grad must be left exactly as they were, and the caller's x must not be changed.",
        entry="input_gradients",
        starter="import torch\n\n\ndef input_gradients(model, x, targets):\n    raise NotImplementedError\n",
        solution=_SALIENCY_SOLUTION,
        hints=("backward() needs a scalar: how do N independent outputs become one without mixing their gradients? "
               "And which autograd call returns gradients instead of writing them into .grad?",
               "Pick with logits.gather(1, targets[:, None]), .sum() them, and call torch.autograd.grad(total, x) "
               "on a detached copy of x that requires grad."),
        probe=_probe_saliency,
        judge=_judge_saliency,
        wrong_answers=(
            ("import torch\n\ndef input_gradients(model, x, targets):\n"
             "    x = x.detach().clone().requires_grad_(True)\n"
             "    model(x).gather(1, targets[:, None]).sum().backward()\n    return x.grad\n", "params-grad-changed"),
            (_SALIENCY_SOLUTION.replace("    x = x.detach().clone().requires_grad_(True)\n",
                                        "    x.requires_grad_(True)\n"), "input-mutated"),
            (_SALIENCY_SOLUTION.replace(".sum()\n", ".mean()\n"), "mean-not-sum"),
            (_SALIENCY_SOLUTION.replace("model(x).gather(1, targets[:, None])", "model(x)[:, targets]"),
             "wrong-value"),
        ),
    )
)


# --- autograd-two-losses-one-graph (explain) ---------------------------------------------------------------


def _two_losses_experiment() -> None:
    torch.manual_seed(0)
    encoder, head1, head2 = nn.Linear(4, 8), nn.Linear(8, 1), nn.Linear(8, 1)
    x = torch.randn(5, 4)
    h = torch.tanh(encoder(x))
    loss1, loss2 = head1(h).pow(2).mean(), head2(h).pow(2).mean()
    loss1.backward()
    try:
        loss2.backward()
    except RuntimeError as error:
        print(f"two backward calls through one encoder graph: RuntimeError: {str(error)[:70]}...")
    encoder.zero_grad()
    h = torch.tanh(encoder(x))
    (head1(h).pow(2).mean() + head2(h).pow(2).mean()).backward()
    summed = encoder.weight.grad.clone()
    encoder.zero_grad()
    h = torch.tanh(encoder(x))
    head1(h).pow(2).mean().backward(retain_graph=True)
    head2(h).pow(2).mean().backward()
    print(f"(loss1 + loss2).backward() equals two backward calls with retain_graph=True: "
          f"{torch.allclose(summed, encoder.weight.grad)} (one pass through the encoder instead of two)")
    encoder.zero_grad(set_to_none=True)
    head1(torch.tanh(encoder(x)).detach()).pow(2).mean().backward()
    print(f"with h detached, the encoder's gradient after backward: {encoder.weight.grad} (it no longer learns)")


add(
    multiple_choice(
        id="autograd-two-losses-one-graph",
        title="Two losses, one shared graph",
        topics=("autograd", "loop"),
        difficulty=2,
        question="h = encoder(x); loss1 = head1(h).mean(); loss2 = head2(h).mean(); loss1.backward(); "
        "loss2.backward() raises 'Trying to backward through the graph a second time'. Which fix is right and "
        "cheapest?",
        options=(
            ("(loss1 + loss2).backward(): one pass through the shared encoder graph",
             "gradients add, so the sum's gradient equals the two calls' total; the encoder's graph is walked once. "
             "loss1.backward(retain_graph=True) also works, but keeps the buffers alive and walks the encoder twice"),
            ("h = encoder(x).detach(), so that each of the two losses gets a graph of its own",
             "detach cuts the encoder out of both graphs: the error goes away because the encoder gets no gradient"),
            ("call optimizer.zero_grad() between the two backward calls",
             "zero_grad does not bring back the freed saved tensors, and it would erase loss1's gradient"),
            ("wrap the second backward call in a torch.no_grad() block",
             "no_grad controls what the forward records; the backward through freed buffers still raises"),
        ),
        key="a",
        hints=("What did the first backward free, and which part of the graph do both losses share?",
               "Gradients of a sum are the sum of gradients."),
        experiment=_two_losses_experiment,
    )
)
