"""15-pad-collate, the probe: Call `pad_collate` on each case's sequences (copies); record what it returned."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.instruments import collect
from harness.contract.registry import register


def collate_cases(case: Case) -> list[tuple[str, list[torch.Tensor], float | int]]:
    """(description, sequences, pad_value) of each call. Visible: int64 tokens padded with 0 where a real token
    is 0 too, int32 tokens padded with 9, and float32 values padded with -1.0 where a real value is -1.0.
    Hidden: other lengths, a batch of one, equal lengths, other pad values."""
    generator = torch.Generator().manual_seed(case.seeded(151 if case.hidden else 150))

    def tokens(lengths: Sequence[int], dtype: torch.dtype, pad: int) -> list[torch.Tensor]:
        rows = [torch.randint(1, 9, (n,), generator=generator).to(dtype) for n in lengths]
        rows[0][min(1, len(rows[0]) - 1)] = pad  # a real token equal to the pad value
        return rows

    def values(lengths: Sequence[int], pad: float) -> list[torch.Tensor]:
        rows = [torch.randn(n, generator=generator) for n in lengths]
        rows[-1][0] = pad
        return rows

    if not case.hidden:
        return [("int64 tokens, pad_value=0", tokens([3, 5, 1, 4], torch.int64, 0), 0),
                ("int32 tokens, pad_value=9", tokens([2, 4], torch.int32, 9), 9),
                ("float32 values, pad_value=-1.0", values([2, 6, 4], -1.0), -1.0)]
    return [("int64 tokens, pad_value=0", tokens([6, 2, 7, 7, 3], torch.int64, 0), 0),
            ("int32 tokens, pad_value=3", tokens([4, 1, 3], torch.int32, 3), 3),
            ("one sequence", tokens([5], torch.int64, 0), 0),
            ("sequences of equal length", tokens([3, 3, 3], torch.int64, 0), 0),
            ("float32 values, pad_value=0.5", values([1, 3, 8], 0.5), 0.5)]


@register(
    "15-pad-collate",
    hints=Hints(
        nudge="Make a (batch, longest) tensor full of pad_value with the sequences' dtype, copy each sequence into "
        "the start of its row, and build the mask from the lengths.",
        concept="Padding makes sequences of different lengths one rectangular tensor; the mask (True at real "
        "tokens) is the only reliable record of which positions are real: a real token can equal the pad value, "
        "so the mask comes from the lengths, never from comparing values with pad_value.",
        solution="padded = nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=pad_value)\n"
        "mask = torch.arange(padded.shape[1]) < torch.tensor([len(s) for s in sequences])[:, None]",
        section="1. Variable-length batches: padding and masks",
    ),
    requires={
        "not-a-pair": Requirement("returns a pair (padded, mask) of tensors",
                                  hint="What does your return statement hand back? The exercise asks for two tensors."),
        "wrong-shape": Requirement(
            "padded is (batch, longest length): batch first, as long as the longest sequence",
            hint="Print padded.shape for three sequences of lengths 2, 5 and 3: you should see (3, 5). "
            "pad_sequence puts time first unless told otherwise."),
        "wrong-dtype": Requirement(
            "padded keeps the sequences' dtype",
            hint="Print padded.dtype for int64 tokens: torch.zeros and torch.full make float32 unless you pass dtype."),
        "wrong-values": Requirement(
            "each sequence's values sit, in order, at the start of its row, rows in the order given",
            hint="Print padded for two short sequences: is each row the sequence followed by padding, in the "
            "order you were given them?"),
        "wrong-pad-value": Requirement(
            "the positions after each sequence hold pad_value",
            hint="Call it with pad_value=-1 and look at the end of the shorter rows: what fills them?"),
        "mask-not-bool": Requirement(
            "mask is a bool tensor", hint="Print mask.dtype: a comparison (<, ==) gives bool, arithmetic does not."),
        "wrong-mask": Requirement(
            "mask has padded's shape and is True exactly at real tokens",
            hint="Put a real token equal to pad_value in one sequence: is its position True in your mask? "
            "And which value marks a real token, True or False?"),
    },
)
def probe_pad_collate(pad_collate: Callable[..., Any], *, case: Case) -> dict:
    """Call `pad_collate` on each case's sequences (copies); record what it returned."""
    def record(item: tuple[str, list[torch.Tensor], float | int]) -> dict:
        _, sequences, pad = item
        returned = pad_collate([s.clone() for s in sequences], pad)
        return {"returned": tuple(returned) if isinstance(returned, (tuple, list)) else returned,
                "kind": type(returned).__name__}

    return {"results": collect(collate_cases(case), record)}
