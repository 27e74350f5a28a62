"""10-precision, the judge: Described devices, then this machine's own device as supported_precisions reports it."""

from __future__ import annotations

from typing import Any, NoReturn

from harness.checks.lesson10.common import PRECISIONS
from harness.checks.lesson10.precision import precision_cases
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import Unrecorded, recorded
from harness.contract.registry import judges
from harness.judges.lesson10.common import _support_of


@recorded
def reference_precision(device_type: str, precisions: dict[str, bool]) -> str:
    """fp32 on a CPU (as `harness.env.recommended_precision`: bf16 autocast runs there, but emulated unless the
    processor has bf16 instructions); else bf16 where autocast supports it; fp16 (with a GradScaler) on CUDA GPUs
    without bf16; else fp32."""
    if device_type == "cpu":
        return "fp32"
    if precisions.get("bf16_autocast"):
        return "bf16"
    if device_type == "cuda" and precisions.get("fp16_autocast") and precisions.get("grad_scaler"):
        return "fp16"
    return "fp32"


def _precision_failure(got: Any, expected: str, device_type: str, precisions: dict[str, bool], what: str) -> NoReturn:
    seen = f"choose_precision({device_type!r}, {precisions}) returned {got!r} for {what}"
    if got not in PRECISIONS:
        fail("not-a-precision", observed=seen,
             expected=f"one of the strings {PRECISIONS} that fit(precision=...) takes",
             cause="returning a dtype (torch.bfloat16) or another name", where="the return values of choose_precision")
    if got == "bf16" and device_type == "cpu" and precisions["bf16_autocast"]:
        fail("bf16-on-cpu", observed=seen, expected="'fp32': on a CPU, as `harness env` recommends",
             cause="bf16 chosen because the CPU's autocast runs it: unless the processor has bf16 instructions it is "
             "emulated there, and can be several times slower than fp32 (section 10 measures both on yours)",
             where="test device_type == 'cpu' first, and return 'fp32'")
    if got == "bf16":
        fail("bf16-unsupported", observed=seen, expected=f"{expected!r}: bf16_autocast is False on this device",
             cause="bf16 chosen without asking the device; where it is not supported torch emulates it (slower than "
             "fp32) or refuses it", where="choose bf16 only when precisions['bf16_autocast'] is True")
    if got == "fp16" and expected == "bf16":
        fail("fp16-over-bf16", observed=seen, expected="'bf16': the device supports it",
             cause="fp16 preferred although bf16 works: fp16 needs a GradScaler and overflows above 65504, bf16 has "
             "float32's range and needs neither", where="test bf16 first")
    if got == "fp16" and device_type != "cuda":
        fail("fp16-off-cuda", observed=seen, expected=f"{expected!r}",
             cause="fp16 on a device other than a CUDA GPU: on a CPU it is emulated (slower than fp32)",
             where="fp16 only when device_type == 'cuda'")
    if got == "fp16":
        missing = " and ".join(f"precisions[{k!r}]" for k in ("fp16_autocast", "grad_scaler") if not precisions[k])
        fail("fp16-without-scaler", observed=seen, expected=f"{expected!r}: {missing} is False",
             cause=f"fp16 chosen although {missing} is False: fp16 needs both autocast and a GradScaler (without "
             "loss scaling, small gradients underflow to zero)", where="require precisions['fp16_autocast'] and "
             "precisions['grad_scaler'] for fp16")
    if expected == "bf16" and device_type != "cuda":
        fail("no-amp", observed=seen, expected="'bf16': this GPU's autocast runs bf16",
             cause=f"bf16 kept for CUDA GPUs alone: a {device_type!r} GPU whose bf16 autocast works trains in bf16 "
             "too (only fp16 is for CUDA alone)", where="the bf16 test: precisions['bf16_autocast'], whatever the "
             "GPU's device_type",
             hint="Which of your tests asks for device_type == 'cuda'? The text reserves only fp16 for CUDA.")
    fail("no-amp", observed=seen, expected=f"{expected!r}",
         cause="mixed precision left off where the device supports it: bf16 where bf16 autocast works, else fp16 "
         "with a GradScaler on a CUDA GPU", where="the order of the tests in choose_precision")


@judges(
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
def judge_precision(seen: dict, *, case: Case) -> str:
    """Described devices, then this machine's own device as supported_precisions reports it."""
    machine = seen["machine"]
    if not (isinstance(machine["device"], str) and machine["device_type"] in ("cpu", "cuda", "mps", "xpu")):
        raise ValueError("the recorded device is not a device")
    own = (machine["device_type"], _support_of(machine["precisions"]), f"this machine's {machine['device']}")
    cases = precision_cases(case)
    for (device_type, precisions, what), got in zip(cases, seen["answers"], strict=True):
        expected = reference_precision(device_type, precisions)
        if got != expected:
            _precision_failure(got, expected, device_type, precisions, what)
    try:
        expected = reference_precision(*own[:2])
    except Unrecorded:  # the student course holds the answers for the machine the release ran on (and the cases)
        return (f"the right precision for {len(cases)} devices; this machine's {machine['device']} (support "
                f"{own[1]}) is judged by the grader, whose judge holds the reference")
    if machine["answer"] != expected:
        _precision_failure(machine["answer"], expected, *own)
    return f"the right precision for {len(cases) + 1} devices, this machine's {machine['device']} included"
