"""Drills on autograd: custom functions, accumulation, detach, in-place traps, grad modes."""

from __future__ import annotations

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.drills.bank.loop import _seeded
from harness.drills.core import Drill, add
from harness.drills.support import explain

# --- autograd-custom-function ------------------------------------------------------------------------------


def custom_silu_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
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
    for x, grad_output in custom_silu_inputs(case):
        x = x.clone().requires_grad_(True)
        y = silu.apply(x)
        node = type(y.grad_fn).__name__ if isinstance(y, torch.Tensor) and y.grad_fn is not None else None
        if node is not None:
            y.backward(grad_output)
        outputs.append({"y": y, "grad": x.grad, "node": node})
    return {"outputs": outputs}


# --- autograd-inplace-trap ---------------------------------------------------------------------------------

INPLACE_STARTER = '''import torch


def gated(x, w):
    """Symptom: loss.backward() raises 'one of the variables needed for gradient computation has been
    modified by an inplace operation'."""
    h = torch.sigmoid(x @ w)
    h.mul_(2)
    return h.sum()
'''


def inplace_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two (x, w) pairs, x (4, 3) and (5, 3), w (3, 2), for the in-place bug hunt."""
    inputs = []
    for base in (0, 1):
        gen = torch.Generator().manual_seed(case.seeded(base))
        inputs.append((torch.randn(4 + base, 3, generator=gen), torch.randn(3, 2, generator=gen)))
    return inputs


def _probe_inplace(answer: dict, *, case: Case) -> dict:
    outputs = []
    for x, w in inplace_inputs(case):
        w = w.clone().requires_grad_(True)
        loss = answer["gated"](x, w)
        if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
            loss.backward()
        outputs.append({"loss": loss, "grad": w.grad})
    return {"outputs": outputs}


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
        starter=INPLACE_STARTER,
        hints=("Which tensor does sigmoid's backward need, and what happened to it?",
               "sigmoid saves its output h for backward; h.mul_(2) overwrites it. Use h = h * 2."),
        probe=_probe_inplace,
    )
)

# --- autograd-detach-target ----------------------------------------------------------------------------------


def detach_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """Two (4, 3) tensors for the detach drill."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    return torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen)


def _probe_detach(answer: dict, *, case: Case) -> dict:
    online, target = (t.clone().requires_grad_(True) for t in detach_inputs(case))
    loss = answer["target_loss"](online, target)
    if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
        loss.backward()
    return {"loss": loss, "online_grad": online.grad, "target_grad": target.grad}


add(
    Drill(
        id="autograd-detach-target",
        self_check=True,
        title="Stop gradients into a target network",
        kind="write",
        topics=("autograd",),
        difficulty=1,
        prompt="Write target_loss(online, target) = mean((online - target)²) where gradients flow into `online` "
        "but not into `target` (as in DQN or BYOL target networks).",
        entry="target_loss",
        starter="import torch\n\n\ndef target_loss(online, target):\n    raise NotImplementedError\n",
        hints=("One method returns a tensor that shares data but is cut from the graph.",
               "((online - target.detach()) ** 2).mean()"),
        probe=_probe_detach,
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
    explain(
        id="autograd-inference-mode",
        title="no_grad against inference_mode",
        topics=("autograd", "performance"),
        difficulty=2,
        question="Which is true of torch.inference_mode() compared with torch.no_grad()?",
        hints=("One of them skips version counters and view tracking.",
               "Modes don't touch modules (dropout is model.eval()); inference tensors can't enter autograd later."),
        experiment=_inference_mode_experiment,
    )
)


# --- autograd-input-gradients (write) ------------------------------------------------------------------------


def saliency_setup(case: Case) -> tuple[nn.Module, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """A classifier, inputs, targets, and the gradients the training loop has already accumulated."""
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 4)))
    gen = torch.Generator().manual_seed(case.seeded(1))
    x = torch.randn(6, 5, generator=gen)
    targets = torch.randint(0, 4, (6,), generator=gen)
    accumulated = [torch.randn(p.shape, generator=gen) for p in model.parameters()]
    return model, x, targets, accumulated


def _probe_saliency(answer: dict, *, case: Case) -> dict:
    model, x, targets, accumulated = saliency_setup(case)
    for p, g in zip(model.parameters(), accumulated, strict=True):
        p.grad = g.clone()
    result = answer["input_gradients"](model, x, targets)
    return {"result": result, "param_grads": [p.grad for p in model.parameters()],
            "x_requires_grad": x.requires_grad, "x_grad": x.grad is not None}


add(
    Drill(
        id="autograd-input-gradients",
        self_check=True,
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
        hints=("backward() needs a scalar: how do N independent outputs become one without mixing their gradients? "
               "And which autograd call returns gradients instead of writing them into .grad?",
               "Pick with logits.gather(1, targets[:, None]), .sum() them, and call torch.autograd.grad(total, x) "
               "on a detached copy of x that requires grad."),
        probe=_probe_saliency,
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
    explain(
        id="autograd-two-losses-one-graph",
        title="Two losses, one shared graph",
        topics=("autograd", "loop"),
        difficulty=2,
        question="h = encoder(x); loss1 = head1(h).mean(); loss2 = head2(h).mean(); loss1.backward(); "
        "loss2.backward() raises 'Trying to backward through the graph a second time'. Which fix is right and "
        "cheapest?",
        hints=("What did the first backward free, and which part of the graph do both losses share?",
               "Gradients of a sum are the sum of gradients."),
        experiment=_two_losses_experiment,
    )
)
