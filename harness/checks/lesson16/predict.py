"""16-predict, the probe.

Call `predict(model, inputs, batch_size)` on a model in training mode and on one in eval mode; record every
forward's mode and rows (a forward pre-hook), what came back, and the model's mode after.
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


def predict_calls(case: Case) -> list[tuple[int, int, bool]]:
    """(number of requests, batch_size, whether the model arrives in training mode) of each call: one model as
    after training, one already in eval mode. Hidden: an uneven split first (a slicing that drops the last batch
    shows there, as in the visible case), then fewer requests than a batch."""
    return [(33, 8, False), (7, 16, True)] if case.hidden else [(10, 4, True), (5, 2, False)]


@register("16-predict")
def probe_predict(predict: Callable[..., Any], *, case: Case) -> dict:
    """Call `predict(model, inputs, batch_size)` on a model in training mode and on one in eval mode; record
    every forward's mode and rows (a forward pre-hook), what came back, and the model's mode after."""
    results = []
    for index, (count, batch_size, training) in enumerate(predict_calls(case)):
        model = case_model(case, salt=20).train(training)
        rows = case_inputs(case, count, salt=index)
        forwards: list[dict[str, Any]] = []

        def record(module: nn.Module, args: tuple[Any, ...], forwards: list[dict[str, Any]] = forwards) -> None:
            first = args[0] if args else None
            forwards.append({"training": module.training, "inference_mode": torch.is_inference_mode_enabled(),
                             "grad": torch.is_grad_enabled(),
                             "rows": int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() else -1})

        handle = model.register_forward_pre_hook(record)
        try:
            returned, raised = attempt(functools.partial(predict, model, list(rows.unbind(0)), batch_size))
        finally:
            handle.remove()
        results.append({"forwards": forwards, "returned": returned, "training_after": model.training,
                        "raised": raised})
    return {"results": results}
