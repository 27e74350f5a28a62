"""00-count-params, the probe: Count each of the case's models with the student's function."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register


class _TiedNet(nn.Module):
    """Encoder and decoder that share one weight matrix, with a frozen embedding and a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.embed.weight.requires_grad_(False)
        self.encoder = nn.Linear(6, 6)
        self.decoder = nn.Linear(6, 6)
        self.decoder.weight = self.encoder.weight  # shared: must be counted once
        self.register_buffer("running_scale", torch.ones(4))


def counted_models(case: Case) -> list[nn.Module]:
    """Models to count: a plain MLP, a partly frozen CNN with BatchNorm buffers, and a model with a shared
    weight, a frozen embedding and a buffer (other widths and seeds hidden)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(0))
        width = 4 + case.seed % 5 + (1 if case.hidden else 0)
        mlp = nn.Sequential(nn.Linear(5, width), nn.ReLU(), nn.Linear(width, 3))
        frozen = nn.Sequential(nn.Conv2d(3, width, 3), nn.BatchNorm2d(width), nn.Flatten(), nn.Linear(width * 6 * 6, 2))
        for parameter in frozen[0].parameters():
            parameter.requires_grad_(False)
        return [mlp, frozen, _TiedNet()]


@register(
    "00-count-params",
    hints=Hints(
        nudge="model.parameters() yields every parameter tensor once; .numel() counts a tensor's elements, and "
              ".requires_grad says whether it will be trained.",
        concept="A model's trainable size is the sum of the element counts of its parameters that require "
                "grad; buffers (BatchNorm statistics) are not parameters, and a shared weight is one parameter.",
        solution="return sum(p.numel() for p in model.parameters() if p.requires_grad)",
        section="3. Exercises"),
    requires={
        "not-an-int": Requirement(
            "returns a Python int",
            hint="Print type(count_trainable_parameters(model)): is it an int, or a tensor?"),
        "counts-tensors": Requirement(
            "counts scalar parameters, not parameter tensors",
            hint="A Linear(5, 8) has 2 parameter tensors but 48 numbers: which one does your function count?"),
        "counts-frozen": Requirement(
            "excludes frozen parameters (requires_grad=False)",
            hint="Freeze a layer with p.requires_grad_(False): does your count go down?"),
        "counts-buffers": Requirement(
            "counts parameters only, not buffers such as BatchNorm's running statistics",
            hint="Compare model.state_dict() with model.parameters() on a model with BatchNorm: what is in one "
                 "and not the other?"),
        "shared-counted-twice": Requirement(
            "counts a weight shared by two layers once",
            hint="Two layers can hold the very same weight tensor: does your loop see it twice?"),
        "wrong-count": Requirement(
            "the count is the number of trainable scalars",
            hint="Count by hand for nn.Linear(5, 8): 5 * 8 weights + 8 biases. Does your function agree?"),
    },
)
def probe_count_params(count_trainable_parameters: Callable[[nn.Module], int], *, case: Case) -> dict:
    """Count each of the case's models with the student's function."""
    return {"counts": [count_trainable_parameters(model) for model in counted_models(case)]}
