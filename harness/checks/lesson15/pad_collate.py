"""15-pad-collate, the probe: Call `pad_collate` on each case's sequences (copies); record what it returned."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.contract.case import Case
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


@register("15-pad-collate")
def probe_pad_collate(pad_collate: Callable[..., Any], *, case: Case) -> dict:
    """Call `pad_collate` on each case's sequences (copies); record what it returned."""
    def record(item: tuple[str, list[torch.Tensor], float | int]) -> dict:
        _, sequences, pad = item
        returned = pad_collate([s.clone() for s in sequences], pad)
        return {"returned": tuple(returned) if isinstance(returned, (tuple, list)) else returned,
                "kind": type(returned).__name__}

    return {"results": collect(collate_cases(case), record)}
