"""03-pad-collate, the judge.

pad_collate(list of ((L_i, F) tensor, label)) -> (padded (B, max L, F), lengths int64, labels), on random
batches.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson03.pad_collate import Batch, collate_batches, loader_dataset
from harness.contract.case import Case
from harness.contract.compare import same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson03.common import _tensor


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
        if not same_values(padded[i, : len(seq)], seq, dtype=False):
            # Reordered: another row holds sequence i exactly, zeros after it.
            sorted_match = any(same_values(padded[j, : len(seq)], seq, dtype=False) and not padded[j, len(seq):].any()
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
    if labels.shape != expected_labels.shape or not same_values(labels, expected_labels, dtype=False):
        fail(
            "wrong-labels",
            observed=f"labels = {labels.tolist()}",
            expected=f"{expected_labels.tolist()}, stacked in batch order",
            cause="the labels are not stacked into one tensor of shape (batch,)"
            if labels.shape != expected_labels.shape else "the labels are reordered or altered",
            where=where,
        )


@judges(
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
def judge_pad_collate(seen: dict, *, case: Case) -> str:
    """pad_collate(list of ((L_i, F) tensor, label)) -> (padded (B, max L, F), lengths int64, labels), on random
    batches."""
    batches = collate_batches(case)
    for batch, out in zip(batches, seen["outputs"], strict=True):
        _judge_collate_output(out, batch)
    # Through a real DataLoader too: the collate must work where it is used.
    dataset = loader_dataset(case)
    for start, out in zip(range(0, len(dataset), 4), seen["loader"], strict=True):
        _judge_collate_output(out, dataset[start: start + 4])
    return f"{len(batches)} random and edge-case batches and a DataLoader: shape, values, zero padding, lengths, labels"
