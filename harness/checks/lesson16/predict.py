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
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register


def predict_calls(case: Case) -> list[tuple[int, int, bool]]:
    """(number of requests, batch_size, whether the model arrives in training mode) of each call: one model as
    after training, one already in eval mode. Hidden: an uneven split first (a slicing that drops the last batch
    shows there, as in the visible case), then fewer requests than a batch."""
    return [(33, 8, False), (7, 16, True)] if case.hidden else [(10, 4, True), (5, 2, False)]


@register(
    "16-predict",
    hints=Hints(
        nudge="Stack the requests batch_size at a time, run each batch in eval mode under torch.inference_mode(), "
        "concatenate the outputs, and put the model's mode back as it was.",
        concept="Serving runs in eval mode (Dropout off, BatchNorm's running statistics) under "
        "torch.inference_mode() (no graph, no version counters); batching amortises the per-call overhead; the "
        "caller's model keeps its mode.",
        solution="was_training = model.training\nmodel.eval()\nwith torch.inference_mode():\n"
        "    outputs = [model(torch.stack(inputs[i:i + batch_size])) for i in range(0, len(inputs), batch_size)]\n"
        "model.train(was_training)\nreturn torch.cat(outputs).cpu()",
        section="2. Inference done right",
    ),
    requires={
        "train-mode": Requirement(
            "the model runs in eval mode",
            hint="Print model.training inside your function, just before the forward."),
        "no-inference-mode": Requirement(
            "every forward runs under torch.inference_mode()",
            hint="What is the difference between torch.no_grad() and torch.inference_mode(), and which does the "
            "exercise ask for?"),
        "wrong-batches": Requirement(
            "runs batches of batch_size requests (the last one may be smaller), in order",
            hint="Print the shape of what you pass to the model at each call: how many rows, how many calls?"),
        "not-a-tensor": Requirement(
            "returns one tensor of shape (len(inputs), classes)",
            hint="What type does your function return? torch.cat joins a list of batch outputs."),
        "wrong-output": Requirement(
            "returns the model's outputs (the logits), row i for request i",
            hint="Compare your result with model(torch.stack(inputs)) in eval mode: is something applied on top?"),
        "flag-not-restored": Requirement(
            "leaves the model in the mode it came in: training stays training, eval stays eval",
            hint="Read model.training before switching to eval, and set it back at the end (model.train(flag)): "
            "what does your function do to a model that arrives in eval mode?"),
    },
)
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
