"""13-memory-formula, the probe.

Call the student's formula on each model and optimizer name; record what it returned.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register(
    "13-memory-formula",
    hints=Hints(
        nudge="Each parameter costs numel() * element_size() bytes; its gradient the same if it is trained; "
        "the optimizer keeps 0, 1 or 2 more tensors like each trained parameter.",
        concept="Static training memory = parameters + gradients (trainable only) + optimizer state (SGD: none; "
        "momentum: one buffer; Adam/AdamW: exp_avg and exp_avg_sq). model.parameters() lists a tied weight once.",
        solution="params = list(model.parameters()); trained = [p for p in params if p.requires_grad]\n"
        "size = lambda ps: sum(p.numel() * p.element_size() for p in ps)\n"
        "grads = size(trained); optimizer = {'sgd': 0, 'momentum': 1, 'adam': 2, 'adamw': 2}[name] * grads",
        section="2. Where the memory goes",
    ),
    requires={
        "missing-key": Requirement(
            "returns a dict with exactly the keys params, grads, optimizer and total",
            hint="Print sorted(training_memory(model, 'sgd')): are the four keys spelled as the exercise says?"),
        "not-an-int": Requirement(
            "each value is an int number of bytes",
            hint="Print type(...) of each value: which one is a tensor or a float? sum() of Python ints is an int."),
        "wrong-params": Requirement(
            "params counts every parameter (frozen ones too) in bytes at its own dtype's size, a tied weight once",
            hint="Compare with the bytes of one small layer by hand: is yours counting elements, assuming 4 bytes, "
            "skipping frozen layers, or counting a shared weight twice?"),
        "wrong-grads": Requirement(
            "grads counts the trainable parameters only (requires_grad)",
            hint="Which parameters get a .grad in backward? Filter on p.requires_grad."),
        "wrong-optimizer-state": Requirement(
            "optimizer: no state for 'sgd', one copy of the trainable parameters for 'momentum', two for "
            "'adam' and 'adamw'",
            hint="What does each optimizer keep per parameter? Momentum: one velocity; Adam: two moments."),
        "wrong-total": Requirement(
            "total is the sum of the three others",
            hint="Print the four values and add the first three by hand."),
    },
)
def probe_memory_formula(training_memory: Callable[[nn.Module, str], dict], *, case: Case) -> dict:
    """Call the student's formula on each model and optimizer name; record what it returned."""
    return {"results": collect(memory_models(case), lambda item: {"returned": training_memory(item[1], item[2])})}
