"""`harness doctor` and the one definition of "bf16 is supported" that `harness.amp` and `harness env` share."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch

from harness import cli
from harness.amp import validate_precision
from harness.doctor import dataloader_workers, diagnose, run_kernel, runtime_and_storage
from harness.env import bf16_supported, environment_report, recommended_precision, supported_precisions

CUDA = torch.device("cuda")


def fake_gpu(monkeypatch: pytest.MonkeyPatch, name: str, *, native_bf16: bool) -> None:
    """torch.cuda answers as `name` would: every GPU "supports" bf16 with emulation, Ampere on natively."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: including_emulation or native_bf16)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)


def test_a_gpu_without_native_bf16_trains_in_fp16(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, "Tesla T4", native_bf16=False)
    assert torch.cuda.is_bf16_supported(), "the fake reports emulated bf16, as torch does on a T4"
    assert bf16_supported(CUDA) is False
    # The bf16 probe answers from the definition before it touches the device (fp16 is tried for real).
    assert supported_precisions(CUDA)["bf16_autocast"] is False
    t4 = {"fp32": True, "bf16_autocast": False, "fp16_autocast": True, "grad_scaler": True}
    assert recommended_precision(CUDA, t4)[0] == "fp16"
    with pytest.raises(ValueError, match=r"Tesla T4 has no native bf16 .* use precision='fp16'"):
        validate_precision("bf16", CUDA)
    validate_precision("fp16", CUDA)


def test_an_ampere_gpu_trains_in_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, "NVIDIA A100", native_bf16=True)
    assert bf16_supported(CUDA) is True
    validate_precision("bf16", CUDA)
    a100 = {"fp32": True, "bf16_autocast": True, "fp16_autocast": True, "grad_scaler": True}
    assert recommended_precision(CUDA, a100)[0] == "bf16"
    assert recommended_precision(CUDA, {**a100, "bf16_autocast": False, "grad_scaler": False})[0] == "fp32"


def test_the_cpu_trains_in_fp32_and_env_says_so() -> None:
    report = environment_report("cpu")
    assert report["precision"] == "fp32" and bf16_supported(torch.device("cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_whose_kernel_fails_is_named_with_what_to_do() -> None:
    """A real kernel launched on CUDA where none runs: the message says what failed and how to go on."""
    problem = run_kernel(CUDA)
    assert problem is not None and problem.startswith("a kernel on cuda failed: ")
    assert problem.endswith("set HARNESS_DEVICE=cpu.")


def test_the_cpu_passes_its_kernel_and_the_diagnosis_is_complete() -> None:
    assert run_kernel(torch.device("cpu")) is None
    diagnosis = diagnose("cpu")
    assert diagnosis.kernel == "ok" and diagnosis.precision == "fp32"
    assert diagnosis.dataloader_workers == dataloader_workers(diagnosis.cpu_cores)
    assert any(line.startswith("16 export: ") for line in diagnosis.lessons)


def test_workers_leave_the_training_process_a_core() -> None:
    assert [dataloader_workers(n) for n in (1, 2, 3, 4, 16, 64)] == [0, 0, 2, 3, 8, 8]


def test_hosted_runtimes_are_told_where_work_survives(tmp_path: Path) -> None:
    drive = tmp_path / "MyDrive"
    runtime, storage = runtime_and_storage({"COLAB_RELEASE_TAG": "release-colab"}, drive)
    assert runtime == "Google Colab" and "mount Google Drive" in storage
    drive.mkdir()
    assert f"go to {drive / 'pytorch-training-lab'} " in runtime_and_storage({"COLAB_RELEASE_TAG": "release-colab"},
                                                                            drive)[1]
    kaggle = tmp_path / "working"
    kaggle.mkdir()
    runtime, storage = runtime_and_storage({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, drive, kaggle)
    assert runtime == "Kaggle" and f"go to {kaggle}, which is kept only in a saved version" in storage
    assert runtime_and_storage({}, drive) == ("this machine", "files persist (a local disk)")


def test_doctor_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--json", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["kernel"] == "ok"
    assert cli.main(["doctor", "--device", "tpu"]) == 2
    assert capsys.readouterr().err.startswith("harness doctor: error: Unknown device 'tpu'")
