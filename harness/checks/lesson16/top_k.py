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
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register


def top_k_calls(case: Case) -> list[tuple[int, int]]:
    """(rows, k) of each call; hidden (5 classes): k = 1, k = every class, a batch of one row."""
    return [(9, 1), (4, 5), (1, 3)] if case.hidden else [(6, 2)]


@register(
    "16-top-k",
    hints=Hints(
        nudge="Eval mode, one forward under torch.inference_mode(), softmax over the classes (the last dim), then "
        "torch.topk on the probabilities.",
        concept="A client wants each row's most likely classes and how likely they are: a softmax over each row's "
        "classes turns logits into probabilities, topk returns them sorted, with their class ids as int64.",
        solution="model.eval()\nwith torch.inference_mode():\n    probabilities = model(inputs).softmax(dim=-1)\n"
        "values, classes = probabilities.topk(k, dim=-1)\nreturn classes, values",
        section="5. Answers a client can use",
    ),
    requires={
        "train-mode": Requirement(
            "runs the model in eval mode",
            hint="Print model.training inside your function, just before the forward."),
        "no-inference-mode": Requirement(
            "runs the forward under torch.inference_mode()",
            hint="Which context manager skips the graph and the version counters, and is it the one you use?"),
        "wrong-dtype": Requirement(
            "returns classes as int64 and probabilities as float32, each of shape (rows, k)",
            hint="Print the dtype and shape of both tensors you return: what did a conversion change?"),
        "not-probabilities": Requirement(
            "probabilities are the softmax over each row's classes",
            hint="Over which dimension does your softmax sum to 1: the classes of a row, or the rows of the batch?"),
        "wrong-classes": Requirement(
            "classes are each row's k most probable class ids, most probable first",
            hint="Print probabilities for a row next to your classes: are they the largest, in decreasing order?"),
    },
)
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
