"""04-evaluate, the judge.

evaluate(model, loader, loss_fn) -> {"loss", "accuracy"}: eval mode, no graph, per-sample means.
"""

from __future__ import annotations

from torch import nn

from harness.checks.lesson04.common import one_thread
from harness.checks.lesson04.evaluate import evaluate_inputs
from harness.contract.case import Case
from harness.contract.compare import isclose_number, same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson04.common import (
    SAME,
    _copies,
    _flags,
    _model_state,
    _reference_eval,
    _scalar_or_fail,
    _sync_calls,
    _syncs,
)


@judges(
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
def judge_evaluate(seen: dict, *, case: Case) -> str:
    """evaluate(model, loader, loss_fn) -> {"loss", "accuracy"}: eval mode, no graph, per-sample means."""
    model, loader = evaluate_inputs(case)
    reference = _reference_eval(model, loader, nn.CrossEntropyLoss())
    n, batch = len(loader.dataset), loader.batch_size
    before = model.state_dict()
    after = _model_state(seen["state_after"], before, "state_after")
    where = "your evaluate"

    if any(_flags(seen["training"], "training")):
        fail(
            "train-mode-in-eval",
            observed="the model ran in training mode during evaluation",
            expected="model.eval() before the evaluation forward passes",
            cause="without eval(), BatchNorm uses the batch's statistics (and updates its running ones) and "
            "Dropout drops units, so the score is noisy and the model changes while you measure it",
            where=where,
        )
    if any(_flags(seen["grad_enabled"], "grad_enabled")):
        fail(
            "builds-graph",
            observed="the evaluation forward passes ran with autograd recording (torch.is_grad_enabled() was True)",
            expected="no graph: wrap evaluation in `with torch.no_grad():` or `torch.inference_mode()`",
            cause="without no_grad every forward keeps its activations for a backward that never comes: "
            "more memory and time for nothing",
            where=where,
        )
    if any(not same_values(before[k], v, dtype=False) for k, v in after.items()):
        fail(
            "changes-weights",
            observed="the model's parameters or buffers changed during evaluate",
            expected="evaluation leaves the model exactly as it was",
            cause="evaluate changes the model: an optimizer step, an in-place change of a parameter or buffer, or "
            "a load_state_dict inside it",
            where=where,
        )
    count, calls = _sync_calls(seen)
    if count >= len(loader):
        fail(
            "host-sync-per-batch",
            observed=f"{_copies(count)} ({', '.join(calls)}) for {len(loader)} batches",
            expected="a constant few (one per returned number), not one per batch",
            cause=f"a conversion to a Python value ({', '.join(calls)}) inside the loop; accumulate tensors and "
            "convert once at the end",
            where=where,
        )
    result = seen["result"]
    if not isinstance(result, dict) or not {"loss", "accuracy"} <= set(result):
        fail(
            "wrong-return",
            observed=f"evaluate returned {type_name(result)}"
            + (f" with keys {sorted(result)}" if isinstance(result, dict) else ""),
            expected='a dict with keys "loss" and "accuracy"',
            cause="the return value has another shape",
            where="the return statement of evaluate",
        )
    loss = _scalar_or_fail(result["loss"], 'result["loss"]', where)
    accuracy = _scalar_or_fail(result["accuracy"], 'result["accuracy"]', where)
    if isclose_number(loss, reference["sum"], **SAME):
        fail(
            "sum-not-mean",
            observed=f"loss = {loss:.3f}, the sum of the per-sample losses",
            expected=f"{reference['loss']:.5f}, their mean over the {n} samples",
            cause="the accumulated `loss * len(y)` is never divided by the number of samples",
            where=where,
        )
    if isclose_number(loss, reference["batch_mean"], **SAME) and not isclose_number(loss, reference["loss"], **SAME):
        fail(
            "unweighted-mean",
            observed=f"loss = {loss:.5f}, the plain mean of the batch losses",
            expected=f"{reference['loss']:.5f}, the mean over samples (the last batch holds {n % batch} samples)",
            cause="averaging batch means over-weights the smaller last batch",
            where=where,
        )
    if not isclose_number(loss, reference["loss"], **SAME):
        fail(
            "wrong-loss",
            observed=f"loss = {loss:.5f}",
            expected=f"{reference['loss']:.5f}, the mean loss over the loader's samples in eval mode",
            cause="the loss is accumulated or averaged differently",
            where=where,
        )
    if isclose_number(accuracy, reference["correct"], **SAME) and reference["correct"] != reference["accuracy"]:
        fail(
            "count-not-fraction",
            observed=f"accuracy = {accuracy:.0f}, the number of correct predictions",
            expected=f"{reference['accuracy']:.4f}, the fraction correct",
            cause="the count of correct predictions is never divided by the number of samples",
            where=where,
        )
    if not isclose_number(accuracy, reference["accuracy"], **SAME):
        fail(
            "wrong-accuracy",
            observed=f"accuracy = {accuracy:.4f}",
            expected=f"{reference['accuracy']:.4f}",
            cause="predictions are not out.argmax(1), or the count is not over all samples",
            where=where,
        )
    return f"eval mode, no graph, mean loss and accuracy over {n} samples, {_syncs(count)}"
