"""12-grad-norms, the probe.

Call the student's function on the case's model after backward; record the result and the grads after.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson12.common import Batch
from harness.contract.case import Case
from harness.contract.registry import register


class _WithUnused(nn.Module):
    """A network plus a registered head it never calls (its parameters' .grad stays None), and an input scale
    buffer registered before any parameter: state_dict() lists it first, named_parameters() not at all."""

    def __init__(self, net: nn.Module, features: int) -> None:
        super().__init__()
        self.register_buffer("input_scale", torch.linspace(0.5, 1.5, features))
        self.net = net
        self.unused = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x * self.input_scale)


def grad_model(case: Case) -> tuple[nn.Module, Batch]:
    """A small network after one backward: one frozen parameter and one unused parameter have no .grad."""
    seed = case.seeded(131 if case.hidden else 130)
    torch.manual_seed(seed)
    widths = [9, 17, 13, 6, 3] if case.hidden else [10, 16, 12, 4]
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    for i, (a, b) in enumerate(zip(widths, widths[1:], strict=False)):
        layers[f"fc{i}"] = nn.Linear(a, b)
        layers[f"act{i}"] = nn.Tanh()
    model = _WithUnused(nn.Sequential(layers), widths[0])
    model.net.fc0.bias.requires_grad_(False)  # frozen
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randn(24, widths[0], generator=generator) * (3.0 if case.hidden else 1.0)
    targets = torch.randn(24, widths[-1], generator=generator)
    model.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(inputs), targets).backward()
    return model, (inputs, targets)


@register("12-grad-norms")
def probe_grad_norms(grad_norms_per_layer: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Call the student's function on the case's model after backward; record the result and the grads after."""
    model, _ = grad_model(case)
    got = grad_norms_per_layer(model)
    return {"returned": dict(got) if isinstance(got, dict) else got,
            "grads_after": [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]}
