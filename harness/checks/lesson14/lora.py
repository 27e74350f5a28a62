"""14-lora, the probe.

Build the student's layer around each seeded base; record its parameters, its first output and gradients, its
output with the check's adapter values, the merged layer's output, and its output after merging.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson14.common import _attempt, module_attributes
from harness.contract.case import Case
from harness.contract.inputs import seeded
from harness.contract.registry import register
from harness.contract.wire import type_name


def lora_cases(case: Case) -> list[tuple[int, int, int, float, bool, tuple[int, ...]]]:
    """(in_features, out_features, r, alpha, bias, input shape)."""
    if not case.hidden:
        # alpha / r = 2.5 in the second layer: alpha // r (2.0) differs from it, and from 1 and alpha
        return [(6, 5, 2, 8.0, True, (2, 7, 6)), (8, 3, 4, 10.0, False, (5, 8))]
    return [(10, 7, 3, 8.0, True, (2, 4, 10)), (5, 9, 1, 4.0, True, (3, 5)), (12, 4, 4, 16.0, False, (2, 3, 12))]


def lora_base(case: Case, index: int, fan_in: int, fan_out: int, bias: bool) -> nn.Linear:
    """The seeded nn.Linear that the case's LoRA layer wraps."""
    return seeded(case.seeded(200 + index), functools.partial(nn.Linear, fan_in, fan_out, bias=bias))  # type: ignore


def lora_inputs(case: Case, index: int, setting: tuple) -> dict[str, torch.Tensor]:
    """The input, the weights of the loss whose gradient is taken, and the adapter values the check sets."""
    fan_in, fan_out, r, _, _, shape = setting
    generator = torch.Generator().manual_seed(case.seeded(210 + index))
    return {"x": torch.randn(shape, generator=generator),
            "grad_weights": torch.randn(*shape[:-1], fan_out, generator=generator),
            "A": torch.randn(r, fan_in, generator=generator) * 0.5,
            "B": torch.randn(fan_out, r, generator=generator) * 0.5}


def _snapshot(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else type_name(value)


@register("14-lora")
def probe_lora(lora_linear: Callable[..., nn.Module], *, case: Case) -> dict:
    """Build the student's layer around each seeded base; record its parameters, its first output and gradients, its
    output with the check's adapter values, the merged layer's output, and its output after merging."""
    records = []
    for index, setting in enumerate(lora_cases(case)):
        fan_in, fan_out, r, alpha, bias, _ = setting
        inputs = lora_inputs(case, index, setting)
        base = lora_base(case, index, fan_in, fan_out, bias)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(case.seeded(220 + index))
            layer = lora_linear(base, r=r, alpha=alpha)
        records.append(_probe_one_lora(layer, inputs))
    return {"layers": records}


def _probe_one_lora(layer: nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    named = dict(layer.named_parameters())
    record: dict[str, Any] = {"trainable": [n for n, p in named.items() if p.requires_grad],
                              "parameters": list(named), "attributes": module_attributes(layer),
                              "A": _snapshot(getattr(layer, "lora_A", None)),
                              "B": _snapshot(getattr(layer, "lora_B", None))}
    adapters = [getattr(layer, "lora_A", None), getattr(layer, "lora_B", None)]
    if not all(isinstance(a, torch.Tensor) for a in adapters):
        return record
    x = inputs["x"]
    out = _attempt(record, functools.partial(layer, x))
    if not isinstance(out, torch.Tensor):
        record["out_type"] = type_name(out)
        return record
    record["out_start"] = out.detach().clone()
    if out.shape != inputs["grad_weights"].shape:
        return record  # the judge fails it on the shape
    if out.requires_grad:
        (out * inputs["grad_weights"]).sum().backward()
    record["grad_B"] = _snapshot(adapters[1].grad)
    with torch.no_grad():
        for adapter, value in zip(adapters, (inputs["A"], inputs["B"]), strict=True):
            if adapter.shape != value.shape:
                return record
            adapter.copy_(value)
    with torch.no_grad():
        record["out"] = layer(x).clone()
        merged = layer.merge()
        record["merged_type"] = type_name(merged)
        record["merged_out"] = merged(x).clone() if isinstance(merged, nn.Linear) else None
        record["out_after_merge"] = layer(x).clone()
    return record
