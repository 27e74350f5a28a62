"""12-first-nonfinite, the probe.

Call the student's locator on each scenario's model; record what it returned and the hooks left.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson12.common import _hooks_on
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.instruments import collect
from harness.contract.registry import register


class Log(nn.Module):
    """log(x): NaN where x < 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class Exp(nn.Module):
    """exp(scale * x): inf where it overflows float32."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.scale * x)


class LogBlock(nn.Module):
    """A block whose own forward (not a child) produces the NaN: log of its child's output."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.proj(x))


class Reordered(nn.Module):
    """Children defined in one order and called in another: `late` is defined first, runs second."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.late = nn.Linear(width, width)
        self.early = Log()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.late(self.early(x))


class Cleaned(nn.Module):
    """Two children defined in the order they run, both non-finite, and a forward that replaces the NaN before
    returning: the first and the last non-finite modules differ, and nothing after them is non-finite."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.early = Log()
        self.late = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nan_to_num(self.late(self.early(x)), nan=0.0)


class RootLog(nn.Module):
    """A model whose own forward (not any of its modules) produces the first NaN: log of its head's output."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.stem = nn.Linear(width, width)
        self.body = nn.Sequential(OrderedDict(fc=nn.Linear(width, width), act=nn.Tanh()))
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.head(self.body(self.stem(x))))


class Fails(nn.Module):
    """A module that raises, as a bug in a forward would."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (the check's planted error)")


def _net(width: int, middle: nn.Module, nan_in: str | None = None) -> nn.Sequential:
    model = nn.Sequential(OrderedDict(
        stem=nn.Linear(width, width), act=nn.ReLU(),
        body=nn.Sequential(OrderedDict(fc=nn.Linear(width, width), mid=middle)),
        head=nn.Linear(width, 3)))
    if nan_in is not None:
        with torch.no_grad():
            model.get_submodule(nan_in).weight[1, 0] = math.nan
    return model


# "root": the model itself (named "" by named_modules()) makes the first NaN, its modules are all finite;
# "cleaned": the NaN is replaced inside a block, so the last non-finite module is not the model (nor defined first)
SCENARIOS = ("finite", "nan-weight", "functional-log", "inf", "reordered", "error", "root", "cleaned")


def scenario_setup(name: str, case: Case, index: int) -> tuple[nn.Module, torch.Tensor]:
    """The model and input of one scenario, rebuilt identically by probe and judge."""
    seed = case.seeded((1210 if case.hidden else 1200) + index)
    torch.manual_seed(seed)
    width = 7 if case.hidden else 5
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randn(4 if case.hidden else 3, width, generator=generator)
    if name == "nan-weight":
        layers = ["stem", "body.fc", "head"]
        where = layers[int(torch.randint(0, 3, (1,), generator=generator))]
        return _net(width, nn.Tanh(), nan_in=where), inputs
    if name == "functional-log":
        return _net(width, LogBlock(width)), inputs
    if name == "inf":
        return _net(width, Exp(400.0)), inputs
    if name == "reordered":
        model = nn.Sequential(OrderedDict(stem=nn.Linear(width, width), block=Reordered(width),
                                          head=nn.Linear(width, 3)))
        return model, inputs
    if name == "finite":
        return _net(width, nn.Tanh()), inputs
    if name == "root":
        return RootLog(width), inputs
    if name == "cleaned":
        return nn.Sequential(OrderedDict(stem=nn.Linear(width, width), block=Cleaned(width),
                                         head=nn.Linear(width, 3))), inputs
    return _net(width, Fails()), inputs


@register(
    "12-first-nonfinite",
    hints=Hints(
        nudge="Put a forward hook on every module of model.named_modules(); in the hook, test the output with "
        "torch.isfinite and remember the name the first time it fails.",
        concept="Forward hooks fire in execution order, a child's before its parent's, so the first report is the "
        "innermost module that produced the value. torch.isfinite catches NaN and inf alike. Hooks you add "
        "must be removed in a finally block, or they stay on the model after an exception.",
        solution="handles = [m.register_forward_hook(make_hook(name)) for name, m in model.named_modules()]\n"
        "try: with torch.no_grad(): model(inputs)\nfinally: for h in handles: h.remove()\nreturn found[0] "
        "if found else None",
        section="3. The first NaN",
    ),
    requires={
        "wrong-module": Requirement(
            "returns the qualified name (as named_modules() gives it) of the first module, in execution order, "
            "whose output is not finite",
            hint="Print the name and torch.isfinite(output).all() inside your hook: in which order do they fire, "
            "and which one do you keep?"),
        "missed-inf": Requirement(
            "treats inf as non-finite, not only NaN",
            hint="torch.isnan(torch.tensor(float('inf'))) is False: which test catches both?"),
        "false-alarm": Requirement(
            "returns None when every output is finite",
            hint="Run your function on a healthy model: what does it return?"),
        "not-a-name": Requirement(
            "returns a string (the module's name) or None",
            hint="Return the name string from named_modules(), not the module object."),
        "hooks-left": Requirement(
            "removes every hook it registered before returning",
            hint="Print len(model.stem._forward_hooks) after your call: keep the handles and call .remove()."),
        "hooks-left-on-error": Requirement(
            "removes its hooks even when the forward pass raises",
            hint="If model(inputs) raises, is your remove loop still reached? Which statement guarantees it?"),
        "error-swallowed": Requirement(
            "lets the exception of the forward pass propagate to the caller",
            hint="When model(inputs) raises inside your function, does the caller see the error? What does your "
            "except clause do with it?"),
    },
)
def probe_first_nonfinite(first_nonfinite_module: Callable[[nn.Module, torch.Tensor], Any], *, case: Case) -> dict:
    """Call the student's locator on each scenario's model; record what it returned and the hooks left."""
    def record(index_name: tuple[int, str]) -> dict:
        index, name = index_name
        model, inputs = scenario_setup(name, case, index)
        if name == "error":
            raised = None
            try:
                first_nonfinite_module(model, inputs)
            except Exception as error:  # the planted error (or another): only the hooks left matter
                raised = type(error).__name__
            return {"raised": raised, "hooks_left": _hooks_on(model)}
        got = first_nonfinite_module(model, inputs)
        return {"returned": got, "hooks_left": _hooks_on(model)}

    return {"calls": collect(list(enumerate(SCENARIOS)), record)}
