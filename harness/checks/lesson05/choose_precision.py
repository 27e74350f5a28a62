"""05-choose-precision, the probe.

Call `choose` for each known device type and bf16 support, then with unknown device types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register(
    "05-choose-precision",
    hints=Hints(
        nudge="Which of the two 16-bit formats keeps float32's exponent range? Only the other one needs loss "
        "scaling.",
        concept="bf16 has float32's 8 exponent bits: gradients do not underflow, no scaler. fp16 has 5: small "
        "gradients underflow unless the loss is scaled. Prefer bf16 where the device has it.",
        solution="if device_type not in ('cpu', 'cuda', 'mps', 'xpu'): raise ValueError(f'unknown device type "
        "{device_type!r}')\nreturn (torch.bfloat16, False) if bf16_supported else (torch.float16, True)",
        section="2. Choosing the precision for a device",
    ),
    requires={
        "not-a-pair": Requirement("returns a tuple (dtype, use_scaler)",
                                  hint="Print what your function returns: is it a pair, in that order?"),
        "fp32-chosen": Requirement("chooses a 16-bit format on every device type",
                                   hint="Every device type of the exercise runs autocast in 16 bits: which two "
                                   "formats are there to choose from?"),
        "bf16-not-preferred": Requirement("prefers bf16 where the device supports it",
                                          hint="When bf16_supported is True, which format needs no loss scaling?"),
        "bf16-without-support": Requirement("falls back to fp16 where bf16 is not supported",
                                            hint="When bf16_supported is False, which 16-bit format is left?"),
        "fp16-without-scaler": Requirement("asks for a GradScaler with fp16",
                                           hint="What happens to a gradient of 1e-8 in fp16? What prevents it?"),
        "needless-scaler": Requirement("asks for no GradScaler with bf16",
                                       hint="Does bf16's range let small gradients underflow any sooner than "
                                       "float32's?"),
        "known-device-rejected": Requirement("answers for every device type of the text: cpu, cuda, mps and xpu",
                                             hint="Which four device types does the exercise list? Each gets a "
                                             "(dtype, use_scaler) answer."),
        "unknown-device-accepted": Requirement("raises ValueError for a device type outside cpu, cuda, mps, xpu",
                                               hint="What does your function do with choose_precision('tpu', True)?"),
        "error-unnamed": Requirement("the ValueError names the device type",
                                     hint="Read your error message as a user who typed 'tpu': does it say which "
                                     "value was wrong?"),
    },
)
def probe_choose_precision(choose: Callable[[str, bool], tuple[torch.dtype, bool]], *, case: Case) -> dict:
    """Call `choose` for each known device type and bf16 support, then with unknown device types."""
    calls, unknown = precision_calls(case)
    return {"choices": collect(calls, lambda call: _outcome(choose, *call)),
            "unknown": [_outcome(choose, d, True) for d in unknown]}
