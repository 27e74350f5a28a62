"""Lesson 16: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.failure import CheckFailed


class Classifier(nn.Module):
    """Linear -> BatchNorm1d -> ReLU -> Dropout -> Linear: parameters, buffers and train/eval behaviour."""

    def __init__(self, features: int, hidden: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))  # (batch, features) -> (batch, classes)


def build_classifier(*, features: int, hidden: int, classes: int, dropout: float) -> Classifier:
    """The `build_model` the load check passes to the student's loader: the model's code, from its config."""
    return Classifier(features, hidden, classes, dropout)


def case_config(case: Case) -> dict[str, Any]:
    """The configuration of the case's classifier (hidden cases: other sizes)."""
    if case.hidden:
        return {"features": 12, "hidden": 24, "classes": 5, "dropout": 0.3}
    return {"features": 8, "hidden": 16, "classes": 3, "dropout": 0.2}


def case_model(case: Case, salt: int) -> Classifier:
    """The case's classifier, as after training: seeded weights, BatchNorm statistics from 3 seeded batches,
    in training mode. Built identically by probe and judge, without touching the global RNG."""
    config = case_config(case)
    generator = torch.Generator().manual_seed(case.seeded(1600 + salt + (50 if case.hidden else 0)))
    model = build_classifier(**config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
        for _ in range(3):  # BatchNorm's running statistics move away from their defaults, as in training
            model.body(torch.randn(16, config["features"], generator=generator) * 2 + 1)
    return model.train()


def case_inputs(case: Case, rows: int, salt: int) -> torch.Tensor:
    """`rows` seeded input rows for the case's classifier."""
    generator = torch.Generator().manual_seed(case.seeded(1700 + salt + rows))
    return torch.randn(rows, case_config(case)["features"], generator=generator)


def attempt(call: Callable[[], Any]) -> tuple[Any, str | None]:
    """(what the student's `call` returned, None), or (None, the exception explained) when it raised: recorded
    per call, so that the judge sees what the calls before it did, and what this call ran before it raised."""
    try:
        return call(), None
    except CheckFailed:
        raise
    except Exception as error:  # the student's code raised
        return None, explain(error)[:2000]


def cloned_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the model's state dict."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _files(folder: str) -> list[str]:
    return sorted(os.listdir(folder))[:20]
