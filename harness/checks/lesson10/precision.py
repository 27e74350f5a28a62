"""10-precision, the probe.

Ask for the precision of each described device, then of this machine's device (recorded with its support).
"""

from __future__ import annotations

from collections.abc import Callable

from harness.contract.case import Case
from harness.contract.registry import register
from harness.env import select_device, supported_precisions


def _support(bf16: bool, fp16: bool, scaler: bool) -> dict[str, bool]:
    return {"fp32": True, "bf16_autocast": bf16, "fp16_autocast": fp16, "grad_scaler": scaler}


_PRECISION_CASES = [  # a CPU whose autocast runs bf16 comes after the fp16 cases: each mistake meets its own first
    ("cuda", _support(True, True, True), "an Ampere or newer GPU (A100, H100, RTX 30xx)"),
    ("cuda", _support(False, True, True), "a pre-Ampere GPU (V100, T4): fp16 tensor cores, no native bf16"),
    ("cuda", _support(False, True, False), "a GPU whose GradScaler is unavailable"),
    ("cpu", _support(False, True, True), "a CPU without bf16 autocast (fp16 there is emulated, and slow)"),
    ("mps", _support(False, True, True), "an Apple GPU without bf16 (fp16 is only for CUDA here)"),
    ("cpu", _support(True, True, True), "a CPU whose autocast runs bf16 (emulated, unless it has bf16 instructions)"),
    # last: every mistake above meets its own case first; bf16 kept for CUDA alone meets this one
    ("mps", _support(True, True, True), "an Apple GPU with bf16"),
]


_HIDDEN_PRECISION_CASES = [
    ("cuda", _support(False, False, True), "a GPU whose fp16 autocast is unavailable"),
    ("cuda", _support(False, False, False), "a GPU without autocast"),
    ("cpu", _support(False, False, False), "a CPU without autocast"),
]


@register("10-precision")
def probe_precision(choose_precision: Callable[[str, dict[str, bool]], str], *, case: Case) -> dict:
    """Ask for the precision of each described device, then of this machine's device (recorded with its support)."""
    answers = [choose_precision(device_type, dict(precisions)) for device_type, precisions, _ in precision_cases(case)]
    device = select_device()
    precisions = supported_precisions(device)
    return {"answers": answers, "machine": {"device": str(device), "device_type": device.type,
                                            "precisions": dict(precisions),
                                            "answer": choose_precision(device.type, dict(precisions))}}


def precision_cases(case: Case) -> list[tuple[str, dict[str, bool], str]]:
    """(device type, what it supports, the precision it should train in) of each call: more when hidden."""
    return _PRECISION_CASES + (_HIDDEN_PRECISION_CASES if case.hidden else [])
