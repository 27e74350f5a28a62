"""Lesson 15: what several of its judges share: the tolerance their comparisons use."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from harness.contract.compare import close_values

matches = partial(close_values, rtol=1e-4, atol=1e-4, dtype=False, expected_nan=True)
"""`compare.close_values` at lesson 15's tolerance, in float64 whatever the dtypes; NaN matches only where the
reference has NaN (the references of some wrong answers hold NaN, those of right answers never do)."""

LOW_PRECISION = (torch.bfloat16, torch.float16)


def matches_for(dtype: torch.dtype) -> Callable[..., bool]:
    """`matches` at the tolerance of results computed in `dtype`: bfloat16 and float16 keep 8 and 11 bits of
    mantissa, so a right answer computed in them is within a few parts in a thousand of the float64 reference
    (2e-2 leaves room for the sums); float32 and float64 at lesson 15's tolerance."""
    if dtype in LOW_PRECISION:
        return partial(close_values, rtol=2e-2, atol=2e-2, dtype=False, expected_nan=True)
    return matches


def dtype_cause(got: torch.dtype, wanted: torch.dtype) -> str:
    """Why a loss came back in `got` for logits in `wanted`: an upcast not cast back, or another cast."""
    if wanted in LOW_PRECISION and got == torch.float32:
        return (f"the loss was computed in float32 (an upcast such as logits.float(), or a float32 tensor in the "
                f"formula) and returned as it is: for {wanted} logits it must come back in {wanted}, "
                f"with .to(logits.dtype) at the end")
    return "the computation was cast to another dtype (.double() for accuracy, .half()) and not brought back"


def dtype_hint(wanted: torch.dtype) -> str:
    """The first hint for a loss returned in another dtype than `wanted`, the logits'."""
    return (f"Call your loss on logits.to(torch.{str(wanted).removeprefix('torch.')}) and print the dtype of what "
            "it returns: which line changed it, and is it cast back before the return?")
