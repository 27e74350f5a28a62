"""10-precision, the probe.

Ask for the precision of each described device, then of this machine's device (recorded with its support).
"""

from __future__ import annotations

from collections.abc import Callable

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register(
    "10-precision",
    hints=Hints(
        nudge="Tested in order: fp32 on a CPU; bf16 if the device's autocast supports it; otherwise fp16, but only "
        "on a CUDA GPU where fp16 autocast and the GradScaler both work; otherwise fp32.",
        concept="Mixed precision pays where the hardware computes in 16 bits (a GPU's tensor cores). On a CPU bf16 "
        "autocast runs, but emulated unless the processor has bf16 instructions: fp32 there, as `harness env` "
        "recommends. bf16 has float32's range and needs no scaler: first choice wherever else autocast runs it. "
        "fp16 needs a GradScaler and is only worth it on CUDA tensor cores.",
        solution="if device_type == 'cpu': return 'fp32'; if precisions['bf16_autocast']: return 'bf16'; if "
        "device_type == 'cuda' and precisions['fp16_autocast'] and precisions['grad_scaler']: return 'fp16'; "
        "return 'fp32'",
        section="2. Precision: ask the device"),
    requires={
        "not-a-precision": Requirement(
            "returns one of the strings 'bf16', 'fp16', 'fp32' (the names fit(precision=...) takes)",
            hint="fit(precision=...) takes a name, not a dtype: which three strings does the exercise list?"),
        "bf16-on-cpu": Requirement(
            "fp32 on a CPU, even where its bf16 autocast runs",
            hint="Which precision does `harness env` recommend for a CPU, and why: is bf16 there computed by the "
            "hardware or emulated?"),
        "bf16-unsupported": Requirement(
            "bf16 only where precisions['bf16_autocast'] is True",
            hint="A T4 is a CUDA GPU without native bf16: which entry of precisions tells you bf16 works?"),
        "fp16-over-bf16": Requirement(
            "bf16 before fp16 wherever bf16 autocast works",
            hint="When both work, which one needs no GradScaler and cannot overflow? Test that one first."),
        "fp16-off-cuda": Requirement(
            "fp16 only on a CUDA GPU (device_type == 'cuda')",
            hint="On a CPU or an Apple GPU fp16 is no training option here: which device type may get fp16?"),
        "fp16-without-scaler": Requirement(
            "fp16 only where both fp16 autocast and the GradScaler work",
            hint="fp16 without loss scaling loses small gradients: which two entries must both be True?"),
        "no-amp": Requirement(
            "mixed precision on a GPU that supports it (bf16, else fp16 on CUDA), fp32 otherwise",
            hint="fp32 is the CPU's and the last resort: which GPUs of the check support bf16 or fp16 with a "
            "scaler?"),
    },
)
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
