"""Drills on autograd: custom functions, accumulation, detach, in-place traps, grad modes."""

from __future__ import annotations

import torch

from harness.checks.core import fail
from harness.drills.core import Drill, add
from harness.drills.support import assert_close, multiple_choice


def _check_silu(ns: dict) -> str:
    SiLU = ns["SiLU"]
    if not (isinstance(SiLU, type) and issubclass(SiLU, torch.autograd.Function)):
        fail("not-a-function", observed=f"SiLU is {SiLU!r}", expected="a torch.autograd.Function subclass",
             cause="a plain function or nn.Module", where="class SiLU(torch.autograd.Function)")
    for seed in (0, 1):
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 4
        assert_close("SiLU.apply(x)", SiLU.apply(x), torch.nn.functional.silu(x), atol=1e-10, rtol=1e-10,
                     where="forward", cause="the forward is not x * sigmoid(x)")
        x.requires_grad_(True)
        if not torch.autograd.gradcheck(SiLU.apply, (x,), raise_exception=False):
            fail("wrong-backward", observed="gradcheck fails: your backward disagrees with finite differences",
                 expected="d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x)))",
                 cause="a wrong derivative, or grad_output not multiplied in",
                 where="backward(ctx, grad_output)")
    return "forward matches F.silu; backward passes gradcheck in float64"


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
        check=_check_silu,
        wrong_answers=(_SILU_SOLUTION.replace("grad_output * s * (1 + x * (1 - s))", "s * (1 + x * (1 - s))"),
                       _SILU_SOLUTION.replace("grad_output * s * (1 + x * (1 - s))", "grad_output * s")),
    )
)

_INPLACE_STARTER = '''import torch


def gated(x, w):
    """Symptom: loss.backward() raises 'one of the variables needed for gradient computation has been
    modified by an inplace operation'."""
    h = torch.sigmoid(x @ w)
    h.mul_(2)
    return h.sum()
'''


def _check_inplace(ns: dict) -> str:
    gated = ns["gated"]
    for seed in (0, 1):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(4, 3, generator=gen)
        w = torch.randn(3, 2, generator=gen, requires_grad=True)
        loss = gated(x, w)
        loss.backward()
        ref_w = w.detach().clone().requires_grad_(True)
        (2 * torch.sigmoid(x @ ref_w)).sum().backward()
        assert_close("w.grad", w.grad, ref_w.grad, atol=1e-6, rtol=1e-5, where="gated",
                     cause="the function no longer computes 2·sigmoid(x @ w)")
    return "backward works and the value is still 2·sigmoid(x @ w) summed"


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
        check=_check_inplace,
        wrong_answers=(_INPLACE_STARTER.replace("    h.mul_(2)\n", "    h = h.detach() * 2\n"),
                       _INPLACE_STARTER.replace("    h.mul_(2)\n", "")),
    )
)


def _check_detach(ns: dict) -> str:
    target_loss = ns["target_loss"]
    gen = torch.Generator().manual_seed(0)
    online = torch.randn(4, 3, generator=gen, requires_grad=True)
    target = torch.randn(4, 3, generator=gen, requires_grad=True)
    loss = target_loss(online, target)
    assert_close("loss", loss, ((online - target) ** 2).mean(), atol=1e-6, rtol=1e-6, where="target_loss",
                 cause="the loss should be the mean squared difference")
    loss.backward()
    if target.grad is not None and target.grad.abs().sum() > 0:
        fail("target-gets-gradient", observed="the target network's tensor received a gradient",
             expected="no gradient flows into the target", cause="the target is not detached",
             where="use target.detach() in the loss")
    if online.grad is None:
        fail("online-no-gradient", observed="no gradient reached the online tensor", expected="a gradient",
             cause="the online side was detached too (or computed under no_grad)", where="detach only the target")
    return "gradient flows into online only"


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
        check=_check_detach,
        wrong_answers=("import torch\n\ndef target_loss(online, target):\n    return ((online - target) ** 2).mean()\n",
                       "import torch\n\ndef target_loss(online, target):\n    with torch.no_grad():\n"
                       "        return ((online - target) ** 2).mean()\n"),
    )
)


def _inference_mode_experiment() -> None:
    with torch.inference_mode():
        t = torch.ones(2)
    print(f"created under inference_mode: t.is_inference() = {t.is_inference()}")
    try:
        torch.ones(2, requires_grad=True) * t
        (torch.ones(2, requires_grad=True) * t).sum().backward()
        print("used in autograd: fine")
    except RuntimeError as error:
        print(f"used in autograd later: RuntimeError: {str(error)[:90]}...")
    with torch.no_grad():
        u = torch.ones(2)
    (torch.ones(2, requires_grad=True) * u).sum().backward()
    print("created under no_grad: a normal tensor, usable in autograd later")


add(
    multiple_choice(
        id="autograd-inference-mode",
        title="no_grad against inference_mode",
        topics=("autograd", "performance"),
        difficulty=2,
        prompt="Which is true of torch.inference_mode() compared with torch.no_grad()?\n"
        "  a) they are identical aliases\n"
        "  b) inference_mode is faster, but its tensors cannot be saved for backward later\n"
        "  c) inference_mode also disables dropout\n  d) no_grad tensors cannot be used in autograd later\n",
        correct="b",
        explanation="inference_mode drops autograd bookkeeping: faster, but its "
                                      "tensors cannot be used in autograd later",
        hints=("One of them skips version counters and view tracking.",
               "Modes don't touch modules (dropout is model.eval()); inference tensors can't enter autograd later."),
        wrong=("c", "a"),
        experiment=_inference_mode_experiment,
    )
)
