"""10-held-out, the probe.

Record run['model']'s outputs on the case's held-out images (their labels stay with the judge), its
normalisation statistics (which images the run trained on) and the validation accuracies of the run's history.
Graded, a hidden case's images arrive as data (`Case.inputs`), never with the seed that would rebuild their
labels in the kernel.
"""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd
import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.registry import register
from harness.data import LabeledTensorDataset, shapes

# The grader's held-out images: shapes drawn from seeds the lesson never uses for training or validation.
HELD_OUT = {False: (1000, 10_007), True: (1000, 20_011)}  # hidden -> (images, seed)


CHUNK = 250  # held-out images per forward pass

# The notebook's validation and test sets (capstone_data("shapes", ..., 500, 1000): seeds 1 and 2): the best
# epoch's scores in the run's history show which of the two it validated on.
NOTEBOOK_SETS = {"validation": (500, 1), "test": (1000, 2)}


# The notebook's training sets: capstone_data("shapes", budget(full=3000, grading=2000), ...) draws seed 0. Their
# normalisation statistics, alone and pooled with the validation set, tell whether a run trained on val_set too.
NOTEBOOK_TRAIN_SIZES, NOTEBOOK_TRAIN_SEED = (2000, 3000), 0

# A model's buffers of this shape are per-channel image statistics (a Standardize's mean and std).
_STATISTIC_SHAPE = (3, 1, 1)


@functools.cache
def notebook_set(name: str) -> LabeledTensorDataset:
    """The notebook's validation or test set, as capstone_data draws it."""
    count, seed = NOTEBOOK_SETS[name]
    return shapes(count, seed=seed)


def held_out(case: Case) -> LabeledTensorDataset:
    """The grader's held-out images: shapes drawn from seeds the lesson never uses for training or validation."""
    count, seed = HELD_OUT[case.hidden]
    return shapes(count, seed=case.seeded(seed), size=32)


def held_out_images(case: Case) -> torch.Tensor:
    """The held-out images alone: what a graded kernel receives as data for a hidden case (`Case.inputs`)."""
    return held_out(case).tensors[0]


def _outputs(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """The model's float32 outputs on `images`, chunk by chunk, in eval mode (its mode restored afterwards)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            return [model(images[start : start + CHUNK].to(device)).float().cpu()
                    for start in range(0, len(images), CHUNK)]
    finally:
        model.train(was_training)


# Graded, a hidden case's images come as data: its seed would rebuild the labels
@register("10-held-out", inputs_as_data=held_out_images)
def probe_held_out(run: dict[str, Any], *, case: Case) -> dict:
    """Record run['model']'s outputs on the case's held-out images (their labels stay with the judge), its
    buffers shaped like per-channel image statistics, the validation scores of the run's history, and (with
    those) the model's outputs on the notebook's validation and test sets."""
    model = run.get("model") if isinstance(run, dict) else None
    if not isinstance(model, nn.Module):
        return {"received": type(run).__name__, "model": False}
    history = run.get("history")
    has_column = isinstance(history, pd.DataFrame) and "val_accuracy" in history
    validated = history["val_accuracy"].tolist() if has_column else None
    images = torch.load(case.inputs, weights_only=True) if case.inputs else held_out_images(case)
    statistics = [buffer.detach().float().cpu().clone() for buffer in model.buffers()
                  if tuple(buffer.shape) == _STATISTIC_SHAPE and buffer.is_floating_point()][:8]
    seen = {"received": type(run).__name__, "model": True, "outputs": _outputs(model, images),
            "val_accuracy": validated, "statistics": statistics}
    if has_column and "val_loss" in history:  # the notebook's sets are public: the hidden case decides it too
        seen["val_loss"] = history["val_loss"].tolist()
        seen["notebook_outputs"] = {name: _outputs(model, notebook_set(name).tensors[0]) for name in NOTEBOOK_SETS}
    return seen
