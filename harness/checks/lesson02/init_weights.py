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
from harness.contract.failure import Hints, Requirement
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


@register(
    "02-init-weights",
    hints=Hints(
        nudge="Visit every nn.Linear, however deeply nested, and initialise its weight and bias in place; leave "
              "every other layer alone.",
        concept="model.modules() walks the whole tree (model.children() only the first level); Kaiming (He) "
                "initialisation for ReLU draws weights with std sqrt(2 / fan_in), and nn.init's functions ending in "
                "_ work in place on the existing parameter.",
        solution="for m in model.modules(): if isinstance(m, nn.Linear): nn.init.kaiming_normal_(m.weight, "
                 "nonlinearity='relu'); if m.bias is not None: nn.init.zeros_(m.bias)",
        section="6. Initialisation"),
    requires={
        "not-in-place": Requirement(
            "works in place: the layers keep their parameter objects (an optimizer built before still sees them)",
            hint="Compare id(layer.weight) before and after your function. Is it the same tensor, filled anew, or a "
                 "new one assigned?"),
        "not-initialised": Requirement(
            "re-initialises the model's own Linear layers",
            hint="Print a Linear weight's std before and after your function: did it change at all?"),
        "missed-nested-layers": Requirement(
            "every nn.Linear, however deeply nested (ModuleDict, ModuleList, Sequential)",
            hint="Which of your model's Linear layers kept their weights? How does your loop reach layers inside "
                 "containers inside containers?"),
        "wrong-std": Requirement(
            "weights drawn with std sqrt(2 / in_features) (Kaiming normal, fan_in, ReLU)",
            hint="Measure your weights' std for an nn.Linear(256, 1024): it should be sqrt(2 / 256) = 0.088. Which "
                 "fan and which gain give that?"),
        "wrong-mean": Requirement(
            "weights centred on 0",
            hint="Print your weights' mean: should an initialisation for ReLU networks favour positive weights?"),
        "bias-not-zero": Requirement(
            "biases set to zero (where a layer has one)",
            hint="Print a Linear's bias after your function: is it all zeros?"),
        "norm-changed": Requirement(
            "every other layer (LayerNorm, BatchNorm) left untouched",
            hint="Print a LayerNorm's weight after your function: it should still be all ones. Which parameters "
                 "does your loop touch?"),
    },
)
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
