"""Checks of lesson 03, data loading: a map-style Dataset, a padding collate function, a seeded loader,
a worker_init_fn that stops workers from drawing the same "random" augmentations, and a leakage-free
split with normalisation from training statistics.

The probes drive the student's objects through real DataLoaders (a real 2-worker loader for the worker
seeding) and record what comes out: items, batches, epoch orders, noise draws, the returned splits. The
judges rebuild the inputs from the case and decide from those records what must have come out.
"""

from __future__ import annotations

import math
import multiprocessing
from typing import Any, Callable, NoReturn

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges, register
from harness.contract.wire import WireError, type_name
from harness.repro import make_generator


def _tensor(value: Any, what: str, where: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        fail(
            "not-a-tensor",
            observed=f"{what} is a {type_name(value)}",
            expected=f"{what} is a torch.Tensor",
            cause=f"{what} is built outside torch (a Python list, a NumPy array or a number) and not converted "
            "to a tensor",
            where=where,
        )
    return value


def _malformed(what: str) -> NoReturn:
    """Refuse an observation no probe of this module writes."""
    raise WireError(f"malformed observation: {what}")


def _in_order(dataset: Any, **options: Any) -> DataLoader:
    """A DataLoader without shuffling that leaves the global RNG alone (each iterator draws a base seed: from
    the loader's own generator when it has one)."""
    return DataLoader(dataset, batch_size=4, generator=torch.Generator().manual_seed(0), **options)


# ----------------------------------------------------------------------------------------------------
# 03-dataset


class _CountingTransform:
    """A transform that records how often it runs: per item, never at construction."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return _transformed(x)


def _transformed(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _dataset_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """(features, labels): 10 rows of (2, 4) visibly, 23 rows of (3, 5) hidden (rows of more than one
    dimension, like images, in both)."""
    generator = torch.Generator().manual_seed(case.seeded(5 if case.hidden else 1))
    shape = (23, 3, 5) if case.hidden else (10, 2, 4)
    features = torch.randn(*shape, generator=generator)
    return features, torch.randint(0, 3, (shape[0],), generator=generator)


def _read_indices(n: int) -> tuple[int, ...]:
    return (0, n - 1, n // 2)


def _label_value(label: Any) -> int | None:
    """The label as an int, as int(label) reads it; None for anything that is not one number."""
    if isinstance(label, torch.Tensor) and label.numel() == 1:
        label = label.item()
    if isinstance(label, bool) or not isinstance(label, (int, float)) or not math.isfinite(label):
        return None
    return int(label)


@register(
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
def probe_dataset(cls: type, *, case: Case) -> dict:
    """Build datasets with and without a counting transform; record lengths, items, transform calls, a
    DataLoader batch, and what building one with mismatched lengths raised."""
    features, labels = _dataset_inputs(case)
    plain = cls(features, labels)
    transform = _CountingTransform()
    augmented = cls(features, labels, transform=transform)
    calls_at_construction = transform.calls
    augmented_item = augmented[3]
    try:
        cls(features, labels[:-1])
    except Exception as error:  # noqa: BLE001 - which exception, if any, is what the judge decides on
        mismatch = {"type": type(error).__name__, "value_error": isinstance(error, ValueError),
                    "message": str(error)[:200]}
    else:
        mismatch = None
    return {
        "name": cls.__name__,
        "length": len(plain),
        "items": [plain[index] for index in _read_indices(len(features))],
        "calls_at_construction": calls_at_construction,
        "augmented_item": augmented_item,
        "calls_after_read": transform.calls,
        "batch": next(iter(_in_order(plain))),
        "mismatch": mismatch,
    }


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


@judges("03-dataset")
def judge_dataset(seen: dict, *, case: Case) -> str:
    """cls(features, labels, transform=None) behaves as a map-style dataset with a per-item input transform."""
    features, labels = _dataset_inputs(case)
    n, name = len(features), str(seen["name"])
    if seen["length"] != n:
        fail(
            "wrong-length",
            observed=f"len(dataset) = {seen['length']} for {n} samples",
            expected=str(n),
            cause="__len__ returns something other than the number of samples (rows of features)",
            where=f"{name}.__len__",
        )
    for index, item in zip(_read_indices(n), seen["items"], strict=True):
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
    if calls != 1 or not (isinstance(x, torch.Tensor) and torch.equal(x, _transformed(features[3]))):
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
    _judge_mismatch(seen["mismatch"], n, name)
    return f"len, items, per-item transform on the input, DataLoader batches, length check ({n} samples)"


def _judge_item(x: Any, y: Any, features: torch.Tensor, labels: torch.Tensor, index: int, name: str) -> None:
    """dataset[index] read without a transform must be (features[index], labels[index])."""
    row = features[index]
    problems, causes = [], []
    if not isinstance(x, torch.Tensor):
        problems.append(f"x is a {type_name(x)}")
        causes.append("x is converted instead of returned as the row of features")
    elif not torch.equal(x, row):
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
        _malformed("the mismatch record is None or {type, value_error, message}")
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


# ----------------------------------------------------------------------------------------------------
# 03-pad-collate

Batch = list[tuple[torch.Tensor, torch.Tensor]]


def _random_batch(rng: np.random.Generator, size: int, max_len: int, features: int) -> Batch:
    lengths = rng.integers(1, max_len + 1, size=size)
    return [
        (torch.from_numpy(rng.standard_normal((int(n), features)).astype(np.float32)),
         torch.tensor(int(rng.integers(0, 5))))
        for n in lengths
    ]


def _collate_batches(case: Case) -> list[Batch]:
    """Property-based: many random batches (sizes, lengths and feature counts drawn from a seeded generator)
    plus the edge cases a hand-picked example misses: one item, all lengths equal, length-1 sequences."""
    rng = np.random.default_rng(case.seeded(1 if case.hidden else 0))
    examples = 60 if case.hidden else 20
    features_max = 4 if case.hidden else 2
    # First a batch whose dimensions all differ, so a wrong layout shows as a wrong shape.
    batches = [[(torch.ones(3, 2), torch.tensor(0)), (torch.full((5, 2), 2.0), torch.tensor(1))]]
    batches += [
        _random_batch(rng, int(rng.integers(1, 9)), int(rng.integers(1, 13)), int(rng.integers(1, features_max + 1)))
        for _ in range(examples)
    ]
    batches += [_random_batch(rng, 1, 5, 2), _random_batch(rng, 4, 1, 3)]
    same_length = torch.from_numpy(rng.standard_normal((3, 6, 2)).astype(np.float32))
    batches.append([(same_length[i], torch.tensor(i)) for i in range(3)])
    return batches


def _loader_dataset(case: Case) -> Batch:
    """Ten sequences for a DataLoader with batch_size=4 (batches of 4, 4 and 2, in order)."""
    return _random_batch(np.random.default_rng(case.seeded(3)), 10, 9, 3)


@register(
    "03-pad-collate",
    hints=Hints(
        nudge="The default collate stacks tensors, which needs equal shapes. Pad every sequence with zeros up to "
        "the batch's longest one, and keep the true lengths so the model can ignore the padding.",
        concept="A collate_fn receives the list of items the batch sampler picked, in order, and returns one batch. "
        "Row i of every output must describe item i: pad each sequence to the batch's longest (not a fixed "
        "length), batch first, with zeros, and record the lengths before padding.",
        solution="`sequences, labels = zip(*batch)`; `lengths = torch.tensor([len(s) for s in sequences])`; "
        "`padded = torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True)`; "
        "`return padded, lengths, torch.stack(labels)`. Keep the batch order.",
        section="2. Batching sequences of different lengths",
    ),
    requires={
        "wrong-return": Requirement(
            "returns the tuple (padded, lengths, labels)",
            hint="The check unpacks `padded, lengths, labels = pad_collate(batch)`: does your return statement "
            "give exactly those three?"),
        "not-a-tensor": Requirement(
            "padded, lengths and labels are tensors",
            hint="A DataLoader batch holds tensors: which of your three outputs is still a list (or an array)?"),
        "wrong-shape": Requirement(
            "padded is (batch, longest length in this batch, features), batch first",
            hint="Print padded.shape for a batch of 2 sequences of lengths 3 and 5: is it (2, 5, features)? "
            "pad_sequence is time-first unless told otherwise."),
        "order-changed": Requirement(
            "row i holds sequence i: the batch order is kept",
            hint="Sorting the sequences (as pack_padded_sequence once required) moves rows away from their "
            "labels: keep the batch order."),
        "wrong-values": Requirement(
            "the sequences' values are copied unchanged",
            hint="Compare padded[i, :len(sequence_i)] with sequence i: padding must not rescale or alter them."),
        "nonzero-padding": Requirement(
            "zeros after each sequence's end",
            hint="Look at padded[i, length_i:] for a short sequence: what value did you pad with?"),
        "wrong-lengths": Requirement(
            "lengths is an int64 tensor of the true lengths, in batch order",
            hint="Take each length from the sequence itself, before padding, and keep the default integer dtype."),
        "wrong-labels": Requirement(
            "labels are the items' labels stacked in batch order",
            hint="Print your labels next to [label for _, label in batch]: same values, same order?"),
    },
)
def probe_pad_collate(pad_collate: Callable, *, case: Case) -> dict:
    """Record pad_collate's output on each batch of the case, and what a DataLoader using it yields."""
    loader = _in_order(_loader_dataset(case), collate_fn=pad_collate)
    return {"outputs": [pad_collate(batch) for batch in _collate_batches(case)], "loader": list(loader)}


def _judge_collate_output(out: Any, batch: Batch) -> None:
    where = "your pad_collate"
    lengths = [len(seq) for seq, _ in batch]
    features = batch[0][0].shape[1]
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        fail(
            "wrong-return",
            observed=f"pad_collate returned {type_name(out)}",
            expected="a tuple (padded, lengths, labels)",
            cause="the return statement has another shape",
            where=where,
        )
    padded, got_lengths, labels = (_tensor(v, name, where)
                                   for v, name in zip(out, ("padded", "lengths", "labels"), strict=True))
    expected_shape = (len(batch), max(lengths), features)
    if tuple(padded.shape) != expected_shape:
        shape = tuple(padded.shape)
        if shape == (max(lengths), len(batch), features) and len(batch) != max(lengths):
            cause = "a time-first layout (pad_sequence's default, batch_first=False)"
        elif len(shape) == 3 and (shape[0], shape[2]) == (len(batch), features) and shape[1] > max(lengths):
            cause = "padding to a fixed length instead of the batch's longest sequence"
        else:
            cause = "the sequences are stacked along another dimension, or reshaped"
        fail(
            "wrong-shape",
            observed=f"padded has shape {shape} for lengths {lengths}",
            expected=f"{expected_shape} = (batch, longest sequence, features), batch first",
            cause=cause,
            where=where,
        )
    expected_labels = torch.stack([label for _, label in batch])
    for i, (seq, _) in enumerate(batch):
        if not torch.equal(padded[i, : len(seq)], seq):
            # Reordered: another row holds sequence i exactly, zeros after it.
            sorted_match = any(torch.equal(padded[j, : len(seq)], seq) and not padded[j, len(seq):].any()
                               for j in range(len(batch)) if j != i)
            fail(
                "order-changed" if sorted_match else "wrong-values",
                observed=f"row {i} of padded does not start with sequence {i} of the batch",
                expected="row i holds sequence i unchanged, then padding",
                cause="the batch was reordered (e.g. sorted by length) without the labels"
                if sorted_match
                else "the sequence values are altered while padding",
                where=where,
            )
        if padded[i, len(seq):].abs().sum() != 0:
            fail(
                "nonzero-padding",
                observed=f"row {i} (length {len(seq)}) has non-zero values after its end",
                expected="zeros after each sequence's end",
                cause="padding with a value other than 0, or copying past the end of the sequence",
                where=where,
            )
    if got_lengths.dtype != torch.int64 or got_lengths.tolist() != lengths:
        got = got_lengths.tolist()
        if got == lengths:
            cause = f"the right lengths in another dtype ({got_lengths.dtype}): pack_padded_sequence wants int64"
        elif got == sorted(lengths, reverse=True) or got == sorted(lengths):
            cause = "the lengths are sorted, so they no longer follow the batch order"
        elif got == [max(lengths)] * len(lengths):
            cause = "the lengths are taken from the padded tensor (every one is the longest)"
        else:
            cause = "the lengths are not the sequences' own lengths, in batch order"
        fail(
            "wrong-lengths",
            observed=f"lengths = {got} ({got_lengths.dtype})",
            expected=f"{lengths} (int64), each sequence's true length in batch order",
            cause=cause,
            where=where,
        )
    if labels.shape != expected_labels.shape or not torch.equal(labels, expected_labels):
        fail(
            "wrong-labels",
            observed=f"labels = {labels.tolist()}",
            expected=f"{expected_labels.tolist()}, stacked in batch order",
            cause="the labels are not stacked into one tensor of shape (batch,)"
            if labels.shape != expected_labels.shape else "the labels are reordered or altered",
            where=where,
        )


@judges("03-pad-collate")
def judge_pad_collate(seen: dict, *, case: Case) -> str:
    """pad_collate(list of ((L_i, F) tensor, label)) -> (padded (B, max L, F), lengths int64, labels), on random
    batches."""
    batches = _collate_batches(case)
    for batch, out in zip(batches, seen["outputs"], strict=True):
        _judge_collate_output(out, batch)
    # Through a real DataLoader too: the collate must work where it is used.
    dataset = _loader_dataset(case)
    for start, out in zip(range(0, len(dataset), 4), seen["loader"], strict=True):
        _judge_collate_output(out, dataset[start: start + 4])
    return f"{len(batches)} random and edge-case batches and a DataLoader: shape, values, zero padding, lengths, labels"


# ----------------------------------------------------------------------------------------------------
# 03-seeded-loader


def _loader_setting(case: Case) -> tuple[int, int, int]:
    """(dataset size, batch size, seed): a last, partial batch in both, so drop_last shows."""
    n, batch_size, seed = (53, 8, 2024) if case.hidden else (42, 10, 0)
    return n, batch_size, case.seeded(seed)


def _epoch_batches(loader: DataLoader) -> list[list[int]]:
    """The item indices of each batch of one epoch."""
    return [[int(i) for i in (batch[0] if isinstance(batch, (tuple, list)) else batch)] for batch in loader]


@register(
    "03-seeded-loader",
    hints=Hints(
        nudge="Give the DataLoader its own torch.Generator seeded with `seed`: the shuffling then depends on that "
        "seed only, and the generator moves on between epochs.",
        concept="shuffle=True draws each epoch's permutation from a generator: the loader's own if you pass "
        "generator=, else the global torch RNG, which everything else (model initialisation, dropout) draws from "
        "too. Seeding the global RNG only holds until the next draw.",
        solution="`return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=make_generator(seed))` "
        "(harness.repro.make_generator). Do not build a fixed permutation once: it would repeat every epoch.",
        section="3. Seeded shuffling",
    ),
    requires={
        "drops-samples": Requirement(
            "every item appears exactly once per epoch (the last, partial batch included)",
            hint="Count the items of one epoch with a dataset of 42 and batches of 10: all 42, each once?"),
        "wrong-batch-size": Requirement(
            "batches have `batch_size` items",
            hint="Print len(next(iter(loader))[0]): is it the batch_size you were given?"),
        "not-shuffled": Requirement(
            "the loader shuffles",
            hint="Print the first batch's indices: 0, 1, 2, ...? Something has to ask the loader to shuffle."),
        "not-reproducible": Requirement(
            "the same seed gives the same sequence of epochs whatever the global RNG did",
            hint="Build two loaders with the same seed after torch.manual_seed(1) and torch.manual_seed(2): "
            "which generator does your shuffling draw from?"),
        "seeds-global-rng": Requirement(
            "the order comes from the loader's own generator, not from re-seeding the global RNG (the lesson's "
            "pitfall)",
            hint="torch.manual_seed(seed) holds only until the next random draw: build your loader, call "
            "torch.randn(3) as a model's initialisation would, then look at the first epoch."),
        "same-order-every-epoch": Requirement(
            "each epoch has a new order",
            hint="Compare two epochs of the same loader: a permutation drawn once, or a generator re-seeded each "
            "epoch, repeats the order."),
        "seed-ignored": Requirement(
            "different seeds give different orders",
            hint="Build loaders with seeds 0 and 1: where does `seed` reach the shuffling?"),
    },
)
def probe_seeded_loader(make_loader: Callable, *, case: Case) -> dict:
    """Record the batches of two epochs of two loaders built with the same seed (the global RNG reseeded
    differently before each, and drawn from between the second one's epochs, as a model's initialisation and
    dropout would) and of one epoch with the next seed; and the global RNG's seed after each build."""
    n, batch_size, seed = _loader_setting(case)
    dataset = TensorDataset(torch.arange(n))
    # Inside fork_rng, so the student's own global RNG state is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(1))
        first = make_loader(dataset, batch_size, seed)
        global_seeds = [torch.initial_seed()]
        first_epochs = [_epoch_batches(first), _epoch_batches(first)]
        torch.manual_seed(case.seeded(2))
        second = make_loader(dataset, batch_size, seed)
        global_seeds.append(torch.initial_seed())
        torch.randn(16)  # a model's initialisation after the loader was built
        second_epochs = [_epoch_batches(second)]
        torch.rand(8)  # dropout during the first epoch
        second_epochs.append(_epoch_batches(second))
        other = _epoch_batches(make_loader(dataset, batch_size, seed + 1))
    return {"first": first_epochs, "second": second_epochs, "other": other, "global_seeds": global_seeds}


def _epoch(batches: Any) -> list[list[int]]:
    """A recorded epoch, validated: a list of batches of ints."""
    if not (isinstance(batches, list) and all(
            isinstance(b, list) and all(type(i) is int for i in b) for b in batches)):
        _malformed("an epoch is a list of batches of item indices")
    return batches


@judges("03-seeded-loader")
def judge_seeded_loader(seen: dict, *, case: Case) -> str:
    """make_loader(dataset, batch_size, seed): shuffled, same seed -> same epochs, epochs differ, other seed differs."""
    n, batch_size, seed = _loader_setting(case)
    where = "your make_loader"
    first_batches, second_batches = ([_epoch(e) for e in seen[key]] for key in ("first", "second"))
    if len(first_batches) != 2 or len(second_batches) != 2:
        _malformed("two epochs per loader")
    first_epochs = [[i for batch in epoch for i in batch] for epoch in first_batches]
    second_epochs = [[i for batch in epoch for i in batch] for epoch in second_batches]
    other = [i for batch in _epoch(seen["other"]) for i in batch]
    global_seeds = seen["global_seeds"]
    if not (isinstance(global_seeds, list) and len(global_seeds) == 2 and all(type(s) is int for s in global_seeds)):
        _malformed("the global RNG's seed after each of the two builds")

    for epoch in (*first_epochs, *second_epochs, other):
        if sorted(epoch) != list(range(n)):
            fail(
                "drops-samples",
                observed=f"one epoch yielded {len(epoch)} items, {len(set(epoch))} distinct, of {n}",
                expected=f"each of the {n} items exactly once per epoch",
                cause="drop_last=True (the last, partial batch is lost), sampling with replacement, or a sampler "
            "that does not cover the dataset",
                where=where,
            )
    if len(first_batches[0][0]) != batch_size:
        fail(
            "wrong-batch-size",
            observed=f"the first batch has {len(first_batches[0][0])} item"
            f"{'' if len(first_batches[0][0]) == 1 else 's'}",
            expected=f"batch_size={batch_size}",
            cause="batch_size not passed to the DataLoader (its default is 1), or another value passed",
            where=where,
        )
    if first_epochs[0] == list(range(n)):
        fail(
            "not-shuffled",
            observed="the first epoch yields the items in dataset order 0, 1, 2, ...",
            expected="a shuffled order",
            cause="no shuffle=True and no RandomSampler: the default sampler reads in order",
            where=where,
        )
    if first_epochs != second_epochs:
        _judge_global_rng(global_seeds, seed, where)
    if first_epochs[0] == first_epochs[1]:
        fail(
            "same-order-every-epoch",
            observed="epoch 2 repeats the order of epoch 1",
            expected="a new order each epoch (still determined by the seed)",
            cause="a fixed permutation built once (e.g. sampler=randperm(...).tolist()), or a generator re-seeded "
            "at every epoch",
            where=where,
        )
    if other == first_epochs[0]:
        fail(
            "seed-ignored",
            observed=f"seeds {seed} and {seed + 1} give the same order",
            expected="different seeds give different orders",
            cause="the generator is seeded with a constant (or left at its default seed) instead of `seed`",
            where=where,
        )
    return f"{n} items in batches of {batch_size}: shuffled, reproducible from the seed alone, new order each epoch"


def _judge_global_rng(global_seeds: list[int], seed: int, where: str) -> NoReturn:
    """Two loaders built with the same seed differed: say whether make_loader had re-seeded the global RNG."""
    if seed in global_seeds:
        fail(
            "seeds-global-rng",
            observed=f"your make_loader re-seeded the global torch RNG with seed={seed} (torch.initial_seed() was "
            f"{seed} after it returned); the two loaders still gave different orders once something else (a "
            "model's initialisation, dropout) drew from the global RNG before or between their epochs",
            expected="the same seed gives the same sequence of epochs, whatever the global RNG did",
            cause="torch.manual_seed(seed) (or seed_everything(seed)) in make_loader with a shuffle that draws from "
            "the global RNG: the order holds only until the next random draw, the pitfall of section 3",
            where=where,
        )
    fail(
        "not-reproducible",
        observed="two loaders built with the same seed give different orders (the global torch RNG was seeded "
        "differently before each, and drawn from between the second one's epochs)",
        expected="the same seed gives the same sequence of epochs, whatever the global RNG did",
        cause="the shuffling draws from the global torch RNG: shuffle=True without generator=, or a sampler "
        "built without its own generator; or its generator is seeded from something other than `seed`",
        where=where,
    )


# ----------------------------------------------------------------------------------------------------
# 03-worker-init


class NoisyDataset(Dataset):
    """Items `(index, noise)`, the noise drawn from a NumPy Generator created once, in the main process.

    This is the modern NumPy style (`np.random.default_rng`), and exactly the one PyTorch's automatic
    worker seeding does not reach: every forked worker starts with a copy of the same generator state.
    """

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n = n
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[int, float]:
        return index, float(self.rng.standard_normal())


def _start_method() -> str:
    # fork lets a worker_init_fn defined in a notebook reach the workers without pickling it by name.
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def _worker_setting(case: Case) -> tuple[int, int, int]:
    """(workers, dataset size, loader seed). Two workers: more than the cores of a small machine makes
    DataLoader warn (and a warning fails a graded cell)."""
    workers, n, seed = (2, 36, 7) if case.hidden else (2, 16, 0)
    return workers, n, case.seeded(seed)


def _noise_by_index(worker_init_fn: Callable, *, case: Case, epochs: int) -> list[list[float]]:
    """Each epoch's noise values, ordered by item index."""
    workers, n, seed = _worker_setting(case)
    loader = DataLoader(
        NoisyDataset(n, seed=case.seeded(0)), batch_size=4, shuffle=True, num_workers=workers,
        worker_init_fn=worker_init_fn, generator=make_generator(seed), multiprocessing_context=_start_method(),
    )
    runs = []
    for _ in range(epochs):
        noise: dict[int, float] = {}
        for indices, values in loader:
            noise.update(zip(indices.tolist(), values.tolist(), strict=True))
        runs.append([noise[i] for i in range(n)])
    return runs


@register(
    "03-worker-init",
    hints=Hints(
        nudge="Inside a worker, torch.utils.data.get_worker_info() gives this worker's copy of the dataset and a "
        "seed that differs per worker and per epoch and follows the loader's generator. Replace the dataset's rng "
        "with a generator built from that seed.",
        concept="A forked worker starts as a copy of the main process, dataset and its generator included. PyTorch "
        "re-seeds torch, random and the global np.random in each worker, never a generator your dataset owns: "
        "that one must be replaced in the worker, from a seed that differs per worker and per epoch and still "
        "follows the loader's generator.",
        solution="`info = torch.utils.data.get_worker_info(); info.dataset.rng = np.random.default_rng(info.seed)`. "
        "Do not seed from worker_id alone (same every epoch) or from time/PID (not reproducible).",
        section="4. Workers and random augmentation",
    ),
    requires={
        "duplicate-across-workers": Requirement(
            "each worker's dataset copy draws its own numbers (its `rng` attribute is replaced in the worker)",
            hint="The dataset draws from self.rng, which the workers copied from the main process: does your "
            "function give this worker's dataset copy a new generator in that very attribute?"),
        "same-every-epoch": Requirement(
            "the draws change from epoch to epoch",
            hint="Without persistent_workers, new workers start every epoch: is the number you seed with the same "
            "every time a worker with this id starts?"),
        "not-reproducible": Requirement(
            "the same loader seed reproduces the same draws",
            hint="Run the loader twice with the same generator seed: your seed must come from the loader (the "
            "worker's seed), not from the clock, the process id or OS entropy."),
    },
)
def probe_worker_init(worker_init_fn: Callable, *, case: Case) -> dict:
    """Run real 2-worker loaders: record the noise drawn for each item in two epochs, then again in a new loader."""
    return {"epochs": _noise_by_index(worker_init_fn, case=case, epochs=2),
            "again": _noise_by_index(worker_init_fn, case=case, epochs=1)[0]}


def _draws(values: Any, n: int) -> list[float]:
    """One recorded epoch, validated: a float per item."""
    if not (isinstance(values, list) and len(values) == n and all(type(v) is float for v in values)):
        _malformed(f"an epoch is {n} noise values")
    return values


@judges("03-worker-init")
def judge_worker_init(seen: dict, *, case: Case) -> str:
    """worker_init_fn reseeds the dataset's own generator: distinct across workers and epochs, reproducible."""
    workers, n, _ = _worker_setting(case)
    if not (isinstance(seen["epochs"], list) and len(seen["epochs"]) == 2):
        _malformed("two epochs")
    epochs = [_draws(values, n) for values in seen["epochs"]]
    again = _draws(seen["again"], n)
    where = "your worker_init_fn"
    values = epochs[0]
    if len(set(values)) < len(values):
        fail(
            "duplicate-across-workers",
            observed=f"{len(values) - len(set(values))} of {len(values)} noise values in one epoch are repeats: "
            f"the {workers} workers draw the same sequence",
            expected="a different random draw for every item",
            cause="each forked worker starts from a copy of the dataset's rng, and PyTorch re-seeds torch, random "
            "and np.random only: the function does not replace this worker's dataset.rng, or replaces it from a "
            "seed that is the same in every worker",
            where=where,
        )
    if sorted(epochs[0]) == sorted(epochs[1]):
        fail(
            "same-every-epoch",
            observed="epoch 2 draws exactly the same noise values as epoch 1 (in another item order)",
            expected="new augmentations every epoch",
            cause="the generator is seeded from worker_id alone (or a constant): workers restart each epoch "
            "with the same seed. Use get_worker_info().seed, which changes every epoch",
            where=where,
        )
    if again != epochs[0]:
        fail(
            "not-reproducible",
            observed="two loaders with the same generator seed give different noise",
            expected="the same loader seed reproduces the same augmentations",
            cause="seeding from time, the process id or fresh OS entropy instead of get_worker_info().seed",
            where=where,
        )
    return (f"{workers} real workers, 2 epochs: no duplicates across workers or epochs, reproducible from the "
            "loader seed")


# ----------------------------------------------------------------------------------------------------
# 03-split-normalize


def _split_problem(case: Case) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    """(x, ids, val_fraction, seed): inputs with offsets and scales per feature, the last one constant (std 0),
    labels a permutation of row ids, rows sorted by the first feature."""
    n, features, fraction, seed = (157, 5, 0.25, 11) if case.hidden else (100, 4, 0.2, 0)
    seed = case.seeded(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, features, generator=generator) * torch.linspace(0.5, 3.0, features) + torch.arange(features)
    # Rows sorted by the first feature, as files often come sorted: an unshuffled split is then biased.
    x = x[x[:, 0].argsort()]
    x[:, -1] = 4.0
    ids = torch.randperm(n, generator=generator)
    return x, ids, fraction, seed


def _split_record(result: Any) -> dict:
    """What split_and_normalize returned, as data: each split's tensors (and its type), mean and std."""
    if not (isinstance(result, (tuple, list)) and len(result) == 4):
        return {"result": result}
    train_set, val_set, mean, std = result
    return {"splits": [list(s.tensors) if isinstance(s, TensorDataset) else None for s in (train_set, val_set)],
            "split_types": [type(s).__name__ for s in (train_set, val_set)], "mean": mean, "std": std}


@register(
    "03-split-normalize", unjudged=('again/*',), nonfinite=('*/splits/*',),
    hints=Hints(
        nudge="Shuffle the row indices with a generator seeded by `seed`, cut them into validation and training, "
        "and compute mean and std on the training rows only; normalise both splits with those two numbers per "
        "feature.",
        concept="Split first (one seeded permutation, cut in two), then compute statistics on the training rows "
        "alone and apply those same statistics to every split: anything computed from validation rows and fed "
        "into training leaks.",
        solution="`perm = torch.randperm(n, generator=make_generator(seed)); n_val = round(n * val_fraction)`; "
        "`val, train = perm[:n_val], perm[n_val:]`; `mean = x[train].mean(0); std = x[train].std(0).clamp_min(1e-8)`;"
        " return TensorDatasets of `(x[idx] - mean) / std` and `y[idx]`, then mean and std.",
        section="6. Splits without leakage, normalisation from training statistics",
    ),
    requires={
        "wrong-return": Requirement(
            "returns (train_set, val_set, mean, std), each set a TensorDataset(inputs, labels)",
            hint="The check unpacks `train_set, val_set, mean, std`, and reads each set's .tensors: what does your "
            "return statement give?"),
        "not-a-tensor": Requirement(
            "mean and std are tensors",
            hint="mean and std are used on tensors later: are yours NumPy arrays or Python numbers?"),
        "overlap": Requirement(
            "no row is in both splits",
            hint="Draw ONE permutation and cut it in two: two independent draws share rows."),
        "rows-lost": Requirement(
            "every row is in exactly one split",
            hint="Add the sizes of your two splits: do they give N? Look at the indices around the cut."),
        "wrong-size": Requirement(
            "the validation split has round(N * val_fraction) rows",
            hint="Which split should val_fraction size: the first round(N * val_fraction) shuffled rows go where?"),
        "labels-misaligned": Requirement(
            "each split's labels are y[rows], unchanged, next to x[rows] of the same rows",
            hint="Index x and y with the same row indices, and leave y's values and dtype alone."),
        "not-shuffled": Requirement(
            "the row indices are shuffled before the cut",
            hint="The rows of x come sorted (files often do): slicing them in order gives a biased validation set."),
        "nonfinite": Requirement(
            "a constant feature (std 0) still gives finite values",
            hint="One feature of the check's data is constant: what is its std, and what happens when you divide "
            "by it?"),
        "not-normalized": Requirement(
            "both splits hold (x[rows] - mean) / std with the returned mean and std",
            hint="Un-normalise your training inputs with the mean and std you return: do you get the rows of x "
            "back?"),
        "stats-from-all-data": Requirement(
            "mean and std come from the training rows only",
            hint="Which rows did you compute mean and std on? The validation rows must not contribute."),
        "wrong-stats": Requirement(
            "mean and std are the per-feature (shape (F,)) mean and std of the training rows",
            hint="Print mean.shape and std.shape: one number per feature means reducing over the rows (dim 0)."),
        "val-own-stats": Requirement(
            "the validation split uses the training mean and std",
            hint="Normalise the validation rows with the statistics you return, not with statistics of their own."),
        "not-reproducible": Requirement(
            "the same seed gives the same split",
            hint="Call your function twice with the same seed: where does the permutation get its randomness?"),
    },
)
def probe_split_normalize(split_and_normalize: Callable, *, case: Case) -> dict:
    """Call split_and_normalize twice with the same seed; record both results as data."""
    x, ids, fraction, seed = _split_problem(case)
    first = _split_record(split_and_normalize(x.clone(), ids.clone(), val_fraction=fraction, seed=seed))
    again = _split_record(split_and_normalize(x.clone(), ids.clone(), val_fraction=fraction, seed=seed))
    return {"first": first, "again": again}


def _unpack_split(record: dict, where: str) -> tuple[torch.Tensor, ...]:
    """(x_train, id_train, x_val, id_val, mean, std) from a recorded result, or the failure that says why not."""
    if "splits" not in record:
        fail(
            "wrong-return",
            observed=f"split_and_normalize returned {type_name(record['result'])}",
            expected="a tuple (train_set, val_set, mean, std)",
            cause="the return statement has another shape",
            where=where,
        )
    rows = []
    for tensors, split_type in zip(record["splits"], record["split_types"], strict=True):
        if tensors is None or len(tensors) != 2:
            fail(
                "wrong-return",
                observed=f"a split is a {split_type}" + ("" if tensors is None else f" of {len(tensors)} tensors"),
                expected="a TensorDataset(x, y) of normalised inputs and labels",
                cause="the split is returned as indices or a Subset",
                where=where,
            )
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            _malformed("a TensorDataset holds tensors")
        rows += tensors
    return (*rows, _tensor(record["mean"], "mean", where), _tensor(record["std"], "std", where))


@judges("03-split-normalize")
def judge_split_normalize(seen: dict, *, case: Case) -> str:
    """split_and_normalize(x, y, val_fraction=, seed=): disjoint shuffled split, stats from training rows only."""
    x, ids, fraction, _ = _split_problem(case)
    n, features = x.shape
    where = "your split_and_normalize"
    x_train, id_train, x_val, id_val, mean, std = _unpack_split(seen["first"], where)

    train_ids, val_ids = set(id_train.tolist()), set(id_val.tolist())
    if train_ids & val_ids:
        fail(
            "overlap",
            observed=f"{len(train_ids & val_ids)} rows are in both the training and the validation split",
            expected="disjoint splits",
            cause="the two index sets are drawn independently, or overlap at the cut",
            where=where,
        )
    if len(train_ids | val_ids) != n or len(id_train) + len(id_val) != n:
        fail(
            "rows-lost",
            observed=f"{len(id_train)} + {len(id_val)} rows returned, {len(train_ids | val_ids)} distinct, of {n}",
            expected=f"every one of the {n} rows in exactly one split",
            cause="an off-by-one at the cut, or sampling with replacement",
            where=where,
        )
    if abs(len(id_val) - n * fraction) > 1:
        fail(
            "wrong-size",
            observed=f"{len(id_val)} validation rows",
            expected=f"about {n * fraction:.0f} (val_fraction={fraction} of {n})",
            cause="val_fraction applied to the wrong split",
            where=where,
        )
    if id_train.dtype != ids.dtype or id_val.dtype != ids.dtype:
        fail(
            "labels-misaligned",
            observed=f"the labels of the splits are {id_train.dtype} and {id_val.dtype}; y is {ids.dtype}",
            expected="y[rows] unchanged next to x[rows], in y's dtype",
            cause="the labels are converted (e.g. .float()) instead of only indexed",
            where=where,
        )
    if train_ids | val_ids != set(range(n)):
        fail(
            "labels-misaligned",
            observed=f"{len((train_ids | val_ids) - set(range(n)))} labels of the splits are not values of y",
            expected="y[rows] unchanged next to x[rows]: every label of y, in exactly one split",
            cause="the labels are altered (shifted, rescaled, re-encoded) instead of only indexed",
            where=where,
        )
    position = torch.empty(n, dtype=torch.long)
    position[ids] = torch.arange(n)  # row index of each id in x
    val_positions = sorted(position[id_val].tolist())
    if val_positions in (list(range(len(val_positions))), list(range(n - len(val_positions), n))):
        fail(
            "not-shuffled",
            observed="the validation split is the first or last rows of x, in order",
            expected="a random split drawn with the seed",
            cause="slicing without shuffling: files are often sorted (here by the first feature), so the "
            "validation set would come from another distribution",
            where=where,
        )
    if not (torch.isfinite(x_train).all() and torch.isfinite(x_val).all() and torch.isfinite(std).all()
            and torch.isfinite(mean).all()):
        _judge_nonfinite(x, x_train, x_val, mean, std, where)
    raw_train = x[position[id_train]]
    if x_train.shape != raw_train.shape or not torch.allclose(x_train * std + mean, raw_train, atol=1e-4, rtol=1e-4):
        centred = x_train.shape == raw_train.shape and torch.allclose(x_train.mean(0), torch.zeros(features), atol=1e-3)
        fail(
            "labels-misaligned" if centred else "not-normalized",
            observed="the training inputs, un-normalised with the returned mean and std, do not match the rows "
            "of x that their labels come from",
            expected="train_set[i] == ((x[r] - mean) / std, y[r]) for the same row r",
            cause="inputs and labels indexed with different row orders (the inputs are centred, but they are not "
            "the rows their labels name)" if centred else "the training inputs are scaled with other statistics "
            "than the mean and std returned, or with another formula than (x - mean) / std, or left raw",
            where=where,
        )
    if torch.allclose(mean, x.mean(0), atol=1e-5) and not torch.allclose(raw_train.mean(0), x.mean(0), atol=1e-5):
        fail(
            "stats-from-all-data",
            observed="mean equals the mean of all rows, validation included",
            expected="statistics of the training rows only",
            cause="computing mean/std before splitting leaks validation information into training",
            where=where,
        )
    if mean.shape != (features,) or not torch.allclose(mean, raw_train.mean(0), atol=1e-4):
        fail(
            "wrong-stats",
            observed=f"mean = {mean.tolist()}",
            expected=f"{raw_train.mean(0).tolist()}, the per-feature mean of the training rows",
            cause="the mean is reduced over the wrong dimension (dim 0 is the rows)" if mean.shape != (features,)
            else "the mean is taken over other rows than the training rows",
            where=where,
        )
    reference_std = raw_train.std(0)
    varying = reference_std > 1e-6
    if std.shape != (features,) or not torch.allclose(std[varying], reference_std[varying], rtol=2e-2):
        fail(
            "wrong-stats",
            observed=f"std = {std.tolist()}",
            expected=f"{reference_std.tolist()}, the per-feature std of the training rows",
            cause="the std is reduced over the wrong dimension or over every value at once (dim 0 is the rows)"
            if std.shape != (features,) or len(set(std[varying].tolist())) == 1
            else "the std is taken over other rows than the training rows, or is another spread (a variance, a range)",
            where=where,
        )
    raw_val = x[position[id_val]]
    if x_val.shape != raw_val.shape or not torch.allclose(x_val * std + mean, raw_val, atol=1e-4, rtol=1e-4):
        own = x_val.shape == raw_val.shape and torch.allclose(
            x_val.mean(0)[varying], torch.zeros(int(varying.sum())), atol=1e-4)
        fail(
            "val-own-stats" if own else "not-normalized",
            observed="the validation inputs are not (x - mean) / std with the training statistics"
            + (" (they were normalised with their own)" if own else ""),
            expected="both splits normalised with the same training mean and std",
            cause="normalising the validation split with its own statistics: the model would see a shifted input "
            "at test time" if own else "the validation inputs are scaled with other statistics than the mean and "
            "std returned, or with another formula, or left raw",
            where=where,
        )
    again_val_ids = _unpack_split(seen["again"], where)[3]
    if not torch.equal(again_val_ids, id_val):
        fail(
            "not-reproducible",
            observed="two calls with the same seed give different validation rows",
            expected="the split is determined by `seed`",
            cause="the permutation draws from the global RNG (torch.randperm without generator=), or from a "
            "generator not seeded with `seed`",
            where=where,
        )
    return (f"{n} rows: disjoint shuffled {len(id_train)}/{len(id_val)} split, training statistics (a constant "
            "feature included), reproducible")


def _judge_nonfinite(x: torch.Tensor, x_train: torch.Tensor, x_val: torch.Tensor, mean: torch.Tensor,
                     std: torch.Tensor, where: str) -> NoReturn:
    """NaN or inf came out: name the features, and whether they are the constant ones (std 0)."""
    columns = set()
    for values in (x_train, x_val):
        if values.dim() == 2 and values.shape[1] == x.shape[1]:
            columns |= set((~torch.isfinite(values)).any(0).nonzero().flatten().tolist())
    for stat in (mean, std):
        if stat.shape == (x.shape[1],):
            columns |= set((~torch.isfinite(stat)).nonzero().flatten().tolist())
    constant = set((x.std(0) == 0).nonzero().flatten().tolist())
    named = f"feature{'s' if len(columns) != 1 else ''} {sorted(columns)}" if columns else "the returned tensors"
    if columns and columns <= constant:
        observed = f"NaN or inf in {named}, which {'is' if len(columns) == 1 else 'are'} constant in x (std 0)"
        cause = "dividing by a zero standard deviation: the std of a constant feature is not guarded"
    else:
        observed = f"NaN or inf in {named}"
        cause = "dividing by a zero or NaN statistic (an unguarded std of 0, a std of a single row) or NaN in the " \
            "statistics"
    fail("nonfinite", observed=observed, expected="finite values: guard the std, e.g. std.clamp_min(1e-8)",
         cause=cause, where=where)
