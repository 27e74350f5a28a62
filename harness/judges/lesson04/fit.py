"""04-fit, the judge.

fit(...) early-stops on the val loss with patience/min_delta and leaves the best weights in the model.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader

from harness.checks.lesson04.common import one_thread
from harness.checks.lesson04.fit import VAL_SIZE, fit_problem, fit_runs
from harness.contract.case import Case
from harness.contract.compare import isclose_number, malformed, same_values, tensor_list
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson04.common import (
    SAME_LOGGED,
    _copies,
    _count,
    _flags,
    _model_state,
    _reference_eval,
    _reference_grads_and_loss,
    _require_train_mode,
)


def _early_stop_epochs(losses: list[float], patience: int, min_delta: float) -> tuple[int, int, bool]:
    """Epochs the rule runs on `losses`, the index of the best epoch, and whether the rule stopped."""
    best, best_epoch, waited = float("inf"), 0, 0
    for epoch, loss in enumerate(losses):
        if loss < best - min_delta:
            best, best_epoch, waited = loss, epoch, 0
        else:
            waited += 1
            if waited >= patience:
                return epoch + 1, best_epoch, True
    return len(losses), best_epoch, False


_HISTORY_KEYS = ("epoch", "train_loss", "val_loss", "val_accuracy")


def _history_frame(history: Any) -> pd.DataFrame:
    """The history as a frame of one row per epoch; fails "wrong-history" without the four columns of the text."""
    if not isinstance(history, (list, tuple)) or not all(isinstance(row, dict) for row in history):
        fail(
            "wrong-history",
            observed=f"fit returned a {type_name(history)}"
            + (" whose rows are not all dicts" if isinstance(history, (list, tuple)) else ""),
            expected=f"one row (a dict) per epoch with the keys {', '.join(_HISTORY_KEYS)}",
            cause="the history is not collected as a list of per-epoch dicts",
            where="the history your fit returns",
        )
    frame = pd.DataFrame(list(history))
    missing = [key for key in _HISTORY_KEYS if key not in frame.columns]
    if missing:
        fail(
            "wrong-history",
            observed=f"the history has columns {sorted(map(str, frame.columns))}",
            expected=f"one row (a dict) per epoch with the keys {', '.join(_HISTORY_KEYS)}",
            cause=f"the rows miss {missing}",
            where="the history your fit returns",
        )
    return frame


def _history_column(frame: pd.DataFrame, name: str) -> list[float]:
    """A history column as floats; fails "wrong-history" on a value that is not a Python number."""
    values = []
    for value in frame[name]:
        if isinstance(value, torch.Tensor):
            fail(
                "wrong-history",
                observed=f"{name} in the history holds a tensor of shape {tuple(value.shape)}",
                expected=f"{name} as a float in every row (the text asks for floats)",
                cause="the value is logged as the tensor train_epoch or evaluate returned: a tensor in the history "
                "keeps device memory alive and prints as tensor(...); convert it with float(...), once per epoch",
                where="the history your fit returns",
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values.append(float(value))
        else:
            fail(
                "wrong-history",
                observed=f"{name} in the history holds a {type_name(value)}",
                expected=f"{name} as a number in every row",
                cause="the value logged is not converted to a number (float(...))",
                where="the history your fit returns",
            )
    return values


def _forwards(value: Any) -> list[dict[str, Any]]:
    """The recorded forward passes of a fit, validated."""
    if not isinstance(value, list) or not all(
        isinstance(r, dict) and isinstance(r.get("training"), bool) and isinstance(r.get("grad_enabled"), bool)
        and (r.get("batch_size") is None or isinstance(r.get("batch_size"), int))
        for r in value
    ):
        malformed("forwards is not a list of forward records")
    return value


def _require_history_of_the_epochs(frame: pd.DataFrame, step_params: Any, model: nn.Module, train_loader: DataLoader,
                                   accuracies: list[float]) -> None:
    """Fail unless each epoch trained once over train_loader, and its row holds that epoch's mean training loss
    (recomputed at the recorded parameters of every step) and validation accuracy (`accuracies`, recomputed)."""
    loss_fn, batches, epochs = nn.CrossEntropyLoss(), list(train_loader), len(accuracies)
    like = [p.detach() for p in model.parameters()]
    if not isinstance(step_params, list):
        malformed("step_params is not a list")
    params = [tensor_list(step, like, "a step's params") for step in step_params]
    if len(params) != epochs * len(batches):
        fail(
            "wrong-step-count",
            observed=f"{len(params)} optimizer steps in {epochs} epochs over a train_loader of {len(batches)} batches",
            expected=f"{epochs * len(batches)}: one pass over train_loader per epoch, one step per batch",
            cause="the epoch's loop skips batches or trains more than once per epoch (train_epoch called twice, "
            "or a step of its own besides train_epoch's)",
            where="the training part of each epoch in your fit",
        )
    train_losses = []
    for epoch in range(epochs):
        steps = zip(params[epoch * len(batches):(epoch + 1) * len(batches)], batches, strict=True)
        losses = [(_reference_grads_and_loss(model, p, x, y, loss_fn)[1], len(y)) for p, (x, y) in steps]
        train_losses.append(sum(loss * n for loss, n in losses) / len(train_loader.dataset))
    reported = _history_column(frame, "train_loss")
    if not all(isclose_number(a, b, **SAME_LOGGED) for a, b in zip(reported, train_losses, strict=True)):
        fail(
            "wrong-history",
            observed=f"train_loss in the history: {[round(v, 4) for v in reported]}",
            expected=f"the mean training loss of each epoch: {[round(v, 4) for v in train_losses]}",
            cause="train_loss is not the epoch's mean training loss: fit logs another value (the last batch's "
            "loss, another epoch's, a loss computed after training), or your train_epoch does not return that "
            "mean (check 04-train-epoch first)",
            where="the history your fit returns",
        )
    reported = _history_column(frame, "val_accuracy")
    if not all(isclose_number(a, b, **SAME_LOGGED) for a, b in zip(reported, accuracies, strict=True)):
        fail(
            "wrong-history",
            observed=f"val_accuracy in the history: {[round(v, 4) for v in reported]}",
            expected=f"the accuracy on val_loader after each epoch: {[round(v, 4) for v in accuracies]}",
            cause="val_accuracy is not evaluate(model, val_loader, loss_fn)['accuracy'] of that epoch",
            where="the history your fit returns",
        )
    _history_column(frame, "epoch")


@torch.no_grad()
def _validation_scores(model: nn.Module, val_loader: DataLoader, loss_fn: nn.Module,
                       training: bool) -> dict[str, float]:
    """The scores of an evaluation of `model` on the validation set (one batch), in eval mode, or in training mode
    where the student's evaluate runs that way (BatchNorm then normalises with the batch's own statistics)."""
    if not training:
        return _reference_eval(model, val_loader, loss_fn)
    model.train()
    x, y = next(iter(val_loader))
    outputs = model(x)
    return {"loss": float(loss_fn(outputs, y)), "accuracy": float((outputs.argmax(1) == y).double().mean())}


def _judge_fit(run: dict, *, seed: int, features: int, patience: int, min_delta: float, max_epochs: int,
               evaluate_trains: bool = False) -> str:
    """Decide one fit run from its observation: the stop epoch, the history and the weights left in the model.

    With `evaluate_trains` (the student's evaluate runs the model in training mode: 04-evaluate's failure), the
    epochs validated in training mode are judged against what that evaluate returns: a bug costs its own exercise."""
    model, train_loader, val_loader = fit_problem(seed, features)
    loss_fn = nn.CrossEntropyLoss()
    like = model.state_dict()
    where = "your fit: the early-stopping bookkeeping at the end of each epoch"
    if not isinstance(run, dict) or not isinstance(run.get("snapshots"), list):
        malformed("a run is not a record of a fit")
    frame = _history_frame(run["history"])
    # Training forwards: the ones autograd records that are not the validation batch (an evaluation of
    # the training data under no_grad is allowed and is not counted).
    training = [r["training"] for r in _forwards(run["forwards"]) if r["batch_size"] != VAL_SIZE and r["grad_enabled"]]
    _require_train_mode(training, "the start of each epoch's training (train_step calls model.train())")
    snapshots = [_model_state(state, like, "a validation snapshot") for state in run["snapshots"]]
    epochs, steps = len(snapshots), len(training)
    if epochs == 0:
        fail(
            "no-validation",
            observed="the model never saw the validation batch",
            expected="evaluate(model, val_loader, loss_fn) after each training epoch",
            cause="fit does not evaluate on val_loader",
            where=where,
        )
    syncs = _count(run["syncs"], "syncs")
    if syncs >= steps:
        fail(
            "host-sync-per-step",
            observed=f"{_copies(syncs)} in {steps} training steps",
            expected="a few per epoch (the numbers you log and the early-stopping comparison)",
            cause="a loss or metric converted to a Python value (.item(), float(), a print or a comparison) at "
            "every step",
            where="the training loop inside fit",
        )
    modes = _flags(run["val_modes"], "val_modes")
    if len(modes) != len(snapshots):
        malformed("val_modes does not hold one mode per validation")
    scores, validated = [], []  # validated: the state after each validation (a training-mode one moves BatchNorm)
    for state, training in zip(snapshots, modes, strict=True):
        model.load_state_dict(state)
        scores.append(_validation_scores(model, val_loader, loss_fn, training and evaluate_trains))
        validated.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    val_losses = [score["loss"] for score in scores]
    if len(frame) != epochs:
        fail(
            "wrong-history",
            observed=f"{len(frame)} rows in the history for {epochs} epochs run",
            expected="one row per epoch",
            cause="rows appended conditionally or more than once per epoch",
            where="the history your fit returns",
        )
    reported = _history_column(frame, "val_loss")
    if not all(isclose_number(a, b, **SAME_LOGGED) for a, b in zip(reported, val_losses, strict=True)):
        fail(
            "wrong-history",
            observed=f"val_loss in the history: {[round(v, 4) for v in reported]}",
            expected=f"the loss of the model on val_loader after each epoch: {[round(v, 4) for v in val_losses]}",
            cause="the validation ran with the model in training mode (BatchNorm on the batch's own statistics): fit "
            "does not validate through an evaluate that sets eval mode" if any(modes) and not evaluate_trains
            else "val_loss is not evaluate(model, val_loader, loss_fn)['loss'] after the epoch's training",
            where="the history your fit returns",
        )
    expected_epochs, best_epoch, stopped = _early_stop_epochs(val_losses, patience, min_delta)
    if not stopped:
        expected_epochs = max_epochs
    if epochs != expected_epochs:
        curve = ", ".join(f"{v:.4f}" for v in val_losses)
        train_losses = _history_column(frame, "train_loss")
        train_stop, _, train_stopped = _early_stop_epochs(train_losses, patience, min_delta)
        on_train = (train_stopped and train_stop == epochs) or (not train_stopped and epochs == max_epochs)
        flipped_stop, _, flipped_stopped = _early_stop_epochs(val_losses, patience, -min_delta)
        flipped = min_delta > 0 and (flipped_stop if flipped_stopped else max_epochs) == epochs
        if flipped and not on_train:
            fail(
                "wrong-stop-epoch",
                observed=f"ran {epochs} epochs (max_epochs={max_epochs}) with validation losses {curve}, which is "
                f"what the rule gives when an epoch counts as better for a loss below best + min_delta",
                expected=f"{expected_epochs} epochs: an improvement is a loss below best - min_delta "
                f"(min_delta={min_delta}), patience={patience}",
                cause="min_delta on the wrong side of the comparison (loss < best + min_delta): an epoch up to "
                "min_delta worse than the best counts as an improvement and resets the counter",
                where=where,
                hint="An improvement must beat the best by more than min_delta: loss < best - min_delta.",
            )
        if on_train:
            fail(
                "early-stop-on-train-loss",
                observed=f"ran {epochs} epochs (max_epochs={max_epochs}), which is what the rule gives on the "
                "*training* loss",
                expected=f"stop after {expected_epochs} epochs: the validation loss ({curve}) had not improved by "
                f"more than min_delta={min_delta} for patience={patience} epochs",
                cause="early stopping watches train_loss, which keeps falling while the model overfits" + (
                    "; or min_delta on the wrong side of the comparison (loss < best + min_delta), which gives the "
                    "same epochs on these losses: an epoch up to min_delta worse than the best counts as an "
                    "improvement" if flipped else ""),
                where=where,
            )
        fail(
            "wrong-stop-epoch",
            observed=f"ran {epochs} epochs (max_epochs={max_epochs}) with validation losses {curve}",
            expected=f"{expected_epochs} epochs: stop once the val loss has not improved on the best by more "
            f"than min_delta={min_delta} for patience={patience} epochs in a row",
            cause="the patience counter is not reset on improvement, patience or min_delta is not the argument "
            "given (ignored or hard-coded), the comparison is off by one, or the loop never breaks",
            where=where,
        )
    final = _model_state(run["final"], like, "the final state")
    if any(not same_values(final[k], v, dtype=False) for k, v in validated[best_epoch].items()):
        fail(
            "best-weights-not-restored",
            observed=f"after fit the model does not hold the weights of its best epoch ({best_epoch + 1})",
            expected="the state of the epoch with the lowest val loss, restored at the end",
            cause="the best state is never loaded back, or it was kept as model.state_dict() without a copy "
            "(copy.deepcopy), whose tensors keep changing as training goes on, or it was saved at another epoch",
            where=where,
        )
    # Last: a wrong train_loss may come from train_epoch (its own exercise), so the rule and the weights first.
    _require_history_of_the_epochs(frame, run["step_params"], model, train_loader,
                                   [score["accuracy"] for score in scores])
    return f"stopped after {epochs} epoch{'' if epochs == 1 else 's'}, best epoch {best_epoch + 1}"


@judges(
    "04-fit",
    hints=Hints(
        nudge="Track the best validation loss so far and a copy of the weights then; count epochs since the last "
        "improvement (by more than min_delta) and stop when the count reaches patience.",
        concept="Early stopping watches the validation loss: an epoch improves when it beats the best by more "
        "than min_delta; patience epochs in a row without improvement stop the run; the best epoch's weights "
        "(a deep copy) are loaded back at the end.",
        solution="After evaluate: `if val < best - min_delta: best, waited, best_state = val, 0, "
        "copy.deepcopy(model.state_dict())` else `waited += 1; if waited >= patience: break`; after the loop "
        "`model.load_state_dict(best_state)`",
        section="5. `fit` with early stopping",
    ),
    requires={
        "eval-mode-in-training": Requirement(
            "trains each epoch in training mode (after evaluate left the model in eval mode)",
            hint="evaluate() leaves the model in eval mode. What switches it back before the next epoch trains?"),
        "no-validation": Requirement(
            "evaluates on val_loader after each epoch",
            hint="Where does your fit look at val_loader? Early stopping needs its loss every epoch."),
        "host-sync-per-step": Requirement(
            "no host sync per training step (a few per epoch)",
            hint="Which line of your epoch converts a loss to a Python number at every step?"),
        "wrong-step-count": Requirement(
            "each epoch trains once over the whole train_loader",
            hint="Count the optimizer steps per epoch: one per batch of train_loader, one pass per epoch."),
        "wrong-history": Requirement(
            "returns one row per epoch with epoch, train_loss, val_loss and val_accuracy as floats, "
            "matching the epoch's training and validation",
            hint="Print your history: one dict per epoch, the four keys, plain floats, values of that epoch?"),
        "early-stop-on-train-loss": Requirement(
            "early stopping watches the validation loss",
            hint="Which loss does your improvement test compare? The training loss keeps falling while you overfit."),
        "wrong-stop-epoch": Requirement(
            "stops after patience epochs in a row without an improvement by more than min_delta (max_epochs "
            "at most)",
            hint="Replay your rule by hand on the val losses of the message: when is the counter reset, when "
            "does it stop?"),
        "best-weights-not-restored": Requirement(
            "leaves the weights of the best epoch in the model (a deep copy, loaded back at the end)",
            hint="After fit, which epoch's weights does your model hold? Is your saved copy still that epoch's?"),
    },
)
@one_thread()
def judge_fit(seen: dict, *, case: Case) -> str:
    """fit(...) early-stops on the val loss with patience/min_delta and leaves the best weights in the model."""
    runs = fit_runs(case)
    if not isinstance(seen["runs"], list):
        malformed("runs is not a list")
    evaluate_trains = seen["evaluate_trains"]
    if evaluate_trains is not None and not isinstance(evaluate_trains, bool):
        malformed("evaluate_trains is not a flag")
    verdict = "; ".join(_judge_fit(run, **settings, evaluate_trains=evaluate_trains is True)
                        for run, settings in zip(seen["runs"], runs, strict=True))
    if evaluate_trains is True and any(True in run["val_modes"] for run in seen["runs"]):
        verdict += (" (judged on what your evaluate returns, which runs the model in training mode: that bug is "
                    "04-evaluate's to fix)")
    return verdict
