"""10-held-out, the judge: Accuracy of run['model'] on shapes the grader generates from its own seed."""

from __future__ import annotations

import torch

from harness.checks.lesson10.held_out import _CHUNK, _held_out
from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.registry import judges
from harness.data import SHAPE_CLASSES

ACCURACY_THRESHOLD = 0.75  # chance is 0.2; a correct run clears 0.85 even at the grading budget


@judges("10-held-out")
def judge_held_out(seen: dict, *, case: Case) -> str:
    """Accuracy of run['model'] on shapes the grader generates from its own seed."""
    if seen["model"] is not True:
        fail("not-a-run", observed=f"check received {seen['received']}", expected="the dict train_capstone returns, "
             "with the trained 'model'", cause="another object passed", where="check('10-held-out', run)")
    images, labels = _held_out(case).tensors
    chunks = range(0, len(labels), _CHUNK)
    correct = 0
    for start, outputs in zip(chunks, seen["outputs"], strict=True):
        outputs = outputs.detach() if isinstance(outputs, torch.Tensor) else outputs
        expected_shape = (len(labels[start : start + _CHUNK]), len(SHAPE_CLASSES))
        if not isinstance(outputs, torch.Tensor) or tuple(outputs.shape) != expected_shape:
            shape = tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else type(outputs).__name__
            fail("wrong-output-shape", observed=f"the model maps {tuple(images[:_CHUNK].shape)} images to {shape}",
                 expected=f"(N, {len(SHAPE_CLASSES)}) logits",
                 cause="the model was built for another number of classes, or returns something other than one row of "
             "logits per image",
                 where="capstone_cnn(len(train_set.classes), ...)")
        correct += int((outputs.float().argmax(1) == labels[start : start + _CHUNK]).sum())
    accuracy = correct / len(labels)
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
