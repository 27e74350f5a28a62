"""02-count-trainable, the probe: Count each of the case's models with the student's function."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.registry import register


class _CountModel(nn.Module):
    def __init__(self, width: int, frozen: bool) -> None:
        super().__init__()
        self.embed = nn.Linear(10, width)
        self.norm = nn.BatchNorm1d(width)
        self.body = nn.Linear(width, width)
        self.out = nn.Linear(width, 10, bias=False)
        self.tied = self.body  # the same layer reachable twice: its parameters must be counted once
        if frozen:
            self.embed.requires_grad_(False)


def count_models(case: Case) -> list[tuple[str, nn.Module]]:
    """(description, model): a shared layer with BatchNorm buffers, the same with a frozen layer, a nested
    convolutional model whose head was frozen, a lone norm, and a module without parameters."""
    width, channels = (9, 6) if case.hidden else (12, 4)

    def build() -> list[tuple[str, nn.Module]]:
        frozen_head = nn.Sequential(nn.Sequential(nn.Conv2d(3, channels, 3), nn.BatchNorm2d(channels)),
                                    nn.Flatten(), nn.Linear(channels, 2))
        frozen_head[2].requires_grad_(False)
        return [
            ("a model with a layer reachable twice and BatchNorm buffers", _CountModel(width, frozen=False)),
            ("the same model with its first layer frozen", _CountModel(width, frozen=True)),
            ("nested Sequential(Sequential(Conv2d, BatchNorm2d), Flatten, Linear) with the Linear frozen", frozen_head),
            (f"Sequential(LayerNorm({width}))", nn.Sequential(nn.LayerNorm(width))),
            ("nn.ReLU(), which has no parameters", nn.ReLU()),
        ]

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(0))
        return build()


@register("02-count-trainable")
def probe_count_trainable(count_trainable: Callable[[nn.Module], int], *, case: Case) -> dict:
    """Count each of the case's models with the student's function."""
    with torch.random.fork_rng(devices=[]):
        return {"counts": [count_trainable(model) for _, model in count_models(case)]}
