"""02-mlp, the probe.

Build the student's MLP for each configuration; record its layers, eval and train outputs, one SGD step.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from harness.checks.lesson02.common import _attempt, _build, _isolated_rng, _snapshot, linear_layers
from harness.contract.case import Case
from harness.contract.inputs import randn
from harness.contract.registry import register


def _layers(model: nn.Module) -> list[dict[str, Any]]:
    """Every nn.Linear of `model` (in model.modules() order) as data: its weight and bias."""
    return [{"weight": _snapshot(m.weight), "bias": _snapshot(m.bias)} for m in linear_layers(model)]


def mlp_configurations(case: Case) -> list[tuple[list[int], float]]:
    """(sizes, dropout): a dropout other than nn.Dropout's default 0.5, and a single layer (no hidden one)."""
    if not case.hidden:
        return [([6, 16, 16, 3], 0.25), ([3, 5], 0.4)]
    return [([3, 5], 0.3), ([8, 32, 32, 32, 2], 0.2), ([4, 7, 1], 0.6)]


def mlp_input(case: Case, sizes: list[int]) -> torch.Tensor:
    """The input batch (64 rows of `sizes[0]` features) of one MLP configuration."""
    return randn(64, sizes[0], seed=case.seeded(len(sizes)))


def _train_forward(model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """One train-mode forward, with the input of every nn.Linear recorded (in the order the layers ran)."""
    inputs: list[torch.Tensor] = []
    handles = [m.register_forward_pre_hook(lambda module, args: inputs.append(args[0].detach().clone()))
               for m in linear_layers(model)]
    try:
        model.train()
        out = model(x)
    finally:
        for handle in handles:
            handle.remove()
    return {"inputs": inputs, "out": out.detach()}


def _run_mlp(mlp_class: type, model: nn.Module, record: dict[str, Any], sizes: list[int], p: float,
             x: torch.Tensor) -> None:
    """Record eval outputs, a dropout model's eval outputs and one train-mode forward, and the weights after one
    SGD step."""
    model.eval()
    with torch.no_grad():
        record["out"] = model(x)
        dropout_model = _build(mlp_class, sizes, dropout=p)
        dropout_model.eval()
        record["dropout_layers"] = _layers(dropout_model)
        record["dropout_eval"] = [dropout_model(x), dropout_model(x)]
        record["dropout_train"] = _train_forward(dropout_model, x)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    model(x).square().mean().backward()
    optimizer.step()
    record["stepped"] = [_snapshot(m.weight) for m in linear_layers(model)]
    record["got_gradient"] = [m.weight.grad is not None and bool(m.weight.grad.abs().sum() > 0)
                              for m in linear_layers(model)]


@register("02-mlp")
@_isolated_rng
def probe_mlp(mlp_class: type, *, case: Case) -> dict:
    """Build the student's MLP for each configuration; record its layers, eval and train outputs, one SGD step."""
    records = []
    for sizes, p in mlp_configurations(case):
        torch.manual_seed(case.seeded(0))
        model = _build(mlp_class, sizes)
        record: dict[str, Any] = {"registered": sum(param.numel() for param in model.parameters()),
                                  "layers": _layers(model)}
        records.append(record)
        _attempt(record, functools.partial(_run_mlp, mlp_class, model, record, sizes, p, mlp_input(case, sizes)))
    return {"configurations": records}
