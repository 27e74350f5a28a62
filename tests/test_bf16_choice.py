"""One bf16 question, asked in one place (`harness.env.bf16_supported`): a T4 (compute capability 7.5), which
torch's `torch.cuda.is_bf16_supported()` calls bf16-capable because it counts emulation, gets fp16 with a
GradScaler on every path that chooses a precision; HARNESS_NO_BF16=1 makes a newer GPU answer as a T4 does.

The GPU is faked: torch.cuda answers as the named GPU would, and the probe's matmul under autocast counts as
running there in fp16 and in bf16, as it does on a real T4 (emulated): only the bf16 decision refuses it.
"""

from __future__ import annotations

import contextlib
import re

import pytest
import torch

from harness import env
from harness.amp import make_scaler, validate_precision
from harness.env import bf16_supported, recommended_precision, supported_precisions
from harness.fast import fast_precision
from harness.speed import supported_precision_names

CUDA = torch.device("cuda")
CPU = torch.device("cpu")


def fake_gpu(monkeypatch: pytest.MonkeyPatch, name: str, capability: tuple[int, int]) -> None:
    """torch.cuda answers as `name` of `capability` would: bf16 "supported" on every GPU when emulation counts
    (torch's default), natively from capability 8.0 (Ampere) on."""
    monkeypatch.delenv("HARNESS_NO_BF16", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True:
                        including_emulation or torch.cuda.get_device_capability() >= (8, 0))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    # the probe's matmul under autocast runs on any of them, in fp16 and in bf16 (emulated on a T4)
    monkeypatch.setattr(env, "_autocast_runs", lambda device, dtype: True)


def assert_every_choice_is_fp16_with_a_scaler(reason: str) -> None:
    """Every place that decides bf16 refuses it on the fake GPU, and the precision chosen is fp16 with a scaler."""
    assert bf16_supported(CUDA) is False
    precisions = supported_precisions(CUDA)  # what `harness env`, `harness doctor` and the lessons read
    assert precisions == {"fp32": True, "bf16_autocast": False, "fp16_autocast": True, "grad_scaler": True}
    precision, why = recommended_precision(CUDA, precisions)  # `harness doctor`, the showcase
    assert precision == "fp16" and why == f"{reason}: fp16 with a GradScaler"
    assert make_scaler(CUDA, precision).is_enabled()
    assert supported_precision_names(CUDA) == ["fp32", "fp16"]  # `compare_precisions`, benchmarks/gpu_precision.py
    with pytest.raises(ValueError, match="^" + re.escape(f"{reason}: use precision='fp16' (with its GradScaler)")):
        validate_precision("bf16", CUDA)  # fit, fast_fit and the speed measurements given precision="bf16"
    validate_precision("fp16", CUDA)
    assert fast_precision(CUDA) == "fp32"  # fast_fit's "auto" and benchmarks/gpu_speedrun.py: it has no scaler


def test_a_t4_is_refused_bf16_although_torch_counts_its_emulation(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, "Tesla T4", (7, 5))
    assert torch.cuda.is_bf16_supported(), "the fake counts emulated bf16, as torch does on a T4"
    assert_every_choice_is_fp16_with_a_scaler("Tesla T4 has no native bf16 (it would emulate it, slower than fp32)")


def test_an_ampere_gpu_trains_in_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """No false alarm: capability 8.0 keeps bf16 on every path."""
    fake_gpu(monkeypatch, "NVIDIA A100", (8, 0))
    assert bf16_supported(CUDA) is True
    assert recommended_precision(CUDA, supported_precisions(CUDA))[0] == "bf16"
    assert fast_precision(CUDA) == "bf16" and supported_precision_names(CUDA) == ["fp32", "bf16", "fp16"]
    validate_precision("bf16", CUDA)
    assert not make_scaler(CUDA, "bf16").is_enabled()


def test_harness_no_bf16_makes_an_ampere_gpu_answer_as_a_t4(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, "NVIDIA H100", (9, 0))
    monkeypatch.setenv("HARNESS_NO_BF16", "1")
    assert_every_choice_is_fp16_with_a_scaler(
        "bf16 is refused on NVIDIA H100 by HARNESS_NO_BF16=1 (as on a GPU without native bf16)")
    assert bf16_supported(CPU), "the CPU keeps its bf16 autocast: the variable speaks of GPUs"
    validate_precision("bf16", CPU)
    monkeypatch.setenv("HARNESS_NO_BF16", "0")
    assert bf16_supported(CUDA) is True


def test_an_unknown_harness_no_bf16_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, "NVIDIA A100", (8, 0))
    monkeypatch.setenv("HARNESS_NO_BF16", "yes")
    with pytest.raises(ValueError, match=r"^HARNESS_NO_BF16='yes': set it to 1 to refuse bf16 on CUDA GPUs"):
        bf16_supported(CUDA)
