"""13-memory-formula, the probe.

Call the student's formula on each model and optimizer name; record what it returned.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register


class _Tied(nn.Module):
    """An embedding whose weight the output layer shares, with a bfloat16 layer between them."""

    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mid = nn.Linear(width, width).to(torch.bfloat16)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied: one tensor, two modules


def memory_models(case: Case) -> list[tuple[str, nn.Module, str]]:
    """(description, model, optimizer name) of each call. Values do not matter, only shapes and dtypes."""
    width, hidden = (5, 12) if case.hidden else (8, 16)
    mlp = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 4))
    mlp[0].requires_grad_(False)  # a frozen first layer
    tied = _Tied(11 if case.hidden else 10, 6 if case.hidden else 4)
    if case.hidden:
        tied.mid.bias.requires_grad_(False)
    mixed = nn.Sequential(nn.Linear(width, hidden).to(torch.float16), nn.Linear(hidden, 3).double())
    return [("an MLP with a frozen first layer, with SGD", mlp, "sgd"),
            ("the same MLP with SGD and momentum", mlp, "momentum"),
            ("a model with a tied embedding and a bfloat16 layer, with Adam", tied, "adam"),
            ("the same model with AdamW", tied, "adamw")] + (
        [("a float16 and float64 model with momentum", mixed, "momentum")] if case.hidden else [])


@register("13-memory-formula")
def probe_memory_formula(training_memory: Callable[[nn.Module, str], dict], *, case: Case) -> dict:
    """Call the student's formula on each model and optimizer name; record what it returned."""
    return {"results": collect(memory_models(case), lambda item: {"returned": training_memory(item[1], item[2])})}
