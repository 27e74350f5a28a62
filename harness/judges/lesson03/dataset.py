"""03-dataset, the judge.

cls(features, labels, transform=None) behaves as a map-style dataset with a per-item input transform.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from harness.checks.lesson03.dataset import check_transform, dataset_inputs, read_indices
from harness.contract.case import Case
from harness.contract.compare import malformed, same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import describe, type_name


def _label_value(label: Any) -> int | None:
    """The label as an int, as int(label) reads it; None for anything that is not one number."""
    if isinstance(label, torch.Tensor) and label.numel() == 1:
        label = label.item()
    if isinstance(label, bool) or not isinstance(label, (int, float)) or not math.isfinite(label):
        return None
    return int(label)


def _pair(item: Any, index: int, name: str) -> tuple[Any, Any]:
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        fail(
            "wrong-item",
            observed=f"dataset[{index}] is {type_name(item)}"
            + (f" of length {len(item)}" if isinstance(item, (tuple, list)) else ""),
            expected=f"the pair (features[{index}], labels[{index}])",
            cause="__getitem__ returns something other than the (x, y) pair",
            where=f"{name}.__getitem__",
        )
    return item[0], item[1]


@judges(
    "03-dataset",
    hints=Hints(
        nudge="A map-style dataset needs only __len__ and __getitem__; the transform runs inside __getitem__, on "
        "the input only, every time an item is read.",
        concept="The DataLoader asks len(dataset) once, then dataset[i] for every index its sampler yields, every "
        "epoch: whatever __getitem__ does (a random augmentation) happens anew at each read, while __init__ only "
        "validates and stores.",
        solution="__init__: `if len(features) != len(labels): raise ValueError(...)`, store both and the "
        "transform. __len__: `return len(self.features)`. __getitem__: `x = self.features[index]; if "
        "self.transform is not None: x = self.transform(x); return x, self.labels[index]`.",
        section="1. Dataset and DataLoader",
    ),
    requires={
        "wrong-length": Requirement(
            "len(dataset) is the number of rows (samples)",
            hint="len(dataset) counts samples: which size of features has one entry per sample?"),
        "wrong-item": Requirement(
            "dataset[i] is the pair (features[i], labels[i]), unchanged without a transform, so that a DataLoader "
            "batches it into (B, *row shape) and (B,)",
            hint="Print dataset[0] next to (features[0], labels[0]): the same two tensors, indexed (not sliced), "
            "as a plain pair?"),
        "eager-transform": Requirement(
            "the transform runs each time an item is read, never in __init__",
            hint="Count how often your transform runs while the dataset is being built: where must a random "
            "augmentation run for each epoch to get a new one?"),
        "transform-on-label": Requirement(
            "the label is never transformed",
            hint="The transform is for the input only: look at what your __getitem__ passes to self.transform."),
        "transform-not-applied": Requirement(
            "with a transform, dataset[i] returns (transform(features[i]), labels[i]), one call per read",
            hint="Build your dataset with transform=lambda x: x + 100 and read one item: did the +100 show, "
            "exactly once?"),
        "no-length-check": Requirement(
            "features and labels of different lengths raise a ValueError that says so",
            hint="Try ArrayDataset(torch.zeros(10, 2), torch.zeros(9)): the exercise wants a ValueError with a "
            "message, raised by __init__ right away."),
    },
)
def judge_dataset(seen: dict, *, case: Case) -> str:
    """cls(features, labels, transform=None) behaves as a map-style dataset with a per-item input transform."""
    features, labels = dataset_inputs(case)
    n, name = len(features), str(seen["name"])
    if seen["length"] != n:
        fail(
            "wrong-length",
            observed=f"len(dataset) = {seen['length']} for {n} samples",
            expected=str(n),
            cause="__len__ returns something other than the number of samples (rows of features)",
            where=f"{name}.__len__",
        )
    for index, item in zip(read_indices(n), seen["items"], strict=True):
        _judge_item(*_pair(item, index, name), features, labels, index, name)
    if seen["calls_at_construction"] != 0:
        fail(
            "eager-transform",
            observed=f"the transform ran {seen['calls_at_construction']} time"
            f"{'' if seen['calls_at_construction'] == 1 else 's'} while the dataset was being built",
            expected="no call at construction; one call each time an item is read",
            cause="transforming everything in __init__ freezes a random augmentation: every epoch would see "
            "the same augmented copy",
            where=f"{name}.__init__",
        )
    x, y = _pair(seen["augmented_item"], 3, name)
    if _label_value(y) != int(labels[3]):
        fail(
            "transform-on-label",
            observed=f"dataset[3] label is {y}, expected {int(labels[3])}",
            expected="the label untouched by the transform",
            cause="the transform is applied to the label (or to the pair)",
            where=f"{name}.__getitem__",
        )
    calls = seen["calls_after_read"]
    if calls != 1 or not (isinstance(x, torch.Tensor) and same_values(x, check_transform(features[3]), dtype=False)):
        if calls == 1:
            observed = "reading dataset[3] called the transform once, but x is not transform(features[3])"
            cause = "the transform gets another value than features[i], or its result is not what is returned"
        else:
            observed = f"reading dataset[3] called the transform {calls} times"
            cause = "__getitem__ never calls self.transform" if calls == 0 else \
                "__getitem__ calls the transform more than once per item"
        fail("transform-not-applied", observed=observed,
             expected="exactly one call, on the input, and the transformed input returned", cause=cause,
             where=f"{name}.__getitem__")
    batch = seen["batch"]
    shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else type_name(t) for t in batch] if isinstance(
        batch, (tuple, list)) else [type_name(batch)]
    if shapes != [(4, *features.shape[1:]), (4,)]:
        fail(
            "wrong-item",
            observed=f"a DataLoader batch of 4 has shapes {', '.join(map(str, shapes))}",
            expected=f"{(4, *features.shape[1:])} and (4,)",
            cause="__getitem__ returns extra dimensions or a nested structure",
            where=f"{name}.__getitem__",
        )
    inputs, targets = batch
    if inputs.device.type == "meta" or not (inputs.is_floating_point() and same_values(
            inputs.to(features.dtype), features[:4], dtype=False) and targets.tolist() == labels[:4].tolist()):
        fail(
            "wrong-item",
            observed=f"the first DataLoader batch (in order) is not (features[:4], labels[:4]): inputs "
                     f"{describe(inputs)}, labels {targets.tolist()}",
            expected=f"features[:4] and labels {labels[:4].tolist()}",
            cause="__getitem__ returns other values than features[i] and labels[i] (changed, or another index)",
            where=f"{name}.__getitem__",
        )
    _judge_mismatch(seen["mismatch"], n, name)
    return f"len, items, per-item transform on the input, DataLoader batches, length check ({n} samples)"


def _judge_item(x: Any, y: Any, features: torch.Tensor, labels: torch.Tensor, index: int, name: str) -> None:
    """dataset[index] read without a transform must be (features[index], labels[index])."""
    row = features[index]
    problems, causes = [], []
    if not isinstance(x, torch.Tensor):
        problems.append(f"x is a {type_name(x)}")
        causes.append("x is converted instead of returned as the row of features")
    elif not same_values(x, row, dtype=False):
        if tuple(x.shape) != tuple(row.shape):
            problems.append(f"x has shape {tuple(x.shape)}, features[{index}] has {tuple(row.shape)}")
            causes.append("a slice (features[i:i + 1]) or a reshape instead of the row features[i]"
                          if x.numel() == row.numel() else "x is not the row features[i]")
        else:
            problems.append(f"x differs from features[{index}]")
            causes.append("x comes from another row or is altered")
    if _label_value(y) != int(labels[index]):
        shown = repr(y) if isinstance(y, (int, float)) or (isinstance(y, torch.Tensor) and y.numel() <= 4) \
            else f"a {type_name(y)}"
        problems.append(f"y is {shown}, labels[{index}] is {int(labels[index])}")
        causes.append("y comes from another index or another tensor")
    if problems:
        fail(
            "wrong-item",
            observed=f"dataset[{index}]: " + "; ".join(problems),
            expected=f"the pair (features[{index}], labels[{index}]) unchanged when transform is None",
            cause="; ".join(causes),
            where=f"{name}.__getitem__",
        )


def _judge_mismatch(mismatch: Any, n: int, name: str) -> None:
    """Building the dataset from n rows of features and n - 1 labels must raise a ValueError with a message."""
    if mismatch is not None and not (isinstance(mismatch, dict) and isinstance(mismatch.get("type"), str)
                                     and isinstance(mismatch.get("message"), str)):
        malformed("the mismatch record is None or {type, value_error, message}")
    attempt = f"{name}(features with {n} rows, labels with {n - 1})"
    if mismatch is None:
        observed, cause = f"{attempt} was accepted", "no length check in __init__: the mismatch would surface " \
            "later, as an IndexError deep inside a DataLoader"
    elif mismatch.get("value_error") is not True:
        observed = f"{attempt} raised {mismatch['type']}: {mismatch['message']}"
        cause = ("an `assert` where the exercise asks for a ValueError (asserts are also skipped under python -O)"
                 if mismatch["type"] == "AssertionError" else
                 f"the check raises {mismatch['type']} instead of ValueError, or other code of __init__ fails "
                 "before any check")
    elif not mismatch["message"].strip():
        observed, cause = f"{attempt} raised a ValueError without a message", "`raise ValueError` with no text"
    else:
        return
    fail("no-length-check", observed=observed, expected="a ValueError whose message says the two lengths differ",
         cause=cause, where=f"{name}.__init__")
