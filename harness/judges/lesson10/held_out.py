"""10-held-out, the judge: Accuracy of run['model'] on shapes the grader generates from its own seed."""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

from harness.checks.lesson10.held_out import (
    CHUNK,
    NOTEBOOK_SETS,
    NOTEBOOK_TRAIN_SEED,
    NOTEBOOK_TRAIN_SIZES,
    held_out,
    notebook_set,
)
from harness.contract.case import Case
from harness.contract.compare import close_values, isclose_number, numbers
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.data import SHAPE_CLASSES, shapes
from harness.data.loaders import normalization_stats

ACCURACY_THRESHOLD = 0.75  # chance is 0.2; a correct run clears 0.85 even at the grading budget


def _scores(outputs: Any, labels: torch.Tensor) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of recorded logits chunks against `labels`."""
    if not (isinstance(outputs, list) and all(isinstance(chunk, torch.Tensor) and chunk.dim() == 2
                                              for chunk in outputs)):
        raise ValueError("the recorded outputs are not chunks of logits")
    logits = torch.cat(outputs).double() if outputs else torch.empty(0, len(SHAPE_CLASSES), dtype=torch.float64)
    if tuple(logits.shape) != (len(labels), len(SHAPE_CLASSES)):
        raise ValueError("the recorded outputs do not cover the set")
    return float(F.cross_entropy(logits, labels)), float((logits.argmax(1) == labels).double().mean())


def _check_validation_set(seen: dict) -> None:
    """The run's best validation scores are those of the notebook's validation set, not of its test set.

    The history was computed in the run's precision, the outputs here in float32: they agree to about 2e-4 in the
    loss. Decided only when the best row matches the test set (loss within 1e-3, accuracy within 3 images) and is
    far from the validation set (loss off by more than 5e-3): a run validated on other data shows neither."""
    if "notebook_outputs" not in seen:
        return
    losses, accuracies = seen["val_loss"], seen["val_accuracy"]
    if not (numbers(losses) and numbers(accuracies) and len(losses) == len(accuracies)):
        raise ValueError("the recorded validation scores are not numbers, one per epoch")
    best = max(range(len(accuracies)), key=lambda epoch: (accuracies[epoch], -epoch))
    scores = {name: _scores(seen["notebook_outputs"][name], notebook_set(name).tensors[1]) for name in NOTEBOOK_SETS}
    test_loss, test_accuracy = scores["test"]
    on_test = (isclose_number(float(losses[best]), test_loss, rel_tol=1e-3)
               and abs(float(accuracies[best]) - test_accuracy) <= 3 / len(notebook_set("test")))
    near_validation = isclose_number(float(losses[best]), scores["validation"][0], rel_tol=5e-3)
    if on_test and not near_validation:
        fail("validated-on-test", observed=f"the best epoch's validation scores (loss {losses[best]:.4g}, accuracy "
             f"{accuracies[best]:.4g}) are the returned model's scores on the notebook's test set",
             expected="validation on val_set: the scores of the validation set",
             cause="the test set was given to the run as its validation set: it chose the best epoch and when to "
             "stop, so the test score in the report is no longer a measure on unseen data",
             where="train_capstone(train_set, val_set, ...): validate on val_set, keep test_set for the report")


@functools.cache
def _notebook_statistics(train_size: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The normalisation statistics of the notebook's training set of `train_size` images, alone and pooled with
    its validation set."""
    train = shapes(train_size, seed=NOTEBOOK_TRAIN_SEED).tensors[0]
    pooled = torch.cat([train, notebook_set("validation").tensors[0]])
    return {"alone": normalization_stats(train), "pooled": normalization_stats(pooled)}


def _check_training_set(seen: dict) -> None:
    """The model's normalisation statistics are not those of the notebook's training set pooled with its
    validation set: decided only on a match (a model normalised otherwise, or not at all, shows nothing)."""
    statistics = seen["statistics"]
    if not (isinstance(statistics, list) and all(isinstance(t, torch.Tensor) and t.is_floating_point()
                                                 and tuple(t.shape) == (3, 1, 1) for t in statistics)):
        raise ValueError("the recorded statistics are not per-channel tensors")

    def holds(value: torch.Tensor) -> bool:
        return any(close_values(t.double(), value.double(), rtol=0, atol=1e-5, dtype=False) for t in statistics)

    for size in NOTEBOOK_TRAIN_SIZES:
        (mean, std), (alone_mean, _) = (_notebook_statistics(size)[key] for key in ("pooled", "alone"))
        if holds(mean) and holds(std) and not holds(alone_mean):
            fail("validation-seen",
                 observed=f"the model's normalisation statistics are the per-channel mean and std of the notebook's "
                 f"train_set ({size} images) and val_set ({len(notebook_set('validation'))}) together",
                 expected="the statistics of train_set alone: the run trains on train_set and validates on val_set",
                 cause="validation images were seen by training: the run trained on train_set + val_set, so the "
                 "validation accuracy that chose its best epoch scores images the model trained on",
                 where="run = train_capstone(train_set, val_set, ...): keep val_set out of the training set")


@judges(
    "10-held-out",  # these are read to tell a validation on the test set or a training set that held the
    # validation images: they can only fail a run that shows either, and a correct run passes whatever their values
    unjudged=("val_accuracy/*", "val_loss/*", "notebook_outputs/*", "statistics/*"),
    hints=Hints(
        nudge="The grader draws its own shapes, never seen in training or validation: only a model that learned the "
        "shapes passes. Look at your curves: did validation accuracy still climb at the end (train longer, or a "
        "larger lr), or jump around (a smaller lr, more warm-up)?",
        concept="Held-out accuracy follows validation accuracy when the model takes raw images (Standardize inside "
        "it) and holds the best epoch's weights; it rises with enough optimizer steps at a good learning rate.",
        solution="CONFIG = dict(epochs=budget(full=8, grading=6), batch_size=32, lr=1e-2, weight_decay=0.05, "
        "warmup_fraction=0.1, max_grad_norm=1.0, patience=3, width=budget(full=16, grading=8), seed=0)",
        section="7. The real run"),
    requires={
        "not-a-run": Requirement("check receives the dict train_capstone returns",
                                 hint="check('10-held-out', run) takes the whole run dict, not the model alone."),
        "wrong-output-shape": Requirement(
            "the model maps N images to (N, 5) logits",
            hint="How many classes does the shapes data set have, and how many outputs does your model give?"),
        "validated-on-test": Requirement(
            "the run validated on val_set, never on the test set",
            hint="Which data set did the run validate on, to choose its best epoch? The test set must stay unseen "
            "until the report."),
        "validation-seen": Requirement(
            "the run trains on train_set alone: validation images are never seen by training",
            hint="Which images did your run train on? If val_set is among them, the validation accuracy that chose "
            "the best epoch scores images the model has seen."),
        "below-threshold": Requirement(
            "at least 0.75 accuracy on the grader's held-out shapes",
            hint="Compare your run's best validation accuracy with the threshold: too low means train more or "
            "better; high means the returned model is not the validated one."),
    },
)
def judge_held_out(seen: dict, *, case: Case) -> str:
    """Accuracy of run['model'] on shapes the grader generates from its own seed."""
    if seen["model"] is not True:
        fail("not-a-run", observed=f"check received {seen['received']}", expected="the dict train_capstone returns, "
             "with the trained 'model'", cause="another object passed", where="check('10-held-out', run)")
    images, labels = held_out(case).tensors
    chunks = range(0, len(labels), CHUNK)
    correct = 0
    for start, outputs in zip(chunks, seen["outputs"], strict=True):
        outputs = outputs.detach() if isinstance(outputs, torch.Tensor) else outputs
        expected_shape = (len(labels[start : start + CHUNK]), len(SHAPE_CLASSES))
        if not (isinstance(outputs, torch.Tensor) and outputs.is_floating_point()
                and tuple(outputs.shape) == expected_shape):
            shape = (f"{outputs.dtype} values of shape {tuple(outputs.shape)}" if isinstance(outputs, torch.Tensor)
                     else type(outputs).__name__)
            fail("wrong-output-shape", observed=f"the model maps {tuple(images[:CHUNK].shape)} images to {shape}",
                 expected=f"(N, {len(SHAPE_CLASSES)}) logits",
                 cause="the model was built for another number of classes, or returns something other than one row of "
             "logits per image",
                 where="capstone_cnn(len(train_set.classes), ...)")
        correct += int((outputs.float().argmax(1) == labels[start : start + CHUNK]).sum())
    accuracy = correct / len(labels)
    _check_training_set(seen)
    _check_validation_set(seen)
    if accuracy < ACCURACY_THRESHOLD:
        history = seen["val_accuracy"]
        numbers = isinstance(history, list) and history and all(isinstance(v, (int, float)) for v in history)
        validated = float(max(history)) if numbers else None
        mismatch = validated is not None and validated >= ACCURACY_THRESHOLD
        fail("below-threshold", observed=f"accuracy {accuracy:.3f} on {len(labels)} held-out images"
             + (f", while the best validation accuracy was {validated:.3f}" if validated is not None else ""),
             expected=f"at least {ACCURACY_THRESHOLD} (chance is {1 / len(SHAPE_CLASSES):.2f})",
             cause="the returned model does not behave like the validated one: it expects normalised images "
             "(normalisation done on the data, not inside the model), or it does not hold best.pt's weights"
             if mismatch else
             "the run did not learn enough: too few steps, a learning rate too small or too large, or a model "
             "too narrow", where="train_capstone's model" if mismatch else "CONFIG, then the curves of your run")
    return (f"accuracy {accuracy:.3f} on {len(labels)} held-out images the grader generated "
            f"(threshold {ACCURACY_THRESHOLD})")
