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
from harness.contract.failure import Hints, Requirement
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


@register(
    "14-lora",
    hints=Hints(
        nudge="Keep the pretrained layer as self.base and freeze it; add two small nn.Parameters, lora_A (r x in) "
              "random and lora_B (out x r) zero; forward adds (alpha / r) * (x @ A.T) @ B.T to base(x).",
        concept="LoRA learns a low-rank change B @ A of a frozen weight: r * (in + out) trainable numbers instead of "
                "in * out. With B = 0 the layer starts exactly as the pretrained one, and A random lets B's gradient "
                "be non-zero from the first step. Merging folds the change into one weight: W + (alpha / r) * B @ A.",
        solution="forward: return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling; merge: merged = "
                 "nn.Linear(in, out, bias=...); merged.weight.copy_(W + self.scaling * self.lora_B @ self.lora_A); "
                 "copy the bias",
        section="6. LoRA from scratch"),
    requires={
        "base-trainable": Requirement(
            "keeps the base layer as self.base, its weight and bias frozen (requires_grad False); only lora_A and "
            "lora_B train",
            hint="Print [n for n, p in layer.named_parameters() if p.requires_grad]: what is there besides lora_A and "
                 "lora_B? eval() does not freeze."),
        "wrong-adapter": Requirement(
            "lora_A (r, in_features) and lora_B (out_features, r) are registered nn.Parameters that gradients reach",
            hint="Print dict(layer.named_parameters()).keys() and the shapes of lora_A and lora_B: are both "
                 "there, as nn.Parameter, and does loss.backward() give them a .grad?"),
        "start-differs": Requirement(
            "a new layer computes exactly what the base layer computes",
            hint="Compare layer(x) with layer.base(x) right after construction: which of lora_A and lora_B must "
                 "start at zero for the added term to vanish?"),
        "wrong-init": Requirement(
            "lora_B starts at zeros and lora_A at random values",
            hint="Print layer.lora_A.abs().sum() and layer.lora_B.abs().sum() after construction: which is zero? If "
                 "both are, what gradient can either of them get?"),
        "wrong-forward": Requirement(
            "forward returns base(x) + (alpha / r) * x @ A.T @ B.T, for inputs of any number of leading dimensions",
            hint="Set lora_A and lora_B to small known tensors and compare layer(x) with the formula by hand: is your "
                 "scaling alpha / r?"),
        "merge-differs": Requirement(
            "merge() returns an nn.Linear computing the same outputs as the layer",
            hint="Compare layer.merge()(x) with layer(x) for non-zero lora_A and lora_B: is the scaling in the merged "
                 "weight, and did the bias come along?"),
        "merge-modifies": Requirement(
            "merge() leaves the LoRA layer itself unchanged",
            hint="Compute layer(x), call layer.merge(), compute layer(x) again: the same? Build the merged weight in "
                 "a new tensor, not in self.base.weight."),
    },
)
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
