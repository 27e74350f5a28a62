"""05-choose-precision, the judge.

bf16 without a scaler where supported, fp16 with one otherwise; ValueError for unknown devices. A failure shows
the expected (dtype, use_scaler) of a visible input only: on an input only the hidden case calls, it names the rule
the answer breaks, not the answer.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson05.choose_precision import VISIBLE_CALLS, precision_calls
from harness.contract.case import Case
from harness.contract.compare import fail_raised, judged
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges
from harness.contract.wire import Opaque
from harness.judges.lesson05.common import _name


@recorded
def reference_choose_precision(device_type: str, bf16_supported: bool) -> tuple[torch.dtype, bool]:
    """bf16 where the device has it (fp32's range: no scaler needed), else fp16 with a GradScaler."""
    if device_type not in ("cpu", "cuda", "mps", "xpu"):
        raise ValueError(f"unknown device type {device_type!r}: expected cpu, cuda, mps or xpu")
    return (torch.bfloat16, False) if bf16_supported else (torch.float16, True)


@judges(
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
def judge_choose_precision(seen: dict, *, case: Case) -> str:
    """bf16 without a scaler where supported, fp16 with one otherwise; ValueError for unknown devices."""
    calls, unknown = precision_calls(case)
    for (device_type, bf16), result in judged(calls, seen["choices"]):
        if "raised" in result and result["value_error"] is True:
            fail(
                "known-device-rejected",
                observed=f"choose_precision({device_type!r}, {bf16}) raised {result['raised']}",
                expected=f"an answer (dtype, use_scaler) for {device_type!r}, one of the four device types the "
                "text lists (cpu, cuda, mps, xpu)",
                cause=f"the check of known device types leaves out {device_type!r}: it is rejected as unknown",
                where="the list of device types choose_precision accepts",
            )
        if "raised" in result:
            fail_raised(str(result["raised"]))
        _judge_choice(device_type, bf16, result["returned"])
    for device_type, result in zip(unknown, seen["unknown"], strict=True):
        if "raised" in result and result["value_error"] is not True:
            fail_raised(str(result["raised"]))
        if "raised" not in result:
            fail(
                "unknown-device-accepted",
                observed=f"choose_precision({device_type!r}, True) returned {result['returned']!r}",
                expected="a ValueError that names the unknown device type",
                cause="the function answers for any string instead of rejecting device types it does not know",
                where="the first lines of choose_precision: validate device_type before choosing",
            )
        message = str(result["raised"]).split(": ", 1)[-1]
        if device_type and device_type not in message:
            fail(
                "error-unnamed",
                observed=f"choose_precision({device_type!r}, True) raised {result['raised']}",
                expected=f"a ValueError whose message names the device type ({device_type!r})",
                cause="the message does not include the value it rejects",
                where="the raise ValueError(...) line: put device_type in its message",
            )
    device_types = ", ".join(dict.fromkeys(d for d, _ in calls))
    return f"right dtype and scaler choice for {device_types}, and unknown devices rejected"


def _judge_choice(device_type: str, bf16: bool, got: Any) -> None:
    """Fail unless `got` is the reference (dtype, use_scaler) pair for this device and bf16 support."""
    if not (isinstance(got, tuple) and len(got) == 2):
        fail(
            "not-a-pair",
            observed=f"choose_precision({device_type!r}, {bf16}) returned {got!r}",
            expected="a tuple (dtype, use_scaler), for example (torch.bfloat16, False)",
            cause="the function returns only the dtype, or a list/dict",
            where="the return statement of choose_precision",
        )
    dtype, use_scaler = got
    want_dtype, want_scaler = reference_choose_precision(device_type, bf16)
    situation = f"choose_precision({device_type!r}, bf16_supported={bf16})"
    shown = (device_type, bf16) in VISIBLE_CALLS  # a hidden input's expected pair is not shown: it is the answer
    support = "with" if bf16 else "without"
    if dtype == torch.float32:
        fail(
            "fp32-chosen",
            observed=f"{situation} chose float32",
            expected=f"{_name(want_dtype) if shown else 'bfloat16 or float16'}: every device type here runs "
            "autocast in a 16-bit format",
            cause="falling back to full precision instead of the 16-bit format the device has",
            where="the branch that handles this device type",
        )
    if dtype != want_dtype:
        fail(
            "bf16-not-preferred" if bf16 else "bf16-without-support",
            observed=f"{situation} chose {_name(dtype)}",
            expected=_name(want_dtype) if shown else f"the 16-bit format section 2 chooses for a device {support} "
            "bf16 support",
            cause=(
                "bf16 has float32's exponent range, so it needs no loss scaling: prefer it when supported"
                if bf16
                else "the device cannot run bf16, so fp16 is the 16-bit format left"
            ),
            where="the condition on bf16_supported",
        )
    if isinstance(use_scaler, Opaque) or bool(use_scaler) != want_scaler:
        fail(
            "fp16-without-scaler" if want_scaler else "needless-scaler",
            observed=f"{situation} returned use_scaler={use_scaler!r} with {_name(dtype)}",
            expected=f"use_scaler={want_scaler}" if shown
            else f"the use_scaler that goes with {_name(dtype)} (section 2)",
            cause=(
                "fp16's smallest normal number is about 6e-5: small gradients underflow to zero unless "
                "the loss is scaled up first"
                if want_scaler
                else "bf16 gradients do not underflow any sooner than float32's, so scaling buys nothing"
            ),
            where="the second element of the returned tuple",
        )
