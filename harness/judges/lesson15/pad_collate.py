"""15-pad-collate, the judge.

(padded, mask): batch first, dtype kept, values in place, pad_value after them, bool mask from lengths.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.checks.lesson15.pad_collate import collate_cases
from harness.contract.case import Case
from harness.contract.compare import judged, same_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges


@recorded
def _reference_collate(sequences: Sequence[torch.Tensor], pad: float) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in sequences])
    padded = torch.nn.utils.rnn.pad_sequence(list(sequences), batch_first=True, padding_value=pad)
    return padded, torch.arange(padded.shape[1]) < lengths[:, None]


@judges(
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
def judge_pad_collate(seen: dict, *, case: Case) -> str:
    """(padded, mask): batch first, dtype kept, values in place, pad_value after them, bool mask from lengths."""
    for (description, sequences, pad), result in judged(collate_cases(case), seen["results"]):
        want, want_mask = _reference_collate(sequences, pad)
        returned = result["returned"]
        if not (isinstance(returned, tuple) and len(returned) == 2
                and all(isinstance(t, torch.Tensor) for t in returned)):
            got = f"a {result['kind']} of {len(returned)} items" if isinstance(returned, tuple) else type_name(returned)
            fail("not-a-pair", observed=f"pad_collate returned {got} for {description}",
                 expected="a pair (padded, mask) of tensors",
                 cause="only the padded tensor is returned, or the lengths instead of a mask, or something extra",
                 where="the return statement of pad_collate")
        padded, mask = returned
        if padded.dtype == torch.bool and mask.dtype != torch.bool and want.dtype != torch.bool:
            fail("not-a-pair", observed=f"the first tensor returned is bool, the second {mask.dtype} "
                 f"({description})", expected="the pair in the order (padded, mask)",
                 cause="the pair is returned in the other order: (mask, padded)",
                 where="the return statement of pad_collate")
        batch, longest = want.shape
        if padded.shape != want.shape:
            cause = ("time first: pad_sequence without batch_first=True gives (longest, batch)"
                     if padded.shape == (longest, batch) else
                     "a length other than the longest sequence's (a fixed length, or the shortest), or an extra "
                     "dimension")
            fail("wrong-shape", observed=f"padded has shape {tuple(padded.shape)} for {description}",
                 expected=f"(batch, longest length) = {tuple(want.shape)}", cause=cause,
                 where="where padded is created")
        if padded.dtype != want.dtype:
            fail("wrong-dtype", observed=f"padded is {padded.dtype} for {description}",
                 expected=f"{want.dtype}, the sequences' dtype",
                 cause="a new tensor made without dtype= (torch.zeros, torch.full and torch.ones default to "
                 "float32; torch.full with an integer pad value gives int64)",
                 where="where padded is created")
        if not same_values(padded[want_mask], want[want_mask], dtype=False):
            rows = [torch.cat([s, want.new_full((longest - len(s),), pad)]) for s in sequences]
            left = torch.stack([torch.cat([want.new_full((longest - len(s),), pad), s]) for s in sequences])
            by_length = torch.stack([rows[i] for i in sorted(range(batch), key=lambda i: -len(sequences[i]))])
            cause = ("the padding went before the tokens (left padding): the exercise puts each sequence at the "
                     "start of its row" if same_values(padded, left, dtype=False) else
                     "the sequences were sorted by length: keep them in the order given (the labels of a batch "
                     "follow that order)" if same_values(padded, by_length, dtype=False) else
                     "the tokens were written to the wrong positions or rows (an index off by one, a reversed "
                     "sequence, rows in another order)")
            fail("wrong-values", observed=f"the real positions of padded differ from the sequences for {description}",
                 expected=f"row i starts with sequence i; here {want[0].tolist()} for row 0", cause=cause,
                 where="where each sequence is copied into padded")
        if not same_values(padded[~want_mask], want[~want_mask], dtype=False):
            found = sorted({float(v) for v in padded[~want_mask].tolist()})[:4]
            fail("wrong-pad-value", observed=f"padded positions hold {found} for {description}",
                 expected=f"pad_value = {pad}",
                 cause="the pad_value argument is not used (pad_sequence's padding_value defaults to 0, torch.zeros "
                 "fills with 0)", where="the padding_value / fill value where padded is created")
        if mask.dtype != torch.bool:
            fail("mask-not-bool", observed=f"mask is {mask.dtype} for {description}", expected="torch.bool",
                 cause="the mask was made with arithmetic or converted (.long(), .float()), or lengths were returned",
                 where="where the mask is built")
        if mask.shape != want_mask.shape or not same_values(mask, want_mask, dtype=False):
            if mask.shape != want_mask.shape:
                cause = f"its shape is {tuple(mask.shape)}, padded's is {tuple(want.shape)}"
            elif same_values(mask, ~want_mask, dtype=False):
                cause = "it is inverted: True at padding (the convention of nn.MultiheadAttention's " \
                        "key_padding_mask); this lesson's mask is True at real tokens"
            elif same_values(mask, want != pad, dtype=False):
                cause = "it was computed from the values (padded != pad_value): a real token equal to pad_value " \
                        "is marked as padding. Build it from the lengths"
            else:
                cause = "positions are marked in the wrong rows or columns (a length off by one?)"
            fail("wrong-mask", observed=f"mask differs from the real tokens' positions for {description}",
                 expected=f"True at the first len(sequence) positions of each row, e.g. {want_mask[0].tolist()} "
                 "for row 0", cause=cause, where="where the mask is built")
    return "padded is batch first with the sequences' dtype and pad_value after them; the mask comes from the lengths"
