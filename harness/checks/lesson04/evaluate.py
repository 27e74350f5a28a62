"""04-evaluate, the probe.

Evaluate the case's model; record the forward modes, the syncs, the result and the state afterwards.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader

from harness.checks.lesson04.common import _data, _loader, _model, one_thread
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.instruments import (
    ForwardRecorder,
    HostSyncCounter,
)
from harness.contract.registry import register


def evaluate_inputs(case: Case) -> tuple[nn.Module, DataLoader]:
    """The model, in train mode with non-trivial BatchNorm statistics, and the loader to evaluate it on."""
    features, classes, n, batch = (5, 6, 77, 10) if case.hidden else (4, 3, 70, 16)
    model = _model(features, classes, seed=case.seeded(31 if case.hidden else 3))
    x, y = _data(n, features, classes, seed=case.seeded(9 if case.hidden else 8))
    # Give BatchNorm non-trivial running statistics, so train and eval mode give different outputs.
    with torch.no_grad():
        model.train()
        model(x * 3 + 1)
    model.train()  # as training leaves it
    return model, _loader(x, y, batch)


@register(
    "04-evaluate",
    hints=Hints(
        nudge="Evaluation needs two switches (one for layers like BatchNorm and Dropout, one for autograd) and a "
        "loss averaged over samples, not batches.",
        concept="model.eval() changes what layers do; torch.no_grad() stops autograd from recording. Both are "
        "needed, and the scores are means over samples, accumulated as tensors and read once at the end.",
        solution="`model.eval()` and `with torch.no_grad():` around the loop; accumulate `loss_fn(out, y) * "
        "len(y)` and `(out.argmax(1) == y).sum()` as tensors; return `{\"loss\": float(total / n), "
        "\"accuracy\": float(correct / n)}`",
        section="4. Evaluation",
    ),
    requires={
        "train-mode-in-eval": Requirement(
            "evaluates in eval mode (model.eval())",
            hint="The model arrives in training mode. What does BatchNorm do with your validation batches then?"),
        "builds-graph": Requirement(
            "builds no graph (torch.no_grad() or torch.inference_mode())",
            hint="Your evaluation outputs carry a grad_fn. Which context stops autograd from recording?"),
        "changes-weights": Requirement(
            "leaves the model's parameters and buffers as they were",
            hint="Compare model.state_dict() before and after your evaluate: what changes it?"),
        "host-sync-per-batch": Requirement(
            "a constant number of host syncs, not one per batch",
            hint="Which line inside the loop reads a value on the host? Accumulate tensors, convert at the end."),
        "wrong-return": Requirement(
            'returns a dict with keys "loss" and "accuracy"',
            hint="Look at what your return statement builds: the check wants a dict, by name."),
        "not-a-scalar": Requirement(
            "each score is a single number",
            hint="Your loss or accuracy has more than one element. Which reduction is missing?"),
        "sum-not-mean": Requirement(
            "the loss is a mean over samples, not their sum",
            hint="Your loss grows with the size of the loader. What is the total divided by?"),
        "unweighted-mean": Requirement(
            "the loss is weighted by the number of samples of each batch",
            hint="The last batch is smaller. Is your loss a mean of batch means?"),
        "wrong-loss": Requirement(
            "the loss is the mean of loss_fn over every sample of the loader",
            hint="Evaluate the loss of every batch, each weighted by its size, and divide by the total count."),
        "count-not-fraction": Requirement(
            "the accuracy is a fraction in [0, 1]",
            hint="Your accuracy is larger than 1. What is the number of correct predictions divided by?"),
        "wrong-accuracy": Requirement(
            "the accuracy is the fraction of argmax predictions equal to the labels, over all samples",
            hint="Which class does the model predict for a row of logits? Count those equal to y, over every batch."),
    },
)
@one_thread()
def probe_evaluate(evaluate: Callable, *, case: Case) -> dict:
    """Evaluate the case's model; record the forward modes, the syncs, the result and the state afterwards."""
    model, loader = evaluate_inputs(case)
    with ForwardRecorder(model) as forwards, HostSyncCounter() as syncs:
        result = evaluate(model, loader, nn.CrossEntropyLoss())
    return {
        "training": [r.training for r in forwards.records],
        "grad_enabled": [r.grad_enabled for r in forwards.records],
        "syncs": syncs.count,
        "sync_calls": sorted(set(syncs.calls)),
        "state_after": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "result": result,
    }
