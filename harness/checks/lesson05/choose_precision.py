"""05-choose-precision, the probe.

Call `choose` for each known device type and bf16 support, then with unknown device types.
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


def precision_calls(case: Case) -> tuple[list[tuple[str, bool]], tuple[str, ...]]:
    """The (device_type, bf16_supported) calls to check, and the unknown device types to reject."""
    device_types = ("xpu", "mps", "cuda", "cpu") if case.hidden else ("cpu", "cuda", "mps", "xpu")
    unknown = ("", "gpu", "tpu") if case.hidden else ("tpu", "gpu", "")
    return [(d, bf16) for d in device_types for bf16 in (True, False)], unknown


@register("05-choose-precision")
def probe_choose_precision(choose: Callable[[str, bool], tuple[torch.dtype, bool]], *, case: Case) -> dict:
    """Call `choose` for each known device type and bf16 support, then with unknown device types."""
    calls, unknown = precision_calls(case)
    return {"choices": collect(calls, lambda call: _outcome(choose, *call)),
            "unknown": [_outcome(choose, d, True) for d in unknown]}
