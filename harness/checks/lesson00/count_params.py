"""00-count-params, the probe: Count each of the case's models with the student's function."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from harness.contract.case import Case
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


@register("00-count-params")
def probe_count_params(count_trainable_parameters: Callable[[nn.Module], int], *, case: Case) -> dict:
    """Count each of the case's models with the student's function."""
    return {"counts": [count_trainable_parameters(model) for model in counted_models(case)]}
