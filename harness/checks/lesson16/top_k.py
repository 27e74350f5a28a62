"""16-top-k, the probe.

Call `top_k(model, inputs, k)` on a model in training mode; record every forward's mode (a forward pre-hook)
and what came back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson16.common import attempt, case_inputs, case_model
from harness.contract.case import Case
from harness.contract.registry import register


def top_k_calls(case: Case) -> list[tuple[int, int]]:
    """(rows, k) of each call; hidden (5 classes): k = 1, k = every class, a batch of one row."""
    return [(9, 1), (4, 5), (1, 3)] if case.hidden else [(6, 2)]


@register("16-top-k")
def probe_top_k(top_k: Callable[..., Any], *, case: Case) -> dict:
    """Call `top_k(model, inputs, k)` on a model in training mode; record every forward's mode and the result (or
    the exception it raised)."""
    results = []
    for index, (rows, k) in enumerate(top_k_calls(case)):
        model, forwards = case_model(case, salt=60), []

        def record(module: nn.Module, args: tuple[Any, ...], forwards: list = forwards) -> None:
            forwards.append({"training": module.training, "inference_mode": torch.is_inference_mode_enabled()})

        handle = model.register_forward_pre_hook(record)
        try:
            returned, raised = attempt(functools.partial(top_k, model, case_inputs(case, rows, salt=60 + index), k))
        finally:
            handle.remove()
        results.append({"forwards": forwards, "returned": tuple(returned) if isinstance(returned, (tuple, list))
                        else returned, "raised": raised})
    return {"results": results}
