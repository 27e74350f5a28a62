"""05-choose-precision, the probe.

Call `choose` on the case's device types and bf16 supports, then with unknown device types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register


def _outcome(call: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """What `call(*args)` did, as data: {"returned": value} or {"raised": "Type: text", "value_error": bool}."""
    try:
        return {"returned": call(*args)}
    except Exception as error:  # the student's code raised: recorded, judged in the order of the calls
        return {"raised": f"{type(error).__name__}: {error}"[:500], "value_error": isinstance(error, ValueError)}


# The visible calls: each device type of the text once, each bf16 support twice (every requirement is decided here,
# the Apple GPU with bf16 included), but only half of the eight known inputs, so that what the student course holds
# of the reference's answers (recorded on this case) does not answer the other half.
VISIBLE_CALLS = (("cpu", False), ("cuda", True), ("mps", True), ("xpu", False))


def precision_calls(case: Case) -> tuple[list[tuple[str, bool]], tuple[str, ...]]:
    """The (device_type, bf16_supported) calls to check, and the unknown device types to reject.

    The visible case calls `VISIBLE_CALLS`; the hidden case calls the four known inputs the visible case leaves out
    first, then the visible ones, and rejects one more unknown device type."""
    if not case.hidden:
        return list(VISIBLE_CALLS), ("tpu", "gpu", "")
    known = [(d, bf16) for d in ("xpu", "mps", "cuda", "cpu") for bf16 in (True, False)]
    return sorted(known, key=lambda call: call in VISIBLE_CALLS), ("", "gpu", "tpu", "ipu")


@register("05-choose-precision")
def probe_choose_precision(choose: Callable[[str, bool], tuple[torch.dtype, bool]], *, case: Case) -> dict:
    """Call `choose` on the case's device types and bf16 supports, then with unknown device types."""
    calls, unknown = precision_calls(case)
    return {"choices": collect(calls, lambda call: _outcome(choose, *call)),
            "unknown": [_outcome(choose, d, True) for d in unknown]}
