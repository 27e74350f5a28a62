"""harness.env: device selection (argument, HARNESS_DEVICE, best available), its errors, and the report."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from harness import cli
from harness.env import (
    _grad_scaler_works,
    available_devices,
    environment_report,
    format_environment_report,
    persistent_root,
    select_device,
    supported_precisions,
    work_folder,
)


@pytest.fixture(autouse=True)
def no_device_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_DEVICE", raising=False)


def test_default_is_the_best_available_device() -> None:
    best = torch.device("cuda:0") if torch.cuda.is_available() else torch.device(available_devices()[0])
    assert select_device() == best
    assert select_device("auto") == best
    assert available_devices()[-1] == "cpu"


def test_argument_and_variable_choose_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    assert select_device(" CPU ") == torch.device("cpu")
    assert select_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setenv("HARNESS_DEVICE", "cpu")
    assert select_device() == torch.device("cpu")
    monkeypatch.setenv("HARNESS_DEVICE", "cuda:99")
    assert select_device("cpu") == torch.device("cpu"), "the argument wins over the variable"


@pytest.mark.parametrize("name", ["tpu", "cuda:x", "GPU", ""])  # not "gpu": conftest skips tests with that keyword
def test_unknown_device_is_a_clear_error(name: str) -> None:
    with pytest.raises(ValueError, match=r"Unknown device .* Devices available here: .*cpu.* HARNESS_DEVICE"):
        select_device(name)


def test_unknown_device_in_the_variable_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_DEVICE", "tpu")
    with pytest.raises(ValueError, match="from the HARNESS_DEVICE environment variable"):
        select_device()


def test_device_index_beyond_the_machine_is_unavailable() -> None:
    with pytest.raises(ValueError, match=r"'cuda:99' .* is not available on this machine\. Devices available here"):
        select_device("cuda:99")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="'cuda' .* not available .* Devices available here: cpu"):
        select_device("cuda")
    monkeypatch.setenv("HARNESS_DEVICE", "cuda")
    with pytest.raises(ValueError, match="HARNESS_DEVICE"):
        select_device()


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a machine without Apple MPS")
def test_mps_off_apple_silicon_is_unavailable() -> None:
    with pytest.raises(ValueError, match="'mps' .* not available"):
        select_device("mps")


def test_report_describes_this_machine() -> None:
    report = environment_report("cpu")
    assert report["torch"] == torch.__version__
    assert report["python"] == ".".join(map(str, sys.version_info[:3]))
    assert report["device"] == "cpu"
    assert report["cpu_threads"] == torch.get_num_threads()
    assert report["device_memory_gb"] > 0
    assert set(report["precisions"]) == {"fp32", "bf16_autocast", "fp16_autocast", "grad_scaler"}
    assert report["precisions"]["fp32"] is True
    # CPU autocast computes matmuls in bfloat16 in every torch the course supports.
    assert report["precisions"]["bf16_autocast"] is True
    assert json.loads(json.dumps(report)) == report


def test_report_rejects_a_device_it_cannot_describe() -> None:
    with pytest.raises(ValueError, match="not available"):
        environment_report("cuda:99")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_grad_scaler_probe_says_no_where_cuda_is_missing() -> None:
    # GradScaler("cuda") disables itself with a warning here; the probe must report that, not leak the warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _grad_scaler_works(torch.device("cuda")) is False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_precisions_match_the_hardware() -> None:
    precisions = supported_precisions(torch.device("cuda"))
    assert precisions["fp16_autocast"] and precisions["grad_scaler"]
    assert precisions["bf16_autocast"] == torch.cuda.is_bf16_supported(including_emulation=False)


def test_formatted_report_is_one_line_per_entry() -> None:
    report = environment_report("cpu")
    text = format_environment_report(report)
    lines = text.splitlines()
    assert len(lines) == len(report)
    assert "torch:" in text and torch.__version__ in text
    assert "bf16_autocast yes" in text


def test_env_subcommand_prints_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["env", "--json", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "cpu"
    assert cli.main(["env", "--device", "cpu"]) == 0
    assert "precisions:" in capsys.readouterr().out


def test_env_subcommand_reports_a_bad_device_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["env", "--device", "tpu"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("harness env: error: Unknown device 'tpu'")


@pytest.mark.slow
def test_env_command_runs_as_a_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "harness", "env", "--json", "--device", "cpu"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert json.loads(result.stdout)["torch"] == torch.__version__


def test_top_level_help_imports_no_subcommand(capsys):
    """`harness --help` lists the subcommands without importing their modules (torch, nbgrader...)."""
    import subprocess
    import sys

    code = ("import sys; from harness.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'nbgrader', 'pandas')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "showcase" in out and "grade" in out
    assert out.strip().endswith("[]")


COLAB = {"COLAB_RELEASE_TAG": "release-colab"}
KAGGLE = {"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}


def test_runs_go_to_drive_on_colab_only_when_it_is_mounted(tmp_path: Path) -> None:
    drive, kaggle = tmp_path / "MyDrive", tmp_path / "kaggle-working"
    assert persistent_root(COLAB, drive, kaggle) is None  # Drive not mounted: nothing on Colab survives
    drive.mkdir()
    assert persistent_root(COLAB, drive, kaggle) == drive / "pytorch-training-lab"
    run = work_folder("lesson08", COLAB, drive, kaggle)
    assert run.is_dir() and run.parent == drive / "pytorch-training-lab" and run.name.startswith("lesson08-")
    assert work_folder("lesson08", COLAB, drive, kaggle) != run  # every call a new folder


def test_runs_go_to_kaggle_working_on_kaggle(tmp_path: Path) -> None:
    drive, kaggle = tmp_path / "MyDrive", tmp_path / "kaggle-working"
    drive.mkdir()  # a folder of that name outside Colab is not a mounted Drive
    assert persistent_root(KAGGLE, drive, kaggle) is None
    kaggle.mkdir()
    assert persistent_root(KAGGLE, drive, kaggle) == kaggle
    assert work_folder("lesson10", KAGGLE, drive, kaggle).parent == kaggle


def test_elsewhere_runs_stay_in_a_temporary_folder(tmp_path: Path) -> None:
    drive, kaggle = tmp_path / "MyDrive", tmp_path / "kaggle-working"
    drive.mkdir()
    kaggle.mkdir()
    for environ in ({}, {"JUPYTERHUB_USER": "ada"}):
        assert persistent_root(environ, drive, kaggle) is None
        run = work_folder("lesson16", environ, drive, kaggle)
        assert run.is_dir() and run.parent == Path(tempfile.gettempdir()) and run.name.startswith("lesson16-")
        run.rmdir()
    assert list(drive.iterdir()) == [] and list(kaggle.iterdir()) == []
