"""07-plateau, the judge.

The scheduler must receive, once per epoch, the validation loss of the model at that moment.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from harness.checks.lesson07.plateau import (
    PlateauSetting,
    no_metric_failure,
    plateau_model,
    plateau_scheduler,
    plateau_setting,
)
from harness.contract.case import Case
from harness.contract.compare import isclose_number, isclose_numbers, malformed, real, tensor_dict
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson07.common import _fmt


def _mean_loss(model: nn.Module, dataset: TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(dataset.tensors[0]), dataset.tensors[1]))


def _check_eval_modes(records: list[Any], val_batch: int, train_batch: int) -> None:
    """Validation forwards in eval mode without autograd; forwards that record a graph in train mode."""
    records = [(bool(training), bool(grad), size) for training, grad, size in records]
    val_forwards = [r for r in records if r[2] == val_batch]
    # training forwards are those that record a graph; a no_grad pass over the training set (to log its loss)
    # may legitimately run in eval mode
    train_forwards = [r for r in records if r[2] == train_batch and r[1]]
    if not val_forwards:
        fail(
            "no-validation",
            observed="the model never ran on a validation batch",
            expected="one pass over val_loader per epoch",
            cause="the validation loss is not computed from val_loader",
            where="the evaluation part of the epoch",
        )
    if any(training for training, _, _ in val_forwards):
        fail(
            "val-in-train-mode",
            observed="validation batches ran with model.training == True",
            expected="model.eval() before evaluating (dropout and batch norm behave differently)",
            cause="missing model.eval()",
            where="before the validation loop",
        )
    if any(grad for _, grad, _ in val_forwards):
        fail(
            "val-with-grad",
            observed="validation ran with autograd recording",
            expected="torch.no_grad() (or torch.inference_mode()) around evaluation",
            cause="the validation loop builds graphs it never uses",
            where="wrap the validation loop in `with torch.no_grad():`",
        )
    if any(not training for training, _, _ in train_forwards):
        fail(
            "train-in-eval-mode",
            observed="training batches ran with model.training == False",
            expected="model.train() at the start of every epoch",
            cause="model.eval() for validation is never undone",
            where="the top of the epoch loop",
        )


def _losses_at(weights: Any, setting: PlateauSetting) -> tuple[float, float]:
    """The mean validation and training losses (eval mode) of the plateau model holding `weights`."""
    model = _model_holding(weights)
    return _mean_loss(model, setting.val_set), _mean_loss(model, setting.train_set)


def _model_holding(weights: Any) -> nn.Module:
    """The plateau model holding recorded weights, refused unless each has the model's own shape and dtype."""
    with torch.random.fork_rng(devices=[]):
        model = plateau_model()
    recorded = tensor_dict(weights, "the recorded weights")
    own = model.state_dict()
    if recorded.keys() != own.keys() or any(
            (recorded[k].shape, recorded[k].dtype) != (v.shape, v.dtype) for k, v in own.items()):
        malformed("the recorded weights do not fit the model")
    model.load_state_dict(recorded, strict=True)
    return model.eval()


def _accuracies_at(weights: Any, setting: PlateauSetting) -> dict[str, float]:
    """The validation and training accuracies (eval mode) of the plateau model holding `weights`."""
    model = _model_holding(weights)
    with torch.no_grad():
        return {name: float((model(inputs).argmax(1) == targets).float().mean())
                for name, (inputs, targets) in (("validation", setting.val_set.tensors),
                                                ("training", setting.train_set.tensors))}


def _fed_an_accuracy(calls: list[dict[str, Any]], metrics: list[float], setting: PlateauSetting) -> None:
    """Fail when every metric the scheduler received is an accuracy of the model at that moment (a fraction or a
    percentage): ReduceLROnPlateau(mode='min') then lowers the lr while the model gets better."""
    accuracies = [_accuracies_at(call["weights"], setting) for call in calls]
    for which in ("validation", "training"):
        for scale, unit in ((1.0, "a fraction"), (100.0, "a percentage")):
            wanted = [scale * accuracy[which] for accuracy in accuracies]
            if isclose_numbers(metrics, wanted, rel_tol=1e-4, abs_tol=1e-6):
                fail(
                    "plateau-wrong-metric",
                    observed=f"scheduler.step received {_fmt(metrics)}: the {which} accuracy at each epoch, as "
                    f"{unit}",
                    expected="the mean validation loss: the scheduler is ReduceLROnPlateau(mode='min'), so a "
                    "rising accuracy reads as getting worse and the lr is cut while the model improves",
                    cause=f"scheduler.step({which[:3]}_accuracy) instead of scheduler.step(val_loss) (an accuracy "
                    "needs mode='max', and the exercise asks for the loss)",
                    where="the argument of scheduler.step: the first value evaluate returns",
                )


def _check_stepped_after_training(calls: list[dict[str, Any]], records: Any, setting: PlateauSetting) -> None:
    """Fail when a scheduler.step call came before its epoch's training batches: the metric it received, even if
    it is the validation loss of the weights at that moment, is the previous epoch's."""
    if not isinstance(records, list):
        malformed("the recorded forward passes are not a list")
    per_epoch = math.ceil(len(setting.train_set) / setting.train_bs)
    for epoch, call in enumerate(calls):
        before = call.get("forwards_before")
        if not isinstance(before, int) or isinstance(before, bool) or not 0 <= before <= len(records):
            malformed("the number of forward passes before a scheduler.step is not a count of the recorded ones")
        trained = sum(1 for _, grad, size in records[:before] if grad and size == setting.train_bs)
        if trained < (epoch + 1) * per_epoch:
            fail(
                "plateau-wrong-metric",
                observed=f"epoch {epoch}: scheduler.step ran after {trained} training batches; this epoch's "
                f"training ends after {(epoch + 1) * per_epoch}",
                expected="scheduler.step(val_loss) at the end of each epoch, after its training and its validation",
                cause="the scheduler is stepped before the epoch's training (at the top of the epoch loop), so it "
                "receives a validation loss from before that training: the previous epoch's (at epoch 0, the "
                "untrained model's)",
                where="move scheduler.step(val_loss) after this epoch's evaluation",
                hint="When your scheduler.step runs, which epoch's training has the validation loss you pass seen?",
            )


def _batch_mean_loss(weights: Any, setting: PlateauSetting) -> float:
    """The plain mean of the validation batches' mean losses (eval mode) of the plateau model holding `weights`."""
    model = _model_holding(weights)
    inputs, targets = setting.val_set.tensors
    with torch.no_grad():
        return sum(float(nn.functional.cross_entropy(model(x), y))
                   for x, y in zip(inputs.split(setting.val_bs), targets.split(setting.val_bs), strict=True)
                   ) / math.ceil(len(inputs) / setting.val_bs)


def _fail_stale_or_unweighted(wrong: list[tuple[int, float, float, float]], metrics: list[float],
                              calls: list[dict[str, Any]], losses: list[tuple[float, float]],
                              setting: PlateauSetting) -> None:
    """Name the cause when the metrics are the previous epoch's validation losses, or means of batch means."""
    epoch, metric, val_loss, _ = wrong[-1]
    if len(metrics) > 1 and isclose_numbers(metrics[1:], [val for val, _ in losses[:-1]], rel_tol=1e-4, abs_tol=1e-6):
        fail(
            "plateau-wrong-metric",
            observed=f"epoch {epoch}: scheduler.step received {metric:.4f}, the validation loss of epoch "
            f"{epoch - 1}; this epoch's was {val_loss:.4f}",
            expected="the mean validation loss of the model after this epoch's training",
            cause="the value passed was computed before this epoch's training: the previous epoch's validation loss",
            where="evaluate after the epoch's training, then pass that value to scheduler.step",
            hint="When was the value you pass to scheduler.step computed: before or after this epoch's training?",
        )
    batch_means = [_batch_mean_loss(call["weights"], setting) for call in calls]
    if isclose_numbers(metrics, batch_means, rel_tol=1e-4, abs_tol=1e-6):
        last = len(setting.val_set) % setting.val_bs
        fail(
            "plateau-wrong-metric",
            observed=f"epoch {epoch}: scheduler.step received {metric:.4f}, the plain mean of the validation "
            f"batches' losses; the mean over samples was {val_loss:.4f}",
            expected=f"the mean validation loss over samples (the last batch holds {last} of {setting.val_bs})",
            cause="averaging batch means over-weights the smaller last batch",
            where="weight each batch's loss by its number of samples, and divide by the total",
            hint="The last validation batch is smaller. Is your validation loss a mean of batch means?",
        )


@judges(
    "07-plateau",
    hints=Hints(
        nudge="ReduceLROnPlateau reacts to the number you pass to step(). Which number tells you the model "
        "stopped improving on data it has not trained on?",
        concept="Each epoch: train (model.train()), then evaluate on val_loader in eval mode without autograd, "
        "then one scheduler.step(val_loss). The training loss keeps falling and never plateaus.",
        solution="val_loss, _ = evaluate(model, val_loader, loss_fn); scheduler.step(val_loss); "
        "val_losses.append(val_loss) at the end of each epoch; return val_losses",
        section="5. `ReduceLROnPlateau`: feed it the validation metric",
    ),
    requires={
        "plateau-per-batch": Requirement(
            "the scheduler is stepped once per epoch",
            hint="Count your scheduler.step calls in one epoch: how many validation results does an epoch give?"),
        "plateau-no-metric": Requirement(
            "scheduler.step receives the validation metric",
            hint="ReduceLROnPlateau has no curve of its own: what does it compare from one epoch to the next?"),
        "plateau-not-stepped": Requirement(
            "the scheduler is stepped every epoch, the first one included",
            hint="Count your scheduler.step calls over the whole run: one per epoch, from the first epoch on?"),
        "no-validation": Requirement(
            "the validation loss is computed on val_loader",
            hint="Which loader does your evaluation iterate over?"),
        "val-in-train-mode": Requirement(
            "validation runs in eval mode (model.eval())",
            hint="Dropout is still on while you validate: which call turns it off?"),
        "val-with-grad": Requirement(
            "validation runs without autograd (torch.no_grad())",
            hint="Your validation builds a graph it never uses: which context turns autograd off?"),
        "train-in-eval-mode": Requirement(
            "training runs in train mode every epoch (model.train())",
            hint="After the first validation, which mode is the model in when the next epoch trains?"),
        "plateau-train-metric": Requirement(
            "the metric is the validation loss, not the training loss",
            hint="On random labels the training loss keeps falling: which loss tells you the model stopped "
            "improving on unseen data?"),
        "plateau-wrong-metric": Requirement(
            "the metric is this epoch's mean validation loss",
            hint="Is the value you pass computed after this epoch's training, and is it a mean over the "
            "validation set?"),
        "wrong-return": Requirement(
            "returns the list of validation losses, one per epoch",
            hint="What does your function return? The check wants one validation loss per epoch."),
    },
)
def judge_plateau(seen: dict, *, case: Case) -> str:
    """The scheduler must receive, once per epoch, the validation loss of the model at that moment."""
    setting = plateau_setting(case)
    epochs, calls = setting.epochs, seen["calls"]
    if len(calls) > epochs:
        fail(
            "plateau-per-batch",
            observed=f"scheduler.step was called {len(calls)} times in {epochs} epochs",
            expected=f"{epochs} calls: one per epoch, after validation",
            cause="scheduler.step(...) sits inside the batch loop, or is called more than once per epoch",
            where="move it to the end of the epoch",
        )
    if any(call["metric"] is None for call in calls):
        no_metric_failure()
    if len(calls) < epochs:
        fail(
            "plateau-not-stepped",
            observed=f"scheduler.step was called {len(calls)} times in {epochs} epochs",
            expected=f"{epochs} calls, one per epoch",
            cause="the scheduler is not stepped every epoch",
            where="the end of the epoch loop: scheduler.step(val_loss)",
        )
    _check_eval_modes(seen["forwards"], setting.val_bs, setting.train_bs)
    _check_stepped_after_training(calls, seen["forwards"], setting)
    metrics = [float(call["metric"]) for call in calls]
    losses = [_losses_at(call["weights"], setting) for call in calls]
    if not isclose_numbers(metrics, [val for val, _ in losses], rel_tol=1e-4, abs_tol=1e-6):
        _fed_an_accuracy(calls, metrics, setting)
    wrong = [
        (e, m, v, t) for e, (m, (v, t)) in enumerate(zip(metrics, losses, strict=True))
        if not isclose_number(m, v, rel_tol=1e-4, abs_tol=1e-6)
    ]
    like_train = [w for w in wrong if abs(w[1] - w[3]) < abs(w[1] - w[2])]
    if wrong and 2 * len(like_train) >= len(wrong):
        epoch, metric, val_loss, train_loss = like_train[-1]
        fail(
            "plateau-train-metric",
            observed=f"epoch {epoch}: scheduler.step received {metric:.4f} while the validation loss was "
            f"{val_loss:.4f} (training loss {train_loss:.4f})",
            expected="the validation loss: here the net memorises random labels, so the training loss keeps "
            "falling and never plateaus, while the validation loss rises",
            cause="scheduler.step(train_loss) instead of scheduler.step(val_loss)",
            where="the argument of scheduler.step at the end of the epoch",
        )
    if wrong:
        _fail_stale_or_unweighted(wrong, metrics, calls, losses, setting)
        epoch, metric, val_loss, _ = wrong[0]
        fail(
            "plateau-wrong-metric",
            observed=f"epoch {epoch}: scheduler.step received {metric:.4f}, the validation loss was {val_loss:.4f}",
            expected="the mean validation loss of the model after this epoch's training",
            cause="a stale value (last epoch's), a sum instead of a mean, or a single batch's loss",
            where="how the validation loss is computed and when it is passed",
        )
    val_losses = [val for val, _ in losses]
    returned = seen["returned"]
    if not isinstance(returned, (list, tuple)) or not isclose_numbers(
            [real(r) for r in returned], val_losses, rel_tol=1e-4, abs_tol=1e-6):
        fail(
            "wrong-return",
            observed=f"returned {returned!r:.120}",
            expected=f"the {epochs} validation losses, one per epoch: {_fmt(val_losses)}",
            cause="returning the training losses, or nothing",
            where="the return statement",
        )
    tensors = [i for i, r in enumerate(returned) if isinstance(r, torch.Tensor)]
    if tensors:
        fail(
            "wrong-return",
            observed=f"the returned list holds tensors (epoch {tensors[0]}: {returned[tensors[0]]!r:.60})",
            expected="list[float], as the exercise's signature says: one Python float per epoch",
            cause="the validation loss is appended as the 0-dim tensor it was computed as",
            where="the line that collects the validation loss: append float(val_loss)",
            hint="Your list holds the right values, as tensors. What does the signature say each entry is?",
        )
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1e-2)
    scheduler = plateau_scheduler(optimizer)
    for val_loss in val_losses:
        scheduler.step(val_loss)
    final_lr = optimizer.param_groups[0]["lr"]
    return f"stepped once per epoch with the validation loss; lr went 0.01 -> {final_lr:.2g} as it rose"
