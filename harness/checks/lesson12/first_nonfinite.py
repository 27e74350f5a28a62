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


@register("12-first-nonfinite")
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
