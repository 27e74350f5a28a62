"""12-dead-units, the probe.

Call the student's function on the case's model and batches; record the result and the hooks left.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson12.common import _hooks_on
from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.registry import register


def dead_setup(case: Case) -> tuple[nn.Module, list[torch.Tensor]]:
    """A ReLU MLP whose biases kill some units on every batch and others on some batches only, and its batches."""
    seed = case.seeded(1261 if case.hidden else 1260)
    torch.manual_seed(seed)
    widths = (10, 24, 12, 3) if case.hidden else (8, 16, 10, 3)
    model = nn.Sequential(OrderedDict(
        fc1=nn.Linear(widths[0], widths[1]), act1=nn.ReLU(),
        fc2=nn.Linear(widths[1], widths[2]), act2=nn.ReLU(),
        head=nn.Linear(widths[2], widths[3])))
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        shift = torch.zeros(widths[1])
        shift[: widths[1] // 4] = -50.0  # dead on every input
        model.fc1.bias.add_(shift)
        model.fc2.bias.sub_(0.4)  # some units alive on a few examples only
    batches = [torch.randn(6, widths[0], generator=generator) for _ in range(4 if case.hidden else 3)]
    batches[-1] = batches[-1] * 0.1  # a quiet last batch: units fire less on it
    return model, batches


@register("12-dead-units")
def probe_dead_units(dead_units: Callable[[nn.Module, list[torch.Tensor]], Any], *, case: Case) -> dict:
    """Call the student's function on the case's model and batches; record the result and the hooks left. An
    exception raised inside a hook whose closure holds another ReLU's name (or module) than the one it runs on is
    reported as late binding; any other exception propagates as it is."""
    model, batches = dead_setup(case)
    try:
        got = dead_units(model, batches)
    except Exception as error:
        _fail_if_late_binding(error, model)
        raise
    return {"returned": dict(got) if isinstance(got, dict) else got, "hooks_left": _hooks_on(model)}


def _fail_if_late_binding(error: Exception, model: nn.Module) -> None:
    """Fail [wrong-keys] naming late binding when `error` went through a hook running on one ReLU of `model`
    whose closure variable held another module's name or the module itself at that moment (the loop's last
    value)."""
    names = {id(m): n for n, m in model.named_modules() if n}
    relus = {id(m): n for n, m in model.named_modules() if isinstance(m, nn.ReLU)}
    tb = error.__traceback__
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
        code = frame.f_code
        if not code.co_freevars or not code.co_argcount:
            continue
        local = frame.f_locals
        own = relus.get(id(local.get(code.co_varnames[0])))
        if own is None:
            continue
        for variable in code.co_freevars:
            value = local.get(variable)
            held = value if isinstance(value, str) and value in names.values() else names.get(id(value))
            if held is not None and held != own:
                fail("wrong-keys",
                     observed=f"{type(error).__name__} raised inside your hook ({code.co_name}) while it ran on "
                     f"{own!r}, whose closure variable {variable!r} then held {held!r}: "
                     f"{str(error).splitlines()[0][:200] if str(error) else ''}",
                     expected=f"each hook to record under its own ReLU's name ({own!r} here)",
                     cause=f"late binding: the hook reads the loop variable {variable!r} when it runs, after the "
                     f"loop has ended, so every hook sees its last value ({held!r}) and they all record into the "
                     "same entry",
                     where=f"the hook made in the loop: bind the value when the hook is made, e.g. "
                     f"lambda m, a, out, {variable}={variable}: ..., or functools.partial",
                     hint=f"Print {variable} inside your hook next to the module it runs on: is it that module's "
                     "own name? A lambda looks its free variables up when it runs, not when it is made.")
