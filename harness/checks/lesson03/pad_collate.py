"""03-pad-collate, the probe.

Record pad_collate's output on each batch of the case, and what a DataLoader using it yields.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from harness.checks.lesson03.common import _in_order
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register

Batch = list[tuple[torch.Tensor, torch.Tensor]]


def _random_batch(rng: np.random.Generator, size: int, max_len: int, features: int) -> Batch:
    lengths = rng.integers(1, max_len + 1, size=size)
    return [
        (torch.from_numpy(rng.standard_normal((int(n), features)).astype(np.float32)),
         torch.tensor(int(rng.integers(0, 5))))
        for n in lengths
    ]


def collate_batches(case: Case) -> list[Batch]:
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


def loader_dataset(case: Case) -> Batch:
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
    loader = _in_order(loader_dataset(case), collate_fn=pad_collate)
    return {"outputs": [pad_collate(batch) for batch in collate_batches(case)], "loader": list(loader)}
