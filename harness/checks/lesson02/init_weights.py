"""02-init-weights, the probe.

Initialise the case's model with the student's function; record which layers' parameters were replaced by
new objects, (a sample of) every Linear's weight, the biases and the norm parameters afterwards.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from harness.checks.lesson02.common import _isolated_rng, _snapshot, linear_layers
from harness.contract.case import Case
from harness.contract.inputs import seeded
from harness.contract.registry import register

# Elements of each weight the probe sends (the first ones, row by row): enough to measure std and mean to
# well under 1%, and a few hundred kB in all where the visible model's weights would take several MB.
WEIGHT_SAMPLE = 32768


def init_model(case: Case) -> nn.Module:
    """Linear layers nested in a ModuleDict, a ModuleList and Sequentials, one without bias, one a direct child,
    with a BatchNorm and a LayerNorm that must stay untouched."""

    def build() -> nn.Module:
        if not case.hidden:
            return nn.ModuleDict({
                "blocks": nn.ModuleList([nn.Sequential(nn.Linear(256, 1024), nn.ReLU()),
                                         nn.Sequential(nn.Linear(1024, 512, bias=False), nn.BatchNorm1d(512))]),
                "out": nn.Linear(512, 10), "norm": nn.LayerNorm(10)})
        return nn.ModuleDict({
            "blocks": nn.ModuleList([nn.Sequential(nn.Linear(100, 800), nn.LayerNorm(800)),
                                     nn.Linear(800, 300, bias=False), nn.BatchNorm1d(300)]),
            "out": nn.Linear(300, 40)})

    return seeded(case.seeded(1 if case.hidden else 0), build)


def norm_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters of the model's normalisation layers (LayerNorm, BatchNorm), by name."""
    norms = [m for m in model.modules() if isinstance(m, (nn.LayerNorm, nn.modules.batchnorm._BatchNorm))]
    return {n: p for n, p in model.named_parameters() if any(p is q for m in norms for q in m.parameters())}


@register("02-init-weights")
@_isolated_rng
def probe_init_weights(init_weights_: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Initialise the case's model with the student's function; record which layers' parameters were replaced by
    new objects, (a sample of) every Linear's weight, the biases and the norm parameters afterwards."""
    model = init_model(case)
    originals = [(m, m.weight, m.bias) for m in linear_layers(model)]
    torch.manual_seed(case.seeded(123))
    init_weights_(model)
    current = linear_layers(model)
    replaced = [index for index, (m, weight, bias) in enumerate(originals)
                if index >= len(current) or current[index] is not m or m.weight is not weight or m.bias is not bias]
    return {"replaced": replaced,
            "linears": [{"weight": _snapshot(m.weight.flatten()[:WEIGHT_SAMPLE]), "bias": _snapshot(m.bias)}
                        for m, _, _ in originals],
            "norms": {n: _snapshot(p) for n, p in norm_parameters(model).items()}}
